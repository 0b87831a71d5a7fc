// K5: warp specialization. Warpgroup 0 is the producer: one of its threads issues every TMA (Q
// once, then K/V into the ring as soon as a stage is released), so no consumer thread ever stalls
// on a refill as K4's thread 0 did. Warpgroups 1 and 2 are consumers that only compute: each owns
// 64 of the tile's 128 query rows and runs K4's per-tile work (k4/k4_kernel.cuh, consume_q_tile).
//
// Register budget (setmaxnreg): 384 threads start with 65536 / 384 = 168 registers each. The
// producer needs few and gives them back (24 per thread); the consumers take 240 each, which holds
// the 128-key S fragment, the O fragment and P without spilling: 128 x 24 + 256 x 240 = 64512.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "kernels/k4/k4_kernel.cuh"

namespace hfa::k5 {

constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    k5_forward_kernel(const __grid_constant__ typename k4::K4Config<T, D>::Params params) {
  using Config = k4::K4Config<T, D>;  // tiles, ring depth, MMAs: K4's
  using Pipeline = typename Config::Pipeline;
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage>();
  const FwdProblem& p = params.problem;
  const sm90::BlockCoord bc = sm90::SingleTileScheduler{}.block_coord();
  const sm90::KvRange range = sm90::AttentionMask::range(p, bc.m_block * Config::kBlockM,
                                                         Config::kBlockM, Config::kBlockN);
  constexpr int kConsumerThreads = Config::kConsumerThreads;
  if (threadIdx.x == 0) {
    Pipeline::init(ss.pipeline, kConsumerThreads);
    Config::QPipeline::init(ss.q_pipeline, kConsumerThreads);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {  // producer
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == 0) {
      const int hk = bc.head / p.group_size();
      typename Config::QPipeline::State q_state = Config::QPipeline::producer_start();
      sm90::load_q_stage<typename Config::QPipeline, Config::kBlockM, D, typename Config::QLayout>(
          ss.q_pipeline, q_state, params.tma_q, ss.q, p, bc.head, bc.batch, bc.m_block);
      typename Pipeline::State producer = Pipeline::producer_start();
      for (int tile = 0; tile < range.end; ++tile)  // waits for each stage to be released
        sm90::load_kv_tiles<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
            ss.pipeline, producer, params.tma_k, params.tma_v, ss.k[0], ss.v[0], p, hk, bc.batch,
            tile);
    }
  } else {  // consumers
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    k4::consume_q_tile<T, D>(params, ss, bc, range, threadIdx.x - 128, [](int) {});
  }
}

template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  return k4::launch_k4_config<T, D>(k5_forward_kernel<T, D>, kThreads, p, stream);
}

}  // namespace hfa::k5
