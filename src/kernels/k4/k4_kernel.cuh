// K4 (K4.2): both GEMMs on WGMMA. S = Q K^T from shared memory (SS), the online softmax on the
// accumulator fragment (2 rows per thread, quad shuffles), P converted in registers and fed to
// O += P V as the register A operand (RS), V read MN-major from the same swizzled tile the TMA
// wrote K-major. Same one-thread TMA producer and mbarrier ring as K3.
//
// Two warpgroups (256 threads); each owns 64 of the tile's 128 query rows. Tile shapes per head
// dim (what fits 227 KB of shared memory and 255 registers per thread):
//   d = 64:  128 x 128 tiles, 5 stages    d = 128: 128 x 128, 3 stages    d = 256: 128 x 64, 2 stages
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/k4/k4_launch.h"
#include "kernels/sm90/common/attention_config.cuh"
#include "kernels/sm90/common/attention_loads.cuh"
#include "kernels/sm90/common/fragment_softmax.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::k4 {

template <typename T, int D>
using K4Config = sm90::AttentionConfig<T, D, block_n(D), stages(D)>;

// What a consumer warpgroup does for one Q tile: for every KV tile, wait for its stage, S = Q K^T,
// mask (diagonal tiles only), online softmax, O += P V, release the stage; then O and LSE out.
// `mma_thread` is the thread's index among the 256 consumer threads. `after_tile(tile)` runs after
// each release (K4: thread 0 refills the ring there; K5: nothing, a producer warp does it).
template <typename T, int D, class AfterTile>
__device__ __forceinline__ void consume_q_tile(const typename K4Config<T, D>::Params& params,
                                               typename K4Config<T, D>::SharedStorage& ss,
                                               const sm90::BlockCoord& bc,
                                               const sm90::KvRange& range, int mma_thread,
                                               AfterTile after_tile) {
  using Config = K4Config<T, D>;
  using E = typename Config::E;
  using Pipeline = typename Config::Pipeline;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  using namespace cute;
  const FwdProblem& p = params.problem;
  const int q0 = bc.m_block * kBlockM;
  const sm90::AttentionMask mask(p);

  typename Config::MmaQK mma_qk;
  typename Config::MmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(mma_thread);
  auto thr_pv = mma_pv.get_thread_slice(mma_thread);
  Tensor tSrQ = thr_qk.partition_fragment_A(make_tensor(make_smem_ptr(ss.q), typename Config::QLayout{}));
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<D>>{});  // (MMA, MMA_M, MMA_N)
  clear(tOrO);
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor o_rc = sm90::as_rowcol(tOrO);
  const float scale_log2 = p.softmax_scale * sm90::kLog2e;
  // The scale folded into the exponent where k6 measured it faster (d <= 128).
  constexpr bool kFoldScale = D <= 128;
  sm90::OnlineSoftmax<decltype(size<0>(o_rc))::value, kFoldScale> softmax(scale_log2);

  Config::QPipeline::consumer_wait(ss.q_pipeline, Config::QPipeline::consumer_start());
  typename Pipeline::State consumer = Pipeline::consumer_start();
  for (int tile = 0; tile < range.end; ++tile) {
    Pipeline::consumer_wait(ss.pipeline, consumer);
    Tensor tSrK = thr_qk.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.k[consumer.index]), typename Config::KVLayout{}));
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    sm90::warpgroup_gemm</*kZeroInit=*/true>(mma_qk, tSrQ, tSrK, tSrS);

    // Scale (unless folded) and mask only the tiles that cross the diagonal or the end of the keys.
    Tensor s_rc = sm90::as_rowcol(tSrS);
    Tensor c_rc = sm90::as_rowcol(tScS);
    sm90::scale_and_mask<kFoldScale>(s_rc, c_rc, mask, range.needs_mask(tile), q0, tile * kBlockN,
                                     scale_log2);
    softmax.update(s_rc, o_rc);

    Tensor tOrP = sm90::acc_to_a_operand<E>(tSrS);  // P stays in registers
    Tensor tOrV = thr_pv.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.v[consumer.index]), typename Config::VtLayout{}));
    sm90::warpgroup_gemm</*kZeroInit=*/false, /*kRegisterA=*/true>(mma_pv, tOrP, tOrV, tOrO);

    Pipeline::consumer_release(ss.pipeline, consumer);
    consumer.advance();
    after_tile(tile);
  }

  float lse[decltype(size<0>(o_rc))::value], inv[decltype(size<0>(o_rc))::value];
  softmax.finalize(inv, lse);
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<D>>{}));
  Tensor coord_rc = sm90::as_rowcol(tOcO);
  sm90::store_output<T>(p, o_rc, inv, coord_rc, lse, bc.batch, bc.head, q0);
}

template <typename T, int D>
__global__ void __launch_bounds__(256, 1)
    k4_forward_kernel(const __grid_constant__ typename K4Config<T, D>::Params params) {
  using Config = K4Config<T, D>;
  using Pipeline = typename Config::Pipeline;
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage>();
  const FwdProblem& p = params.problem;
  const sm90::BlockCoord bc = sm90::SingleTileScheduler{}.block_coord();
  const int hk = bc.head / p.group_size();
  const sm90::KvRange range = sm90::AttentionMask::range(p, bc.m_block * Config::kBlockM,
                                                         Config::kBlockM, Config::kBlockN);
  if (threadIdx.x == 0) {
    Pipeline::init(ss.pipeline, Config::kConsumerThreads);
    Config::QPipeline::init(ss.q_pipeline, Config::kConsumerThreads);
  }
  __syncthreads();

  // Thread 0 is also the producer: Q, the first ring's worth of K/V, then a refill per tile.
  typename Pipeline::State producer = Pipeline::producer_start();
  auto issue_kv = [&](int tile) {
    sm90::load_kv_tiles<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
        ss.pipeline, producer, params.tma_k, params.tma_v, ss.k[0], ss.v[0], p, hk, bc.batch, tile);
  };
  if (threadIdx.x == 0) {
    typename Config::QPipeline::State q_state = Config::QPipeline::producer_start();
    sm90::load_q_stage<typename Config::QPipeline, Config::kBlockM, D, typename Config::QLayout>(
        ss.q_pipeline, q_state, params.tma_q, ss.q, p, bc.head, bc.batch, bc.m_block);
    for (int tile = 0; tile < min(Config::kStages, range.end); ++tile) issue_kv(tile);
  }
  consume_q_tile<T, D>(params, ss, bc, range, threadIdx.x, [&](int tile) {
    if (threadIdx.x == 0 && tile + Config::kStages < range.end) issue_kv(tile + Config::kStages);
  });
}

// Host side of every kernel on K4's configuration (k4, k5): one CTA of `threads` per Q tile.
template <typename T, int D, class Kernel>
cudaError_t launch_k4_config(Kernel kernel, int threads, const FwdProblem& p, cudaStream_t stream) {
  using Config = K4Config<T, D>;
  static_assert(Config::kSmemBytes <= smem_bytes(D), "k4_launch.h's smem_bytes() must bound the kernel's");
  typename Config::Params params{};
  params.problem = p;
  return sm90::launch_attention<Config>(
      kernel, sm90::SingleTileScheduler::grid_shape(p, Config::kBlockM), threads, params, stream);
}

template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  return launch_k4_config<T, D>(k4_forward_kernel<T, D>, K4Config<T, D>::kConsumerThreads, p, stream);
}

}  // namespace hfa::k4
