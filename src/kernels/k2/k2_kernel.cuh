// K2: FlashAttention-2's forward (Algorithm 1) fused into one kernel, on CUDA cores (fp32 FMA).
//
// One CTA computes one 64-row Q tile of one (batch, head): Q is loaded to shared memory once, KV
// tiles of 64 keys stream through, S = Q K^T is built in shared memory, the online softmax turns it
// into P in place, and O accumulates in registers. 256 threads = 64 row groups of 4 threads; the 4
// threads of a row group own one query row: each computes 16 of the tile's 64 scores and a quarter
// of the row's head_dim in O, and the group combines row max / row sum with two shuffles.
//
// Shared memory (d=128: 17 KB + 17 KB + 17 KB = 51 KB):
//   sQ  (64, d)  Q tile, loaded once
//   sKV (64, d)  K_j, then overwritten with V_j in the same iteration (K_j is dead once S_j is built)
//   sS  (64, 64) fp32, S_j, overwritten in place by P_j
// Rows are padded by 16 bytes so the 8 rows a warp touches fall in different banks.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"

namespace hfa::k2 {

constexpr int kBlockM = 64;        // query rows per CTA
constexpr int kBlockN = 64;        // keys per KV tile
constexpr int kThreadsPerRow = 4;  // a row group
constexpr int kThreads = kBlockM * kThreadsPerRow;
constexpr int kScoresPerThread = kBlockN / kThreadsPerRow;  // columns part, part+4, ..., part+60
static_assert(kBlockM == kBlockN, "load_tile moves 64-row tiles of Q and of K/V alike");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct SmemLayout {
  static constexpr int kRowElems = D + kElemsPer16B;  // +16 bytes: shifts each row by 4 banks
  static constexpr int kSRow = kBlockN + 4;           // +16 bytes, same reason
  static constexpr int kQElems = kBlockM * kRowElems;
  static constexpr int kKVElems = kBlockN * kRowElems;
  static constexpr size_t kBytes = (kQElems + kKVElems) * 2 + kBlockM * kSRow * sizeof(float);
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
    *reinterpret_cast<uint4*>(smem + r * SmemLayout<D>::kRowElems + cv * kElemsPer16B) = val;
  }
}

// Row max / row sum over the 4 consecutive lanes of a row group.
__device__ __forceinline__ float row_group_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) k2_forward_kernel(FwdProblem p) {
  using Smem = SmemLayout<D>;
  constexpr int kVecs = D / kElemsPer16B / kThreadsPerRow;  // O vectors per thread: part, part+4, ...
  extern __shared__ uint4 smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sKV = sQ + Smem::kQElems;
  float* sS = reinterpret_cast<float*>(sKV + Smem::kKVElems);

  const int q0 = blockIdx.x * kBlockM, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / p.group_size();
  const int row = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int qi = q0 + row;  // this row group's query; rows >= seqlen_q compute but never store
  const int offset = p.causal_offset();

  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
  load_tile<T, D>(sQ, q, p.q_row_stride, q0, p.seqlen_q);

  // Causal block skipping: the tile's last row sees keys < min(seqlen_q, q0 + 64) + offset.
  int kv_end = p.seqlen_k;
  if (p.causal) kv_end = min(kv_end, min(p.seqlen_q, q0 + kBlockM) + offset);
  const int n_tiles = kv_end > 0 ? (kv_end + kBlockN - 1) / kBlockN : 0;

  const float scale_log2 = p.softmax_scale * kLog2e;  // softmax in base 2: exp(x) = exp2(x log2 e)
  float m = -INFINITY;                                 // running row max (log2 domain)
  float l = 0.f;                                       // running row sum of exp2(s - m)
  float acc[kVecs][kElemsPer16B] = {};                 // unnormalized O, this thread's quarter

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int k0 = tile * kBlockN;
    __syncthreads();  // the previous iteration's readers of sKV (V) are done
    load_tile<T, D>(sKV, k, p.k_row_stride, k0, p.seqlen_k);
    __syncthreads();

    // S_j = Q_i K_j^T for columns part, part + 4, ... of this row.
    float s[kScoresPerThread] = {};
    for (int c8 = 0; c8 < D / kElemsPer16B; ++c8) {
      float qf[kElemsPer16B];
      unpack8<T>(*reinterpret_cast<const uint4*>(sQ + row * Smem::kRowElems + c8 * kElemsPer16B), qf);
#pragma unroll
      for (int jj = 0; jj < kScoresPerThread; ++jj) {
        const int col = jj * kThreadsPerRow + part;
        float kf[kElemsPer16B];
        unpack8<T>(*reinterpret_cast<const uint4*>(sKV + col * Smem::kRowElems + c8 * kElemsPer16B), kf);
#pragma unroll
        for (int e = 0; e < kElemsPer16B; ++e) s[jj] = fmaf(qf[e], kf[e], s[jj]);
      }
    }

    // Online softmax: scale, mask, new running max, rescale factor for the old state.
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kScoresPerThread; ++jj) {
      const int key = k0 + jj * kThreadsPerRow + part;
      const bool visible = key < p.seqlen_k && (!p.causal || key <= qi + offset);
      s[jj] = visible ? s[jj] * scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    const float m_new = fmaxf(m, row_group_max(tile_max));
    const float m_safe = m_new == -INFINITY ? 0.f : m_new;  // no key seen yet: avoid -inf - -inf
    const float alpha = exp2f(m - m_safe);
    float row_sum = 0.f;
#pragma unroll
    for (int jj = 0; jj < kScoresPerThread; ++jj) {
      const float pj = exp2f(s[jj] - m_safe);
      row_sum += pj;
      sS[row * Smem::kSRow + jj * kThreadsPerRow + part] = pj;  // P_j over S_j, in place
    }
    l = l * alpha + row_group_sum(row_sum);
    m = m_new;
#pragma unroll
    for (int vv = 0; vv < kVecs; ++vv)
#pragma unroll
      for (int e = 0; e < kElemsPer16B; ++e) acc[vv][e] *= alpha;

    __syncthreads();  // everyone is done with K_j: overwrite it with V_j
    load_tile<T, D>(sKV, v, p.v_row_stride, k0, p.seqlen_k);
    __syncthreads();

    // O_i += P_j V_j: the row group reads its own row of P; each thread its quarter of d.
    for (int c4 = 0; c4 < kBlockN / 4; ++c4) {
      const float4 p4 = *reinterpret_cast<const float4*>(sS + row * Smem::kSRow + c4 * 4);
      const float pj[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int e4 = 0; e4 < 4; ++e4) {
        const T* vrow = sKV + (c4 * 4 + e4) * Smem::kRowElems;
#pragma unroll
        for (int vv = 0; vv < kVecs; ++vv) {
          float vf[kElemsPer16B];
          unpack8<T>(*reinterpret_cast<const uint4*>(vrow + (vv * kThreadsPerRow + part) * kElemsPer16B), vf);
#pragma unroll
          for (int e = 0; e < kElemsPer16B; ++e) acc[vv][e] = fmaf(pj[e4], vf[e], acc[vv][e]);
        }
      }
    }
  }

  if (qi >= p.seqlen_q) return;
  // The l = 0 guard: a row that saw no key has acc = 0; write O = 0 and LSE = -inf, not NaN.
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + qi * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
  for (int vv = 0; vv < kVecs; ++vv) {
    float out[kElemsPer16B];
#pragma unroll
    for (int e = 0; e < kElemsPer16B; ++e) out[e] = acc[vv][e] * inv_l;
    *reinterpret_cast<uint4*>(o + (vv * kThreadsPerRow + part) * kElemsPer16B) = pack8<T>(out);
  }
  if (p.lse && part == 0)
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] =
        l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
}

// Host side: launch for one (dtype, head_dim); instantiated in k2_hdim<D>.cu.
template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  const size_t smem = SmemLayout<D>::kBytes;
  cudaError_t err = cudaFuncSetAttribute(k2_forward_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid((p.seqlen_q + kBlockM - 1) / kBlockM, p.heads_q, p.batch);
  k2_forward_kernel<T, D><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace hfa::k2
