// The tile configuration every WGMMA forward kernel (K4, K5, K6) is built from: a 128-row Q tile
// split over two consumer warpgroups (64 rows each), BlockN-row K/V tiles in a Stages-deep TMA
// ring, the two GEMMs (S = Q K^T from shared memory, O += P V with P in registers and V read
// MN-major), and what the host passes (problem + three TMA descriptors).
//
// Also here, because all of them share it: the epilogue (O and LSE from registers to global
// memory) and the host launch (descriptors, shared-memory limit, grid from a tile scheduler).
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/sm90/common/element.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::sm90 {

template <typename T, int D, int BlockN, int Stages>
struct AttentionConfig {
  using E = typename CutlassElement<T>::type;
  static constexpr int kBlockM = 128, kBlockN = BlockN, kStages = Stages, kHeadDim = D;
  static constexpr int kConsumerThreads = 256;  // 2 warpgroups along M
  using QLayout = TileLayout<E, kBlockM, D>;
  using KVLayout = TileLayout<E, kBlockN, D>;
  // V^T (D, kBlockN) over V's K-major tile: element (d, n) is V(n, d). GMMA reads it MN-major.
  using VtLayout = decltype(cute::composition(
      KVLayout{}, cute::Layout<cute::Shape<cute::Int<D>, cute::Int<kBlockN>>,
                               cute::Stride<cute::Int<kBlockN>, cute::_1>>{}));
  using WarpgroupsAlongM = cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>;
  using MmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float, cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<D>>>(),
      WarpgroupsAlongM{}));
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<E, E, float, cute::Shape<cute::_64, cute::Int<D>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      WarpgroupsAlongM{}));
  using Pipeline = TmaPipeline<kStages>;
  // The Q buffer as a one-stage ring: a persistent kernel (K6) releases it after a tile's last
  // Q K^T so the producer can load the next tile's Q; single-tile kernels load it once.
  using QPipeline = TmaPipeline<1>;
  static constexpr int kQElems = kBlockM * D, kKVElems = kBlockN * D;

  struct SharedStorage {
    alignas(1024) E q[kQElems];
    alignas(1024) E k[kStages][kKVElems];
    alignas(1024) E v[kStages][kKVElems];
    typename Pipeline::SharedStorage pipeline;    // K4/K5: K and V tiles together; K6: K only
    typename Pipeline::SharedStorage pipeline_v;  // K6: V's own barriers (unused by K4/K5)
    typename QPipeline::SharedStorage q_pipeline;
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  struct Params {
    FwdProblem problem;
    TileTma<E, kBlockM, D> tma_q;
    TileTma<E, kBlockN, D> tma_k, tma_v;
    int tile_group;  // persistent scheduler: (head, batch) pairs per L2 group (K6; else unused)
  };
};

// O (fp32 fragment, normalized) and LSE to global memory; rows past seqlen_q are dropped.
// o_rc / coord_rc: the thread's O fragment and its (row, col) coordinates as (rows, cols) views.
template <typename T, class TO, class TC>
__device__ __forceinline__ void store_output(const FwdProblem& p, TO& o_rc, TC& coord_rc,
                                             const float* lse, int b, int h, int q0) {
  using namespace cute;
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(o_rc); ++r) {
    const int qi = q0 + get<0>(coord_rc(r, 0));
    if (qi >= p.seqlen_q) continue;
    T* orow = o + qi * p.o_row_stride;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(o_rc); c += 2) {  // a thread's column pairs are adjacent
      const int col = get<1>(coord_rc(r, c));
      T pair[2] = {from_float<T>(o_rc(r, c)), from_float<T>(o_rc(r, c + 1))};
      *reinterpret_cast<uint32_t*>(orow + col) = *reinterpret_cast<uint32_t*>(pair);
    }
    if (p.lse && threadIdx.x % 4 == 0)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] = lse[r];
  }
}

// Host side of every kernel on an AttentionConfig: descriptors, shared-memory limit, launch of
// `threads` per CTA on `grid` (from the kernel's tile scheduler).
template <class Config, class Kernel>
cudaError_t launch_attention(Kernel kernel, dim3 grid, int threads, typename Config::Params& params,
                             cudaStream_t stream) {
  const FwdProblem& p = params.problem;
  make_attention_tmas<typename Config::E, Config::kBlockM, Config::kBlockN, Config::kHeadDim>(
      p, &params.tma_q, &params.tma_k, &params.tma_v);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Config::kSmemBytes);
  if (err != cudaSuccess) return err;
  kernel<<<grid, threads, Config::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace hfa::sm90
