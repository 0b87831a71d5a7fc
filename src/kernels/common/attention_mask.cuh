// Which keys a query sees, which KV tiles need the mask at all, and what becomes of a score
// before the softmax: the two policy types of every kernel that takes the score variants (STYLE.md:
// masks and score transforms are types composed at compile time, not branches in the hot loop),
// on any architecture: the WGMMA kernels (k6, bwd_sm90: sm90/common/mask.cuh applies them to CuTe
// fragments) and fa2 (sm80/common/fragment_mask.cuh, to mma.sync fragments).
//
// Masks (a query sees an interval of keys; only the tiles crossing its ends pay for the compare):
//   AttentionMask  no mask or causal (bottom-right aligned: query i sees key j iff
//                  j <= i + (seqlen_k - seqlen_q)); the visible keys are a prefix [0, key_limit).
//   LocalMask      a sliding window (FwdProblem::local): query i sees the keys
//                  [i + offset - window_left, i + offset + window_right]; tiles wholly outside a
//                  Q tile's windows are never visited (nor loaded).
// Keys at or past seqlen_k (zero-filled by the loads) are never seen. A Q tile visits KV tiles
// [begin, end); of those, [unmasked_begin, unmasked_end) are fully visible to every row of the Q
// tile.
//
// Scores (applied to S = Q K^T as it leaves the tensor cores):
//   PlainScore    softmax_scale * s
//   SoftcapScore  softcap * tanh(softmax_scale * s / softcap) (FwdProblem::softcap)
// Either is transform(s) times log2_factor(p) in the softmax's log2 units.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "kernels/common/fa2_cuda_core.cuh"
#include "kernels/common/numeric.cuh"

namespace hfa {

struct KvRange {
  int begin, end;                     // KV tiles the Q tile visits
  int unmasked_begin, unmasked_end;   // of those, the ones that need no mask
  __device__ bool empty() const { return end <= begin; }
  __device__ bool needs_mask(int tile) const { return tile < unmasked_begin || tile >= unmasked_end; }
};

struct AttentionMask {
  static constexpr bool kInterval = false;  // the visible keys are a prefix
  int seqlen_k, offset;
  bool causal;

  __device__ explicit AttentionMask(const FwdProblem& p)
      : seqlen_k(p.seqlen_k), offset(p.causal_offset()), causal(p.causal) {}

  // Query `query` sees exactly the keys [0, key_limit(query)).
  __device__ int key_limit(int query) const {
    return causal ? min(seqlen_k, query + offset + 1) : seqlen_k;
  }
  __device__ int key_begin(int) const { return 0; }
  // Every query in [q_first, q_last] sees every key in [k0, k_end) (the backward's block test).
  __device__ bool covers(int q_first, int /*q_last*/, int /*k0*/, int k_end) const {
    return k_end <= key_limit(q_first);
  }

  __device__ static KvRange range(const FwdProblem& p, int q0, int block_m, int block_n) {
    const int n_tiles = fa2::kv_tiles(p, q0, block_m, block_n);
    int full = p.seqlen_k / block_n;  // tiles whose keys are all < seqlen_k
    if (p.causal) full = min(full, max(0, (q0 + p.causal_offset() + 1) / block_n));
    return KvRange{0, n_tiles, 0, min(full, n_tiles)};
  }
};

struct LocalMask {
  static constexpr bool kInterval = true;
  int seqlen_k, lower, upper;  // query i sees [i + lower, i + upper] (within the keys)

  __device__ explicit LocalMask(const FwdProblem& p)
      : seqlen_k(p.seqlen_k),
        lower(p.causal_offset() - p.window_left),
        upper(p.causal_offset() + p.window_right) {}

  // Query `query` sees exactly the keys [key_begin(query), key_limit(query)). The API bounds
  // seqlen_q + seqlen_k and the window by 2^30, so none of these sums overflows.
  __device__ int key_begin(int query) const { return max(0, query + lower); }
  __device__ int key_limit(int query) const { return min(seqlen_k, query + upper + 1); }
  __device__ bool covers(int q_first, int q_last, int k0, int k_end) const {
    return k0 >= key_begin(q_last) && k_end <= key_limit(q_first);
  }

  __device__ static KvRange range(const FwdProblem& p, int q0, int block_m, int block_n) {
    const LocalMask m(p);
    const int q_last = min(p.seqlen_q, q0 + block_m) - 1;  // the tile's last real row
    const int lo = m.key_begin(q0), hi = m.key_limit(q_last);
    if (hi <= lo) return KvRange{0, 0, 0, 0};
    const int begin = lo / block_n, end = (hi + block_n - 1) / block_n;
    // Fully visible: starts at or after the last row's first key, ends at or before the first
    // row's last key (and the keys' end).
    const int first_full = max(begin, (m.key_begin(q_last) + block_n - 1) / block_n);
    const int end_full = min(end, max(0, m.key_limit(q0)) / block_n);
    return KvRange{begin, end, first_full, max(first_full, end_full)};
  }
};

struct PlainScore {
  static constexpr bool kTransforms = false;
  PlainScore() = default;
  __device__ explicit PlainScore(const FwdProblem&) {}
  // The factor that takes a score to the softmax's log2 units.
  __device__ static float log2_factor(const FwdProblem& p) { return p.softmax_scale * fa2::kLog2e; }
  __device__ __forceinline__ float transform(float s) const { return s; }
};

// s -> tanh(s * softmax_scale / softcap); the softmax then takes it times softcap * log2(e).
struct SoftcapScore {
  static constexpr bool kTransforms = true;
  float pre;
  __device__ explicit SoftcapScore(const FwdProblem& p) : pre(p.softmax_scale / p.softcap) {}
  __device__ static float log2_factor(const FwdProblem& p) { return p.softcap * fa2::kLog2e; }
  __device__ __forceinline__ float transform(float s) const { return tanh_approx(s * pre); }
};

// The keys of a KV block (block-relative) that `query` sees: [begin, limit) by the Mask; a block
// that needs no mask (it crosses no causal diagonal, window edge or end of the keys) pays for no
// compares.
template <class Mask>
struct VisibleKeys {
  int begin, limit;
  __device__ VisibleKeys(const Mask& mask, bool needs_mask, int query, int k0, int block_n)
      : begin(Mask::kInterval && needs_mask ? mask.key_begin(query) - k0 : 0),
        limit(needs_mask ? mask.key_limit(query) - k0 : block_n) {}
  __device__ bool sees(int key) const { return key < limit && (!Mask::kInterval || key >= begin); }
};

// A transforming Score (softcap): s (the raw score) becomes P, from the forward's tanh
// (tanh_approx: P matches the LSE it gave), and dp becomes dS = P (dP - D) tanh'(.), tanh' to t's
// relative precision (tanh_derivative: 1 - t * t lost most of it where |t| nears 1). stat: the
// row's (LSE2, D).
template <class Score>
__device__ __forceinline__ void transformed_p_and_ds(const Score& score, float scale_log2, float2 stat,
                                                     bool seen, float& s, float& dp) {
  const float x = s * score.pre;
  const float t = tanh_approx(x);
  const float prob = seen ? exp2_approx(fmaf(t, scale_log2, -stat.x)) : 0.f;
  s = prob;
  dp = prob * (dp - stat.y) * tanh_derivative(x, t);
}

}  // namespace hfa
