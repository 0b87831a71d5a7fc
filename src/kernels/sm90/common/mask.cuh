// Which keys a query sees, and which KV tiles need the mask at all.
//
// Causal is bottom-right aligned: query i sees key j iff j <= i + (seqlen_k - seqlen_q); keys at or
// past seqlen_k (zero-filled by the TMA) are never seen. A Q tile visits KV tiles [0, n_tiles)
// (tiles right of the diagonal are skipped); of those, tiles [0, n_unmasked) are fully visible to
// every row of the Q tile, so only the tiles crossing the diagonal or the end of the keys pay for
// the element-wise mask.
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/fa2_cuda_core.cuh"

namespace hfa::sm90 {

struct KvRange {
  int n_tiles;     // KV tiles the Q tile visits
  int n_unmasked;  // leading tiles that need no mask
};

struct AttentionMask {
  int seqlen_k, offset;
  bool causal;

  __device__ explicit AttentionMask(const FwdProblem& p)
      : seqlen_k(p.seqlen_k), offset(p.causal_offset()), causal(p.causal) {}

  // Query `query` sees exactly the keys [0, key_limit(query)).
  __device__ int key_limit(int query) const {
    return causal ? min(seqlen_k, query + offset + 1) : seqlen_k;
  }

  __device__ static KvRange range(const FwdProblem& p, int q0, int block_m, int block_n) {
    const int n_tiles = fa2::kv_tiles(p, q0, block_m, block_n);
    int full = p.seqlen_k / block_n;  // tiles whose keys are all < seqlen_k
    if (p.causal) full = min(full, max(0, (q0 + p.causal_offset() + 1) / block_n));
    return KvRange{n_tiles, min(full, n_tiles)};
  }
};

// Scales a tile of scores (a thread's (rows, cols) view, c_rc its (row, col) coordinates within
// the tile) to log2 units and, on tiles that need the mask, sets invisible scores to -inf. With
// kFoldScale (OnlineSoftmax<.., true>) the multiply happens inside the softmax's exponent instead,
// unless the scale is zero or negative (exponent_factor). q0 / k0: the tile's first query and key.
// The scale and the mask are separate passes, so that the mask is one compare (against an
// immediate: a column's offset from the thread's first column is a constant once unrolled) and
// one select per score. Folded into one pass with a runtime scale test, ptxas emitted two
// compares, an add and a predicated multiply per score: 13% more instructions than cuDNN at
// d = 64, causal, s = 512 (ncu; docs/WORKLOG.md, K6 eighth pass).
template <bool kFoldScale, class TS, class TC>
__device__ __forceinline__ void scale_and_mask(TS& s_rc, const TC& c_rc, const AttentionMask& mask,
                                               bool needs_mask, int q0, int k0, float scale_log2) {
  using namespace cute;
  if (!kFoldScale || !(scale_log2 > 0.f)) {
    CUTE_UNROLL
    for (int i = 0; i < size(s_rc); ++i) s_rc(i) *= scale_log2;
  }
  if (needs_mask) {
    const int col0 = get<1>(c_rc(0, 0));
    // One limit per row (a row's visible keys are a prefix), relative to the thread's first column.
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int limit = mask.key_limit(q0 + get<0>(c_rc(r, 0))) - k0 - col0;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c)
        if (get<1>(c_rc(r, c)) - col0 >= limit) s_rc(r, c) = -INFINITY;
    }
  }
}

}  // namespace hfa::sm90
