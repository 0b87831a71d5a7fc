// FA2 backward (FlashAttention-2, Algorithm 2) on mma.sync tensor cores, for sm80 and newer.
// Three launches:
//   1. row_dot:  D_i = rowsum(dO_i * O_i) in fp32 (the paper's preprocessing step).
//   2. main:     one CTA per (KV block j, KV head, batch). K_j and V_j stay in shared memory and
//                dK_j, dV_j in registers while the CTA walks over every Q block i of every query
//                head that reads this KV head (GQA/MQA: the sum over the group happens on chip,
//                with no atomics for dK/dV). Per Q block:
//                  S = Q_i K_j^T, dP = dO_i V_j^T           (registers)
//                  P = exp(S - LSE_i) (recomputed), dS = P * (dP - D_i)
//                  dV_j += P^T dO_i, dK_j += dS^T Q_i       (P, dS through shared memory)
//                  dQ_i += dS K_j                           (fp32 atomics into the workspace)
//                Causal: Q blocks wholly before the KV block are skipped.
//   3. convert:  dQ = scale * dQ_accum in the output dtype and strides.
// Q_{i+1} and dO_{i+1} load (cp.async) while block i computes, where shared memory allows.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/fa2/fa2_forward.cuh"

namespace hfa::fa2 {

// ---- 1. D = rowsum(dO * O): one warp per query row ----------------------------------------------

constexpr int kRowDotWarps = 8;

template <typename T, int D>
__global__ void __launch_bounds__(32 * kRowDotWarps) fa2_row_dot_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  const int row = blockIdx.x * kRowDotWarps + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32;
  if (row >= p.seqlen_q) return;
  const T* o = static_cast<const T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride +
               row * p.o_row_stride;
  const T* dout = static_cast<const T*>(bp.dout) + b * bp.do_batch_stride +
                  h * bp.do_head_stride + row * bp.do_row_stride;
  float dot = 0.f;
  for (int c = lane; c < D / kElemsPer16B; c += 32) {
    float of[8], df[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(o + c * kElemsPer16B), of);
    unpack8<T>(*reinterpret_cast<const uint4*>(dout + c * kElemsPer16B), df);
#pragma unroll
    for (int e = 0; e < 8; ++e) dot += of[e] * df[e];
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  if (lane == 0) bp.row_dot[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + row] = dot;
}

// ---- 2. The main kernel --------------------------------------------------------------------------

// dst[0..1] += (a, b) in fp32 atomics: one 8-byte atomic on sm90 (half the L2 atomic operations),
// two 4-byte ones before. dst must be 8-byte aligned.
__device__ __forceinline__ void atomic_add_pair(float* dst, float a, float b) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// First Q block that sees any key of the KV block starting at k0 (causal block skipping).
__device__ __forceinline__ int backward_first_q_block(const FwdProblem& p, int k0, int block_m) {
  if (!p.causal) return 0;
  const int first_row = k0 - p.causal_offset();  // query i sees key k0 iff i >= k0 - offset
  return first_row <= 0 ? 0 : first_row / block_m;
}

template <typename T, class Shape>
__global__ void __launch_bounds__(Shape::kThreads) fa2_backward_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  constexpr int D = Shape::kHeadDim;
  constexpr int kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN, kStages = Shape::kStages;
  constexpr int kThreads = Shape::kThreads;
  // Per warp: 16-row MMA tiles, and n8 tiles of S and dP, of dK and dV, and of dQ (added 64
  // columns at a time).
  constexpr int kMT = Shape::kMTiles;
  constexpr int kSTiles = kBlockN / 8 / Shape::kSColWarps;
  constexpr int kKVTiles = D / 8 / Shape::kKVColWarps;
  constexpr int kDqTiles = D / 8 / Shape::kSColWarps;
  constexpr int kDqChunkTiles = kDqTiles < 8 ? kDqTiles : 8;
  using TileQ = SwizzledTile<kBlockM, D>;        // Q_i, dO_i
  using TileKV = SwizzledTile<kBlockN, D>;       // K_j, V_j (and dK, dV staged for the store)
  using TileP = SwizzledTile<kBlockM, kBlockN>;  // P and dS, [query][key]

  extern __shared__ uint4 smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + TileKV::kElems;
  T* sQ = sV + TileKV::kElems;       // kStages buffers
  T* sdO = sQ + kStages * TileQ::kElems;  // kStages buffers
  T* sP = sdO + kStages * TileQ::kElems;
  T* sdS = sP + TileP::kElems;

  const int k0 = blockIdx.x * kBlockN, hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's rows and first columns (fa2_shapes.h): of S, dP, dQ, and of dK, dV.
  const int row_w = 16 * kMT * (warp % Shape::kSRowWarps);
  const int s_col_w = (warp / Shape::kSRowWarps) * 8 * kSTiles;
  const int dq_col_w = (warp / Shape::kSRowWarps) * 8 * kDqTiles;
  const int kv_row_w = 16 * kMT * (warp % Shape::kKVRowWarps);
  const int kv_col_w = (warp / Shape::kKVRowWarps) * 8 * kKVTiles;
  const int group = p.group_size();

  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
  const int m_begin = backward_first_q_block(p, k0, kBlockM);
  const int m_count = max(0, ceil_div(p.seqlen_q, kBlockM) - m_begin);
  const int n_iters = group * m_count;  // (query head of the group, Q block) pairs

  // Iteration it works on query head h and the Q block starting at row q0; the next iteration's
  // (h, q0) is kept alongside (no integer division per iteration).
  struct QBlock {
    int h, q0;
  };
  const int q_end = (m_begin + m_count) * kBlockM;
  auto next_block = [&](QBlock blk) {
    blk.q0 += kBlockM;
    if (blk.q0 == q_end) blk.q0 = m_begin * kBlockM, ++blk.h;
    return blk;
  };
  auto load_q_do = [&](QBlock blk, int stage) {
    const int h = blk.h, q0 = blk.q0;
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
    const T* dout = static_cast<const T*>(bp.dout) + b * bp.do_batch_stride + h * bp.do_head_stride;
    load_rows_async<TileQ, kThreads>(sQ + stage * TileQ::kElems, q, p.q_row_stride, q0, p.seqlen_q);
    load_rows_async<TileQ, kThreads>(sdO + stage * TileQ::kElems, dout, bp.do_row_stride, q0,
                                     p.seqlen_q);
  };
  load_rows_async<TileKV, kThreads>(sK, k, p.k_row_stride, k0, p.seqlen_k);
  load_rows_async<TileKV, kThreads>(sV, v, p.v_row_stride, k0, p.seqlen_k);
  QBlock cur{hk * group, m_begin * kBlockM};
  if (n_iters > 0) load_q_do(cur, 0);
  cp_async_commit();

  // LSE and D of this lane's rows (g and g + 8 of each of the warp's 16-row tiles) in iteration
  // it, as loaded: loaded one iteration ahead, converted only when used (lse_to_log2), so nothing
  // waits for the loads until then. Rows past the end get LSE = +inf: P = 0, no gradient.
  using RowStats = float[kMT][2];
  auto load_row_stats = [&](QBlock blk, RowStats& lse, RowStats& row_dot) {
    const int h = blk.h, q0 = blk.q0;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = q0 + row_w + 16 * mt + lane / 4 + 8 * r;
        lse[mt][r] = INFINITY;
        row_dot[mt][r] = 0.f;
        if (row < p.seqlen_q) {
          lse[mt][r] = p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_row_stride];
          row_dot[mt][r] = bp.row_dot[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + row];
        }
      }
  };
  // LSE in base 2; a row that saw no key (LSE = -inf) gets +inf too: P = 0.
  auto lse_to_log2 = [](float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; };
  RowStats next_lse, next_row_dot;
  if (n_iters > 0) load_row_stats(cur, next_lse, next_row_dot);

  const float scale_log2 = p.softmax_scale * kLog2e;
  float dk[kMT][kKVTiles][4], dv[kMT][kKVTiles][4];
  zero(dk);
  zero(dv);

  for (int it = 0; it < n_iters; ++it) {
    const int stage = kStages == 2 ? it % 2 : 0;
    cp_async_wait<0>();  // this thread's copies of block it have landed
    // Everyone's copies are visible, and every warp is done with block it - 1: its P/dS tiles
    // and (two stages) the Q/dO buffer that block it + 1 now loads into.
    __syncthreads();
    if constexpr (kStages == 2) {
      if (it + 1 < n_iters) load_q_do(next_block(cur), (it + 1) % 2);
      cp_async_commit();
    }
    const T* sQi = sQ + stage * TileQ::kElems;
    const T* sdOi = sdO + stage * TileQ::kElems;
    const int h = cur.h, q0 = cur.q0;

    // This iteration's row statistics were loaded one iteration ago; load the next one's now, so
    // the global-load latency hides behind this block's GEMMs.
    RowStats lse_log2, row_dot;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        lse_log2[mt][r] = lse_to_log2(next_lse[mt][r]), row_dot[mt][r] = next_row_dot[mt][r];
    if (it + 1 < n_iters) load_row_stats(next_block(cur), next_lse, next_row_dot);

    {
      float s[kMT][kSTiles][4], dp[kMT][kSTiles][4];
      zero(s);
      zero(dp);
      warp_gemm<T, kMT, kSTiles, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV>(
          s, sQi, row_w, sK, s_col_w);
      warp_gemm<T, kMT, kSTiles, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV>(
          dp, sdOi, row_w, sV, s_col_w);
      const float factor =
          fold_scale_and_mask(s, scale_log2, p, q0, k0, kBlockN, q0 + row_w, k0 + s_col_w);
      for_each_fragment_element<kMT, kSTiles>([&](int mt, int nt, int i) {
        const float prob = exp2_approx(fmaf(s[mt][nt][i], factor, -lse_log2[mt][i / 2]));
        s[mt][nt][i] = prob;                                         // P
        dp[mt][nt][i] = prob * (dp[mt][nt][i] - row_dot[mt][i / 2]);  // dS (without the scale)
      });
      store_c<TileP>(sP, s, row_w, s_col_w);
      store_c<TileP>(sdS, dp, row_w, s_col_w);
    }
    __syncthreads();

    // dV_j += P^T dO_i and dK_j += dS^T Q_i: A is read transposed from the [query][key] tiles.
    warp_gemm<T, kMT, kKVTiles, kBlockM, Stored::kTransposed, Stored::kTransposed, TileP, TileQ>(
        dv, sP, kv_row_w, sdOi, kv_col_w);
    warp_gemm<T, kMT, kKVTiles, kBlockM, Stored::kTransposed, Stored::kTransposed, TileP, TileQ>(
        dk, sdS, kv_row_w, sQi, kv_col_w);

    // dQ_i += dS K_j, added into the fp32 workspace (other KV blocks add to the same rows); in
    // chunks of 64 columns so that d=256 does not need 64 more registers.
    {
      // One base address per iteration; each of the lane's rows and n8 tiles is a constant offset.
      const int row0 = q0 + row_w + lane / 4;
      const int64_t first = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + row0;
      float* dq_lane = bp.dq_accum + first * D +
                       dq_col_w + 2 * (lane % 4);
#pragma unroll
      for (int chunk = 0; chunk < kDqTiles / kDqChunkTiles; ++chunk) {
        const int col0 = dq_col_w + chunk * 8 * kDqChunkTiles;
        float dq[kMT][kDqChunkTiles][4];
        zero(dq);
        warp_gemm<T, kMT, kDqChunkTiles, kBlockN, Stored::kRowMajor, Stored::kTransposed, TileP, TileKV>(
            dq, sdS, row_w, sK, col0);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int dr = 16 * mt + 8 * r;
            if (row0 + dr >= p.seqlen_q) continue;
#pragma unroll
            for (int nt = 0; nt < kDqChunkTiles; ++nt)
              atomic_add_pair(dq_lane + dr * D + chunk * 8 * kDqChunkTiles + 8 * nt,
                              dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]);
          }
      }
    }
    if constexpr (kStages == 1) {  // the only Q/dO buffer is free once every warp is done
      __syncthreads();
      if (it + 1 < n_iters) load_q_do(next_block(cur), 0);
      cp_async_commit();
    }
    cur = next_block(cur);
  }
  cp_async_wait<0>();
  __syncthreads();

  // Epilogue: dK = scale * dS^T Q; stage dK and dV in the Q/dO buffers for 16-byte stores.
  for_each_fragment_element<kMT, kKVTiles>(
      [&](int mt, int nt, int i) { dk[mt][nt][i] *= p.softmax_scale; });
  store_c<TileKV>(sQ, dk, kv_row_w, kv_col_w);
  store_c<TileKV>(sdO, dv, kv_row_w, kv_col_w);
  __syncthreads();
  T* dk_out = static_cast<T*>(bp.dk) + b * bp.dk_batch_stride + hk * bp.dk_head_stride;
  T* dv_out = static_cast<T*>(bp.dv) + b * bp.dv_batch_stride + hk * bp.dv_head_stride;
  store_rows<TileKV, kThreads>(dk_out, bp.dk_row_stride, sQ, k0, p.seqlen_k);
  store_rows<TileKV, kThreads>(dv_out, bp.dv_row_stride, sdO, k0, p.seqlen_k);
}

// ---- 3. dQ = scale * dQ_accum, in the output dtype ------------------------------------------------

template <typename T, int D>
__global__ void fa2_convert_dq_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  constexpr int kChunks = D / kElemsPer16B;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q * kChunks;
  if (idx >= total) return;
  const int c = static_cast<int>(idx % kChunks);
  const int64_t row_index = idx / kChunks;  // (b, h, row) flattened
  const int row = static_cast<int>(row_index % p.seqlen_q);
  const int h = static_cast<int>((row_index / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row_index / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  const float4* src = reinterpret_cast<const float4*>(bp.dq_accum + row_index * D + c * kElemsPer16B);
  const float4 lo = src[0], hi = src[1];
  const float vals[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  float scaled[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) scaled[e] = vals[e] * p.softmax_scale;
  T* dq = static_cast<T*>(bp.dq) + b * bp.dq_batch_stride + h * bp.dq_head_stride +
          row * bp.dq_row_stride + c * kElemsPer16B;
  *reinterpret_cast<uint4*>(dq) = pack8<T>(scaled);
}

// Host side: the main kernel in one shape, then the three launches for one (dtype, head_dim), with
// bp's workspace already allocated and dq_accum zeroed; instantiated in fa2_hdim<D>.cu.
template <typename T, class Shape>
cudaError_t launch_backward_shape(const BwdProblem& bp, cudaStream_t stream) {
  return launch_with_smem(fa2_backward_kernel<T, Shape>,
                          dim3(ceil_div(bp.fwd.seqlen_k, Shape::kBlockN), bp.fwd.heads_kv, bp.fwd.batch),
                          Shape::kThreads, Shape::kSmemBytes, stream, bp);
}

template <typename T, int D>
cudaError_t launch_backward(const BwdProblem& bp, cudaStream_t stream) {
  const FwdProblem& p = bp.fwd;
  // seqlen_q == 0 still launches the main kernel (dK = dV = 0); seqlen_k == 0 the convert (dQ = 0).
  if (p.seqlen_q > 0) {
    fa2_row_dot_kernel<T, D><<<dim3(ceil_div(p.seqlen_q, kRowDotWarps), p.heads_q, p.batch),
                               32 * kRowDotWarps, 0, stream>>>(bp);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.seqlen_k > 0) {
    bool small = false;
    cudaError_t err = cudaSuccess;
    if constexpr (kHasSmallSmemShape<BwdShape, D>) {
      err = use_small_smem_shape(BwdShape<D>::kSmemBytes, &small);
      if (err == cudaSuccess && small) err = launch_backward_shape<T, BwdShape<D, true>>(bp, stream);
    }
    if (err == cudaSuccess && !small) err = launch_backward_shape<T, BwdShape<D>>(bp, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.seqlen_q > 0) {
    const int64_t chunks = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q * (D / kElemsPer16B);
    constexpr int kConvertThreads = 256;
    fa2_convert_dq_kernel<T, D><<<static_cast<unsigned>((chunks + kConvertThreads - 1) / kConvertThreads),
                                  kConvertThreads, 0, stream>>>(bp);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace hfa::fa2
