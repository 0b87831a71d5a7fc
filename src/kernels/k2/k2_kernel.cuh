// K2: FlashAttention-2's forward (Algorithm 1) fused into one kernel, on CUDA cores (fp32 FMA).
//
// One CTA computes one 64-row Q tile of one (batch, head): Q is loaded to shared memory once, KV
// tiles of 64 keys stream through, S = Q K^T is built in shared memory, the online softmax turns it
// into P in place, and O accumulates in registers (the math: kernels/common/fa2_cuda_core.cuh).
//
// Shared memory (d=128: 17 KB + 17 KB + 17 KB = 51 KB):
//   sQ  (64, d)  Q tile, loaded once
//   sKV (64, d)  K_j, then overwritten with V_j in the same iteration (K_j is dead once S_j is built)
//   sS  (64, 64) fp32, S_j, overwritten in place by P_j
// Rows are padded by 16 bytes so the 8 rows a warp touches fall in different banks.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "kernels/common/fa2_cuda_core.cuh"
#include "kernels/common/launch.cuh"

namespace hfa::k2 {

using namespace hfa::fa2;

template <int D>
struct SmemLayout {
  using Tile = PaddedRows<D>;
  static constexpr size_t kBytes = 2 * Tile::kTileElems * 2 + kBlockM * kSRow * sizeof(float);
};

// Copies rows [row0, row0 + 64) of one (batch, head) slice into shared memory as 16-byte vectors;
// rows at or past `rows_valid` are zero-filled so that masked keys multiply zeros, not garbage.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t row_stride, int row0,
                                          int rows_valid) {
  constexpr int kVecsPerRow = D / kElemsPer16B;
  for (int idx = threadIdx.x; idx < kBlockN * kVecsPerRow; idx += kThreads) {
    const int r = idx / kVecsPerRow, cv = idx % kVecsPerRow;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows_valid)
      val = *reinterpret_cast<const uint4*>(gmem + (row0 + r) * row_stride + cv * kElemsPer16B);
    *reinterpret_cast<uint4*>(PaddedRows<D>::chunk(smem, r, cv)) = val;
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) k2_forward_kernel(FwdProblem p) {
  using Tile = PaddedRows<D>;
  extern __shared__ uint4 smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sKV = sQ + Tile::kTileElems;
  float* sS = reinterpret_cast<float*>(sKV + Tile::kTileElems);

  const int q0 = blockIdx.x * kBlockM, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / p.group_size();
  const int row = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int qi = q0 + row;  // this row group's query; rows >= seqlen_q compute but never store

  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
  load_tile<T, D>(sQ, q, p.q_row_stride, q0, p.seqlen_q);

  const float scale_log2 = p.softmax_scale * kLog2e;  // softmax in base 2: exp(x) = exp2(x log2 e)
  RowState<D> st;
  const int n_tiles = kv_tiles(p, q0, kBlockM, kBlockN);
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int k0 = tile * kBlockN;
    __syncthreads();  // the previous iteration's readers of sKV (V) are done
    load_tile<T, D>(sKV, k, p.k_row_stride, k0, p.seqlen_k);
    __syncthreads();
    float s[kScoresPerThread];
    score_row<T, D, Tile, Tile>(sQ, sKV, row, part, s);
    scale_and_mask(s, p, scale_log2, k0, qi, part);
    softmax_update(s, st, sS, row, part);
    __syncthreads();  // everyone is done with K_j: overwrite it with V_j
    load_tile<T, D>(sKV, v, p.v_row_stride, k0, p.seqlen_k);
    __syncthreads();
    accumulate_pv<T, D, Tile>(sS, sKV, st, row, part);
  }
  if (qi < p.seqlen_q) write_row<T, D>(p, st, b, h, qi, part);
}

// Host side: launch for one (dtype, head_dim); instantiated in k2_hdim<D>.cu.
template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  const dim3 grid((p.seqlen_q + kBlockM - 1) / kBlockM, p.heads_q, p.batch);
  return launch_with_smem(k2_forward_kernel<T, D>, grid, kThreads, SmemLayout<D>::kBytes, stream, p);
}

}  // namespace hfa::k2
