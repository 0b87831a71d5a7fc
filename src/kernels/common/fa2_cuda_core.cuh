// FA2's per-tile forward math on CUDA cores, shared by K2 (plain loads into padded rows) and the
// K3/K4.1 kernels (TMA into swizzled tiles): S = Q K^T, online softmax into P, O += P V, finalize.
//
// Thread layout: 256 threads = 64 row groups of 4. Row group `row` owns query row `row` of the
// 64-row tile; thread `part` of the group computes scores for columns part, part + 4, ..., and
// owns the 16-byte vectors part, part + 4, ... of the row's O. Row max / sum: two shuffles.
//
// Shared-memory tiles are read through a Tile policy, so the same math runs on any layout:
//   Tile::chunk(base, row, c8) -> pointer to elements [8 * c8, 8 * c8 + 8) of `row` (contiguous).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/quad_reduce.cuh"

namespace hfa::fa2 {

constexpr int kBlockM = 64;        // query rows per CTA
constexpr int kBlockN = 64;        // keys per KV tile
constexpr int kThreadsPerRow = 4;  // a row group
constexpr int kThreads = kBlockM * kThreadsPerRow;
constexpr int kScoresPerThread = kBlockN / kThreadsPerRow;  // columns part, part + 4, ...
constexpr int kSRow = kBlockN + 4;  // fp32 row of S/P in shared memory, +16 bytes against conflicts
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Row-major rows of D elements padded by 16 bytes (4 banks): K2's layout.
template <int D>
struct PaddedRows {
  static constexpr int kRowElems = D + kElemsPer16B;
  static constexpr int kTileElems = kBlockM * kRowElems;
  template <typename T>
  __device__ static T* chunk(T* base, int row, int c8) {
    return base + row * kRowElems + c8 * kElemsPer16B;
  }
};

// Per-thread state of one query row: running max m (log2 domain), running sum l, its quarter of O.
template <int D>
struct RowState {
  static constexpr int kVecs = D / kElemsPer16B / kThreadsPerRow;
  float m = -INFINITY;
  float l = 0.f;
  float acc[kVecs][kElemsPer16B] = {};
};

// This thread's scores of S_j = Q_i K_j^T (unscaled), columns part, part + 4, ...
template <typename T, int D, typename TileQ, typename TileK>
__device__ __forceinline__ void score_row(const T* sQ, const T* sK, int row, int part,
                                          float (&s)[kScoresPerThread]) {
#pragma unroll
  for (int jj = 0; jj < kScoresPerThread; ++jj) s[jj] = 0.f;
  for (int c8 = 0; c8 < D / kElemsPer16B; ++c8) {
    float qf[kElemsPer16B];
    unpack8<T>(*reinterpret_cast<const uint4*>(TileQ::chunk(sQ, row, c8)), qf);
#pragma unroll
    for (int jj = 0; jj < kScoresPerThread; ++jj) {
      float kf[kElemsPer16B];
      unpack8<T>(*reinterpret_cast<const uint4*>(TileK::chunk(sK, jj * kThreadsPerRow + part, c8)), kf);
#pragma unroll
      for (int e = 0; e < kElemsPer16B; ++e) s[jj] = fmaf(qf[e], kf[e], s[jj]);
    }
  }
}

// Online softmax step on this thread's scores (already scaled to the log2 domain and masked with
// -inf): updates m and l, rescales O, and writes P_j into row `row` of sS.
template <int D>
__device__ __forceinline__ void softmax_update(float (&s)[kScoresPerThread], RowState<D>& st,
                                               float* sS, int row, int part) {
  float tile_max = -INFINITY;
#pragma unroll
  for (int jj = 0; jj < kScoresPerThread; ++jj) tile_max = fmaxf(tile_max, s[jj]);
  const float m_new = fmaxf(st.m, quad_max(tile_max));
  const float m_safe = m_new == -INFINITY ? 0.f : m_new;  // no key seen yet: avoid -inf - -inf
  const float alpha = exp2_approx(st.m - m_safe);
  float row_sum = 0.f;
#pragma unroll
  for (int jj = 0; jj < kScoresPerThread; ++jj) {
    const float p = exp2_approx(s[jj] - m_safe);
    row_sum += p;
    sS[row * kSRow + jj * kThreadsPerRow + part] = p;  // P_j over S_j, in place
  }
  st.l = st.l * alpha + quad_sum(row_sum);
  st.m = m_new;
#pragma unroll
  for (int vv = 0; vv < RowState<D>::kVecs; ++vv)
#pragma unroll
    for (int e = 0; e < kElemsPer16B; ++e) st.acc[vv][e] *= alpha;
}

// O_i += P_j V_j: the row group reads its own row of P; each thread its quarter of d.
template <typename T, int D, typename TileV>
__device__ __forceinline__ void accumulate_pv(const float* sS, const T* sV, RowState<D>& st,
                                              int row, int part) {
  for (int c4 = 0; c4 < kBlockN / 4; ++c4) {
    const float4 p4 = *reinterpret_cast<const float4*>(sS + row * kSRow + c4 * 4);
    const float pj[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
    for (int e4 = 0; e4 < 4; ++e4) {
#pragma unroll
      for (int vv = 0; vv < RowState<D>::kVecs; ++vv) {
        float vf[kElemsPer16B];
        unpack8<T>(*reinterpret_cast<const uint4*>(
                       TileV::chunk(sV, c4 * 4 + e4, vv * kThreadsPerRow + part)), vf);
#pragma unroll
        for (int e = 0; e < kElemsPer16B; ++e) st.acc[vv][e] = fmaf(pj[e4], vf[e], st.acc[vv][e]);
      }
    }
  }
}

// The l = 0 guard: a row that saw no key has acc = 0; it gets O = 0 and LSE = -inf, not NaN.
template <typename T, int D>
__device__ __forceinline__ void write_row(const FwdProblem& p, const RowState<D>& st, int b, int h,
                                          int qi, int part) {
  const float inv_l = st.l > 0.f ? 1.f / st.l : 0.f;
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + qi * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
  for (int vv = 0; vv < RowState<D>::kVecs; ++vv) {
    float out[kElemsPer16B];
#pragma unroll
    for (int e = 0; e < kElemsPer16B; ++e) out[e] = st.acc[vv][e] * inv_l;
    *reinterpret_cast<uint4*>(o + (vv * kThreadsPerRow + part) * kElemsPer16B) = pack8<T>(out);
  }
  if (p.lse && part == 0)
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] =
        st.l > 0.f ? (st.m + log2f(st.l)) * kLn2 : -INFINITY;
}

// Scale to the log2 domain and apply the causal / key-range mask, element by element.
__device__ __forceinline__ void scale_and_mask(float (&s)[kScoresPerThread], const FwdProblem& p,
                                               float scale_log2, int k0, int qi, int part) {
#pragma unroll
  for (int jj = 0; jj < kScoresPerThread; ++jj) {
    const int key = k0 + jj * kThreadsPerRow + part;
    const bool visible = key < p.seqlen_k && (!p.causal || key <= qi + p.causal_offset());
    s[jj] = visible ? s[jj] * scale_log2 : -INFINITY;
  }
}

// Number of KV tiles of `block_n` keys that the Q tile starting at q0 sees (causal block skipping:
// tiles right of the diagonal are never touched).
__host__ __device__ __forceinline__ int kv_tiles(const FwdProblem& p, int q0, int block_m, int block_n) {
  int kv_end = p.seqlen_k;
  if (p.causal) kv_end = min(kv_end, min(p.seqlen_q, q0 + block_m) + p.causal_offset());
  return kv_end > 0 ? (kv_end + block_n - 1) / block_n : 0;
}

}  // namespace hfa::fa2
