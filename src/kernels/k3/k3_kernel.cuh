// K3: K2's compute with its loads moved to TMA through an N-stage mbarrier ring (k3_1/k3_2/k3_3 =
// 1/2/5 stages), and the skeleton K4.1 (k4_qk) reuses with Q K^T on WGMMA.
//
// One thread (thread 0) issues every TMA: Q once, then K_j and V_j into separate ring slots (sK,
// sV: a stage's K and V coexist, unlike K2's shared sKV, because the producer may refill stage
// j+1 while stage j's V is read). A stage's full barrier expects K bytes + V bytes. Every thread
// releases a stage when done with it; thread 0 waits for all 256 releases before refilling it.
// The compute is K2's (kernels/common/fa2_cuda_core.cuh) reading 128-byte-swizzled tiles.
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/fa2_cuda_core.cuh"
#include "kernels/sm90/common/attention_loads.cuh"
#include "kernels/sm90/common/element.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::k3 {

using namespace hfa::fa2;

// QK policy of K3: scores on CUDA cores, straight from the swizzled tiles.
template <typename T, int D>
struct ScalarScores {
  using Tile = sm90::Sw128Rows<kBlockM>;
  // This CUDA-core compute is latency-bound at one CTA (8 warps) per SM. At d = 64 it fits in 128
  // registers without spilling, so cap it there and let two CTAs share an SM; at d >= 128 the cap
  // would spill (100-320 bytes, ptxas), so keep one.
  static constexpr int kMinBlocksPerSm = D == 64 ? 2 : 1;
  __device__ static void scores(const T* sQ, const T* sK, float* /*sS*/, int row, int part,
                                float (&s)[kScoresPerThread]) {
    score_row<T, D, Tile, Tile>(sQ, sK, row, part, s);
  }
};

template <typename T, int D, int Stages>
struct K3Config {
  using E = typename sm90::CutlassElement<T>::type;
  using Layout = sm90::TileLayout<E, kBlockM, D>;  // Q, K and V tiles alike (64 x D)
  using Pipeline = sm90::TmaPipeline<Stages>;
  static constexpr int kTileElems = kBlockM * D;

  struct SharedStorage {
    alignas(1024) E q[kTileElems];
    alignas(1024) E k[Stages][kTileElems];
    alignas(1024) E v[Stages][kTileElems];
    alignas(16) float s[kBlockM * kSRow];
    typename Pipeline::SharedStorage pipeline;
    uint64_t q_full;
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  struct Params {
    FwdProblem problem;
    sm90::TileTma<E, kBlockM, D> tma_q, tma_k, tma_v;
  };
};

template <typename T, int D, int Stages, class Scores>
__global__ void __launch_bounds__(kThreads, Scores::kMinBlocksPerSm)
    k3_forward_kernel(const __grid_constant__ typename K3Config<T, D, Stages>::Params params) {
  using Config = K3Config<T, D, Stages>;
  using E = typename Config::E;
  using Pipeline = typename Config::Pipeline;
  using namespace cute;
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage>();
  const FwdProblem& p = params.problem;

  const sm90::BlockCoord bc = sm90::SingleTileScheduler{}.block_coord();
  const int q0 = bc.m_block * kBlockM, h = bc.head, b = bc.batch, hk = h / p.group_size();
  const int row = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int qi = q0 + row;
  const int n_tiles = kv_tiles(p, q0, kBlockM, kBlockN);

  if (threadIdx.x == 0) {
    Pipeline::init(ss.pipeline, kThreads);
    sm90::OnceBarrier::init(ss.q_full);
  }
  __syncthreads();

  typename Pipeline::State producer = Pipeline::producer_start();
  auto issue_kv = [&](int tile) {  // thread 0 only
    sm90::load_kv_tiles<Pipeline, kBlockN, D, typename Config::Layout>(
        ss.pipeline, producer, params.tma_k, params.tma_v, ss.k[0], ss.v[0], p, hk, b, tile);
  };
  if (threadIdx.x == 0) {
    sm90::load_q_tile<kBlockM, D, typename Config::Layout>(params.tma_q, ss.q_full, ss.q, p, h, b,
                                                          bc.m_block);
    for (int tile = 0; tile < min(Stages, n_tiles); ++tile) issue_kv(tile);  // prefetch
  }
  sm90::OnceBarrier::wait(ss.q_full);

  const float scale_log2 = p.softmax_scale * kLog2e;
  const T* sQ = reinterpret_cast<const T*>(ss.q);
  RowState<D> st;
  typename Pipeline::State consumer = Pipeline::consumer_start();
  for (int tile = 0; tile < n_tiles; ++tile) {
    Pipeline::consumer_wait(ss.pipeline, consumer);
    const T* sK = reinterpret_cast<const T*>(ss.k[consumer.index]);
    const T* sV = reinterpret_cast<const T*>(ss.v[consumer.index]);
    float s[kScoresPerThread];
    Scores::scores(sQ, sK, ss.s, row, part, s);
    scale_and_mask(s, p, scale_log2, tile * kBlockN, qi, part);
    __syncwarp();  // the row group's lanes are done reading the previous tile's P from sS
    softmax_update(s, st, ss.s, row, part);
    __syncwarp();  // the row group's P (its own row of sS) is visible to its 4 threads
    accumulate_pv<T, D, typename ScalarScores<T, D>::Tile>(ss.s, sV, st, row, part);
    Pipeline::consumer_release(ss.pipeline, consumer);
    consumer.advance();
    if (threadIdx.x == 0 && tile + Stages < n_tiles) issue_kv(tile + Stages);
  }
  if (qi < p.seqlen_q) write_row<T, D>(p, st, b, h, qi, part);
}

// Host side: descriptors and launch, for kernels built on this skeleton.
template <typename T, int D, int Stages, class Scores>
cudaError_t launch_k3_skeleton(const FwdProblem& p, cudaStream_t stream) {
  using Config = K3Config<T, D, Stages>;
  using E = typename Config::E;
  typename Config::Params params;
  params.problem = p;
  sm90::make_attention_tmas<E, kBlockM, kBlockN, D>(p, &params.tma_q, &params.tma_k, &params.tma_v);
  auto kernel = k3_forward_kernel<T, D, Stages, Scores>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Config::kSmemBytes);
  if (err != cudaSuccess) return err;
  kernel<<<sm90::SingleTileScheduler::grid_shape(p, kBlockM), kThreads, Config::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace hfa::k3
