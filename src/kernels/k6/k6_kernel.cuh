// K6: K5's warp specialization plus FlashAttention-3's scheduling of the work.
//
//  1. Inter-warpgroup ping-pong (sm90/common/warpgroup_turns.cuh): the two consumer warpgroups
//     take turns issuing GEMMs, so one's softmax runs while the other's GEMMs run.
//  2. Intra-warpgroup overlap: in iteration j a warpgroup issues S_j = Q K_j^T and then
//     O += P_{j-1} V_{j-1} back to back, waits only for S_j, and runs the softmax of S_j while
//     P_{j-1} V_{j-1} is still on the tensor cores. O is rescaled by tile j's alpha after that
//     GEMM lands. The price: S_j and P_{j-1} are live at once (more registers). (In the SASS,
//     ptxas places the wait for P V before the softmax: what overlaps is the two GEMMs, and this
//     softmax with the other warpgroup's GEMMs. Forcing the source order measured 1.3% slower:
//     docs/WORKLOG.md, K6 sixth pass.)
//  3. Separate K and V rings: K_j is released once S_j has landed, V_j once P_j V_j has, so the
//     producer can refill K's stage while V_{j-1} is still being read (with the overlap a tile's
//     V is held for one more iteration; with one shared barrier the 2-stage d = 256 ring starved).
//  4. A persistent tile scheduler (sm90/common/tile_scheduler.cuh): one CTA per SM walks the
//     tiles in snake order, long causal problems longest tile first, and the producer keeps
//     streaming the next tile's Q and K/V while the consumers finish the current one (the K/V
//     ring runs across tiles; Q is a one-stage ring released after a tile's last Q K^T). Causal
//     problems from 2k queries (4k at d = 256) and sliding-window ones from 2k (d = 64) or 8k
//     queries (k6_launch.h: dynamic_tile_order) take the same order's tiles dynamically instead,
//     in head groups sized to L2 (kDynamic).
//  5. O leaves through shared memory and a TMA store (sm90/common/staged_output.cuh), so a
//     warpgroup starts its next tile while the store runs: +12% at s = 512 for d = 128, +21% for
//     d = 256 over storing the fragments from registers (docs/WORKLOG.md, K6 seventh pass). At
//     d = 256 the staging goes into the ring stages of the tile's last K and V tile.
//
//  6. At d = 64, most problems run three consumer warpgroups on 192-row Q tiles (k6_launch.h:
//     wide_q_tile); everything above holds per warpgroup.
//  7. At d = 128 and on d = 64's 192-row tiles the softmax is speculative
//     (sm90/common/fragment_softmax.cuh: update_speculative): exponentials against the earlier
//     tiles' max, so they start when S lands; no row max and no O rescale unless some P exceeds
//     2^8 (read off the row sums). This shortens the softmax that the other warpgroups' GEMMs
//     must cover.
//
//  8. Score variants (issue 22) as policy types (sm90/common/mask.cuh): the Mask (AttentionMask:
//     dense or causal; LocalMask: a sliding window, whose Q tiles visit only the KV tiles
//     [range.begin, range.end) of their windows, producer and consumers alike) and the Score
//     (PlainScore; SoftcapScore: tanh before the softmax). Each combination is its own kernel
//     (launch_forward picks it on the host); attention sinks enter in the softmax's finalize.
//  9. Variable-length batches (kVarlen, issue 22): each tile runs on its sequence's view
//     (kernels/common/varlen.cuh) with TMA row offsets into the packed tensors, in the order a
//     planning kernel writes (sm90/common/varlen_scheduler.cuh); a tile past its sequence's end
//     stores O directly, since the TMA store would write into the next sequence.
//
// Variant::kNoPingPong / kNoIntraWarpgroupOverlap switch 1 or 2 off, for the ablation. At d = 64
// ping-pong is off in every variant (k6_launch.h: ping_pong), and so is the intra-warpgroup
// overlap on the 192-row tiles (k6_launch.h: intra_warpgroup_overlap).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/varlen.cuh"
#include "kernels/k6/k6_launch.h"
#include "kernels/sm90/common/attention_config.cuh"
#include "kernels/sm90/common/attention_loads.cuh"
#include "kernels/sm90/common/fragment_softmax.cuh"
#include "kernels/sm90/common/gmma_extended.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/varlen_scheduler.cuh"
#include "kernels/sm90/common/warpgroup_turns.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::k6 {

// A producer warpgroup and 2 or 3 consumer warpgroups (k6_launch.h: wide_q_tile). Registers
// per thread after setmaxnreg: 128 x 24 + 256 x 240 = 64512 (two consumer warpgroups, as K5) or
// 128 x 24 + 384 x 160 = 64512 (three) of the SM's 65536. setmaxnreg only moves registers within
// the CTA's launch allocation (384 threads x 168 = 64512 with two consumer warpgroups), so a
// larger split never completes: with the producer at 32 the consumers' increase to 240 waited
// forever (WORKLOG, session 28).
constexpr int threads(int consumer_warpgroups) { return 128 * (1 + consumer_warpgroups); }
constexpr int kProducerRegisters = 24;
constexpr int consumer_registers(int consumer_warpgroups) {
  return consumer_warpgroups == 2 ? 240 : 160;
}
// K/V bytes a scheduler group of (head, batch) pairs may keep in the 50 MB L2 of an H100.
constexpr long long kL2GroupBytes = 24LL << 20;

template <typename T, int D, int ConsumerWarpgroups>
using K6Config = sm90::AttentionConfig<T, D, block_n(D), stages(D),
                                       own_output_tiles(D) ? sm90::OutputPath::kOwnTiles
                                                           : sm90::OutputPath::kRingStages,
                                       ConsumerWarpgroups>;

// One consumer warpgroup's work on one Q tile (its 64 rows): every KV tile, then O and LSE out.
// kv / q: the consumer's positions in the K and V rings (they move together) and the Q ring,
// carried across tiles. Which tile it is comes with Q (SharedStorage::q_tile_coord); with kVarlen
// the tile then works on its sequence's view (sequence_view: masks, ranges, direct stores), whose
// first row the TMA store adds to its coordinates.
template <typename T, class Config, bool kPingPong, bool kOverlap, bool kVarlen, class Mask, class Score>
__device__ __forceinline__ void consume_tile(const typename Config::Params& params,
                                             typename Config::SharedStorage& ss,
                                             typename Config::Pipeline::State& kv,
                                             typename Config::QPipeline::State& q,
                                             const sm90::WarpgroupTurns<kPingPong>& turns,
                                             int mma_thread) {
  constexpr int D = Config::kHeadDim;
  using Pipeline = typename Config::Pipeline;
  using QPipeline = typename Config::QPipeline;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  using namespace cute;
  QPipeline::consumer_wait(ss.q_pipeline, q);
  const sm90::BlockCoord bc = sm90::published_tile(ss.q_tile_coord);
  FwdProblem sequence;
  SequenceOffsets at;
  if constexpr (kVarlen) sequence = sequence_view<T>(params.problem, bc.batch, &at);
  const FwdProblem& p = kVarlen ? sequence : params.problem;
  const int q_row_offset = at.q;
  const int q0 = bc.m_block * kBlockM;
  const sm90::KvRange range = Mask::range(p, q0, kBlockM, kBlockN);
  const Mask mask(p);
  const Score score(p);
  const float scale_log2 = Score::log2_factor(p);

  typename Config::MmaQK mma_qk;
  typename Config::MmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(mma_thread);
  auto thr_pv = mma_pv.get_thread_slice(mma_thread);
  Tensor tSrQ = thr_qk.partition_fragment_A(make_tensor(make_smem_ptr(ss.q), typename Config::QLayout{}));
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<D>>{});
  Tensor tOrP = sm90::make_a_operand_for<typename Config::E>(tSrS);
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor s_rc = sm90::as_rowcol(tSrS);
  Tensor c_rc = sm90::as_rowcol(tScS);
  Tensor o_rc = sm90::as_rowcol(tOrO);
  constexpr int kRows = decltype(size<0>(o_rc))::value;
  // The scale folded into the exponent: measured +3-4% at d = 64 and 128, -3% at d = 256 with the
  // plain score; with softcap at d = 256 (whose tanh already costs an FMUL and a MUFU per score
  // before the row max), +0.9% (+0.1-1.7% on every row of two rounds; WORKLOG, softcap).
  constexpr bool kFoldScale = D <= 128 || Score::kTransforms;
  // Lazy O rescaling (fragment_softmax.cuh) at d = 256, where the O rescale is 128 multiplies per
  // thread per 80-key tile: +2-3% at every length. At d <= 128 it measured -2% (d = 128) and -6%
  // (d = 64), more than its vote and branch account for (docs/WORKLOG.md, K6 sixth pass).
  constexpr bool kLazyRescale = D == 256;
  // The speculative softmax (fragment_softmax.cuh: update_speculative) at d = 128 (+12% at
  // s = 16k over the ordinary update, +0-10% below) and on d = 64's 192-row tiles (+5-17%). On
  // d = 64's 128-row tiles it lost up to 8%, at d = 256 (against the lazy rescale) up to 4.5% at
  // long causal lengths (docs/WORKLOG.md, K6 ninth pass).
  constexpr bool kSpeculativeMax = D == 128 || (D == 64 && Config::kConsumerWarpgroups == 3);
  // The ordinary update's wait for P_{j-1} V_{j-1} after the row max (sm90::warpgroup_wait_after;
  // a bare wait, ptxas issues before it, leaving no overlap): at d = 64 (its 128-row tiles, causal
  // rows under 2k keys) +1-1.8%; at d = 256 up to 1.9% slower (H100, two calls of two rounds;
  // WORKLOG, K7 sixth pass). d = 128 keeps the speculative update: the ordinary one with this
  // wait measured 5% slower there.
  constexpr bool kWaitPvAfterMax = D == 64;
  sm90::OnlineSoftmax<kRows, kFoldScale, kLazyRescale> softmax(scale_log2);
  float alpha[kRows];
  clear(tOrO);

  auto issue_qk = [&](const typename Pipeline::State& st) {
    Tensor tSrK = thr_qk.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.k[st.index]), typename Config::KVLayout{}));
    sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_qk, tSrQ, tSrK, tSrS);
  };
  auto issue_pv = [&](const typename Pipeline::State& st) {
    Tensor tOrV = thr_pv.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.v[st.index]), typename Config::VtLayout{}));
    sm90::warpgroup_gemm_issue</*kZeroInit=*/false, /*kRegisterA=*/true>(mma_pv, tOrP, tOrV, tOrO);
  };
  // O staged in the last KV tile's ring stages (d = 256): warpgroup 0 stages in K's, warpgroup 1
  // in V's. Both stages are held until the O stores have read them (each warpgroup's thread 0
  // then releases them for its 128 threads, in the epilogue), so the producer cannot refill them.
  // Named barrier kKDone: warpgroup 1's last S has landed (K's stage is no longer read);
  // kVDone: warpgroup 0 has passed kKDone and its last P V has landed (V's stage is no longer
  // read). Warpgroup 0 arrives on kVDone only after waiting on kKDone, so neither barrier can be
  // arrived on twice before it is waited on (warpgroup 1 reaches its next kKDone arrive only
  // after this tile's kVDone wait).
  constexpr bool kRingStaging = Config::kOutput == sm90::OutputPath::kRingStages;
  static_assert(!kRingStaging || Config::kConsumerWarpgroups == 2,
                "ring staging hands K's stage to warpgroup 0 and V's to warpgroup 1");
  // O leaves through the TMA store unless the tile reaches past its sequence's end in a
  // variable-length batch (the tensor map would clip it only at the end of the packed O, and
  // write into the next sequence): that tile stores directly (store_output), and at d = 256
  // holds no ring stage for staging.
  const bool staged = !kVarlen || q0 + kBlockM <= p.seqlen_q;
  const bool ring_staged = kRingStaging && staged;
  constexpr int kKDone = sm90::kStagedOutputBarrier + 2, kVDone = kKDone + 1;
  const int warpgroup = mma_thread / 128, wg_thread = mma_thread % 128;
  using NamedBarrier = cutlass::arch::NamedBarrier;
  // S of `tile` (K stage `st`) has landed: K_j is free (the last one held when O is staged in
  // it), and Q after the tile's last Q K^T; scale, mask (where `masked`), softmax.
  auto release_and_mask = [&](int tile, const typename Pipeline::State& st, bool masked) {
    const bool last = tile == range.end - 1;
    if (!ring_staged || !last) Pipeline::consumer_release(ss.pipeline, st);
    if (last) {
      QPipeline::consumer_release(ss.q_pipeline, q);
      if (ring_staged && warpgroup == 1) NamedBarrier::arrive(256, kKDone);
    }
    sm90::scale_and_mask<kFoldScale>(s_rc, c_rc, mask, masked, q0, tile * kBlockN, scale_log2, score);
  };
  auto softmax_of = [&](int tile, const typename Pipeline::State& st, bool masked) {
    release_and_mask(tile, st, masked);
    softmax.update_scores(s_rc, alpha);
  };
  // The speculative softmax (fragment_softmax.cuh: update_speculative) writes P straight into the
  // P operand, so it runs once the previous P V has landed; it rescales O itself, when needed.
  Tensor p_rc = make_tensor(tOrP.data(), s_rc.layout());

  if (range.empty()) QPipeline::consumer_release(ss.q_pipeline, q);  // sees no key: O = 0
  typename Pipeline::State prev = kv;  // the stage whose P V is pending
  if (!range.empty()) {
    // The first tile: S alone (O is zero: no rescale).
    turns.template s_alone<Pipeline>(ss.pipeline, kv, issue_qk, tSrS);
    softmax_of(range.begin, kv, range.needs_mask(range.begin));
    sm90::convert_to_a_operand(tSrS, tOrP);
    prev = kv;
    kv.advance();
  }
  for (int tile = range.begin + 1; tile < range.end; ++tile) {
    const bool masked = range.needs_mask(tile);
    Pipeline::consumer_wait(ss.pipeline, kv);
    turns.begin();
    if constexpr (kOverlap) {  // S_j and P_{j-1} V_{j-1} in flight together; wait for S_j only
      issue_qk(kv);
      Pipeline::consumer_wait(ss.pipeline_v, prev);
      issue_pv(prev);
      turns.end();
      warpgroup_wait<1>();
      sm90::fence_after_wait(tSrS);
      if constexpr (kSpeculativeMax) {
        release_and_mask(tile, kv, masked);
        warpgroup_wait<0>();
        sm90::fence_after_wait(tOrO, tOrP);
        softmax.update_speculative(s_rc, p_rc, o_rc);
      } else {
        softmax_of(tile, kv, masked);
        if constexpr (kWaitPvAfterMax) sm90::warpgroup_wait_after<0>(alpha, &ss.wait_order[mma_thread]);
        else warpgroup_wait<0>();
        sm90::fence_after_wait(tOrO, tOrP);
      }
    } else {  // one GEMM at a time: P_{j-1} V_{j-1}, then S_j, then the softmax
      Pipeline::consumer_wait(ss.pipeline_v, prev);
      issue_pv(prev);
      warpgroup_wait<0>();
      sm90::fence_after_wait(tOrO, tOrP);
      issue_qk(kv);
      turns.end();
      warpgroup_wait<0>();
      sm90::fence_after_wait(tSrS);
      if constexpr (kSpeculativeMax) {
        release_and_mask(tile, kv, masked);
        softmax.update_speculative(s_rc, p_rc, o_rc);
      } else {
        softmax_of(tile, kv, masked);
      }
    }
    Pipeline::consumer_release(ss.pipeline_v, prev);
    if constexpr (!kSpeculativeMax) {
      softmax.rescale(o_rc, alpha);
      sm90::convert_to_a_operand(tSrS, tOrP);
    }
    prev = kv;
    kv.advance();
  }
  if (!range.empty()) {  // the last tile's P V
    Pipeline::consumer_wait(ss.pipeline_v, prev);
    turns.begin();
    issue_pv(prev);
    turns.end();
    warpgroup_wait<0>();
    sm90::fence_after_wait(tOrO, tOrP);
    if (!ring_staged) Pipeline::consumer_release(ss.pipeline_v, prev);
  }

  float lse[kRows], inv[kRows];
  softmax.finalize(inv, lse, p.sinks ? p.sinks[bc.head * p.sinks_stride] * sm90::kLog2e : -INFINITY);
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<D>>{}));
  Tensor coord_rc = sm90::as_rowcol(tOcO);
  const int row_block = bc.m_block * (kBlockM / sm90::kStagedRows) + warpgroup;
  if constexpr (Config::kOutput == sm90::OutputPath::kOwnTiles) {
    if (staged) {
      sm90::store_output_staged<T, D>(params.tma_o, ss.o_staging.o + warpgroup * sm90::kStagedRows * D,
                                      o_rc, inv, p, bc.batch, bc.head, row_block, warpgroup, wg_thread,
                                      q_row_offset);
      sm90::store_lse(p, coord_rc, lse, bc.batch, bc.head, q0);
    } else {  // past its sequence's end
      sm90::store_output<T>(p, o_rc, inv, coord_rc, lse, bc.batch, bc.head, q0);
    }
  } else if (ring_staged && !range.empty()) {
    if (warpgroup == 0) {
      NamedBarrier::sync(256, kKDone);
      NamedBarrier::arrive(256, kVDone);
    } else {
      NamedBarrier::sync(256, kVDone);
    }
    auto* staging = warpgroup == 0 ? ss.k[prev.index] : ss.v[prev.index];
    sm90::store_output_staged<T, D>(params.tma_o, staging, o_rc, inv, p, bc.batch, bc.head, row_block,
                                    warpgroup, wg_thread, q_row_offset);
    if (wg_thread == 0) {  // release both stages for the warpgroup once the store has read them
      sm90::bulk_wait_read<0>();
      Pipeline::consumer_release(ss.pipeline, prev, 128);
      Pipeline::consumer_release(ss.pipeline_v, prev, 128);
    }
    sm90::store_lse(p, coord_rc, lse, bc.batch, bc.head, q0);
  } else {  // no staging (a tile that sees no key, so no ring stage of its own, or one past its
           // sequence's end)
    sm90::store_output<T>(p, o_rc, inv, coord_rc, lse, bc.batch, bc.head, q0);
  }
}

// kVarlen: a variable-length batch (FwdProblem::cu_seqlens_q ...): the tiles come from the plan
// of sm90/common/varlen_scheduler.cuh (longest first), each run on its sequence's view
// (sequence_view, read once per tile by the producer and by each consumer).
// kDynamic: the CTAs take their tiles from a counter (VarlenTileScheduler's plan, or a dense
// problem's DynamicTileScheduler) instead of walking the static snake rounds; the producer ends
// the walk with a marker through the Q stage.
template <typename T, class Config, Variant V, bool kVarlen, class Mask, class Score,
          bool kDynamic = kVarlen>
__global__ void __launch_bounds__(threads(Config::kConsumerWarpgroups), 1)
    k6_forward_kernel(const __grid_constant__ typename Config::Params params) {
  constexpr int D = Config::kHeadDim;
  using Pipeline = typename Config::Pipeline;
  using QPipeline = typename Config::QPipeline;
  constexpr bool kPingPong = V != Variant::kNoPingPong && ping_pong(D);
  static_assert(!kPingPong || Config::kConsumerWarpgroups == 2,
                "WarpgroupTurns alternates two warpgroups");
  constexpr bool kOverlap = V != Variant::kNoIntraWarpgroupOverlap &&
                           intra_warpgroup_overlap(D, Config::kConsumerWarpgroups);
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage>();
  const FwdProblem& p = params.problem;
  static_assert(!kVarlen || kDynamic, "a variable-length batch's plan is taken dynamically");
  using Scheduler = std::conditional_t<
      kVarlen, sm90::VarlenTileScheduler,
      std::conditional_t<kDynamic, sm90::DynamicTileScheduler, sm90::PersistentTileScheduler>>;
  const Scheduler scheduler = [&] {
    if constexpr (kDynamic) {
      return Scheduler(params.tile_plan, p, Config::kBlockM, params.tile_group);
    } else {
      return Scheduler(p, Config::kBlockM, params.tile_group);
    }
  }();
  if (threadIdx.x == 0) {
    Pipeline::init(ss.pipeline, Config::kConsumerThreads);
    Pipeline::init(ss.pipeline_v, Config::kConsumerThreads);
    QPipeline::init(ss.q_pipeline, Config::kConsumerThreads);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {  // producer: one thread streams Q and K/V for every tile of this CTA
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x != 0) return;
    typename Pipeline::State kv = Pipeline::producer_start();
    typename QPipeline::State q = QPipeline::producer_start();
    auto produce_tile = [&](int idx) {
      const sm90::BlockCoord bc = [&] {
        const sm90::BlockCoord c = scheduler.block_coord(idx);
        if constexpr (kVarlen) {  // read from the plan: made uniform (sm90::producer_uniform)
          return sm90::BlockCoord{sm90::producer_uniform(c.m_block), sm90::producer_uniform(c.head),
                                  sm90::producer_uniform(c.batch)};
        } else {
          return c;
        }
      }();
      auto produce = [&](const FwdProblem& sp, SequenceOffsets at) {
        const sm90::KvRange range = Mask::range(sp, bc.m_block * Config::kBlockM, Config::kBlockM,
                                                Config::kBlockN);
        sm90::load_q_stage_of<QPipeline, Config::kBlockM, D, typename Config::QLayout>(
            ss.q_pipeline, q, params.tma_q, ss.q, sp, bc, ss.q_tile_coord, at.q);
        const int hk = bc.head / sp.group_size(), b = kVarlen ? 0 : bc.batch;
        for (int tile = range.begin; tile < range.end; ++tile) {  // each waits for its stage's release
          sm90::load_ring_tile<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
              ss.pipeline, kv, params.tma_k, ss.k[0], sp, hk, b, tile, at.k);
          sm90::load_ring_tile<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
              ss.pipeline_v, kv, params.tma_v, ss.v[0], sp, hk, b, tile, at.k);
          kv.advance();
        }
      };
      if constexpr (kVarlen) {
        SequenceOffsets at;
        FwdProblem sp = sequence_view<T>(p, bc.batch, &at);  // from cu_seqlens: made uniform too
        sp.seqlen_q = sm90::producer_uniform(sp.seqlen_q);
        sp.seqlen_k = sm90::producer_uniform(sp.seqlen_k);
        at.q = sm90::producer_uniform(at.q);
        at.k = sm90::producer_uniform(at.k);
        produce(sp, at);
      } else {
        produce(p, SequenceOffsets{});
      }
    };
    if constexpr (kDynamic) {
      // Tiles taken one at a time (the scheduler's fetch), each once the Q stage is free,
      // so a CTA asks when it is about to start another; then the end marker through the Q
      // stage (no bytes: the arrive alone completes its phase), after which the consumers stop.
      for (;;) {
        QPipeline::producer_wait_empty(ss.q_pipeline, q);
        const int idx = sm90::producer_uniform(scheduler.fetch());
        if (idx >= scheduler.tiles()) break;
        produce_tile(idx);
      }
      QPipeline::producer_acquire(ss.q_pipeline, q, 0, [&] { sm90::publish_end_of_tiles(ss.q_tile_coord); });
    } else {
      for (int round = 0; round < scheduler.rounds(gridDim.x); ++round) {
        const int idx = scheduler.tile_index(round, blockIdx.x, gridDim.x);
        if (idx < scheduler.tiles()) produce_tile(idx);
      }
    }
  } else {  // consumers
    cutlass::arch::warpgroup_reg_alloc<consumer_registers(Config::kConsumerWarpgroups)>();
    const int mma_thread = threadIdx.x - 128;
    const sm90::WarpgroupTurns<kPingPong> turns(mma_thread / 128);
    typename Pipeline::State kv = Pipeline::consumer_start();
    typename QPipeline::State q = QPipeline::consumer_start();
    turns.start();
    if constexpr (kDynamic) {  // until the producer's end marker (consume_tile's wait then returns at once)
      for (;;) {
        QPipeline::consumer_wait(ss.q_pipeline, q);
        if (sm90::is_end_of_tiles(ss.q_tile_coord)) break;
        consume_tile<T, Config, kPingPong, kOverlap, kVarlen, Mask, Score>(params, ss, kv, q, turns,
                                                                            mma_thread);
        q.advance();
      }
    } else {
      for (int round = 0; round < scheduler.rounds(gridDim.x); ++round) {
        if (scheduler.tile_index(round, blockIdx.x, gridDim.x) >= scheduler.tiles()) continue;
        consume_tile<T, Config, kPingPong, kOverlap, kVarlen, Mask, Score>(params, ss, kv, q, turns,
                                                                            mma_thread);
        q.advance();
      }
    }
    turns.finish();
    if constexpr (Config::kStageO) sm90::finish_staged_output(mma_thread % 128);
  }
}

template <typename T, class Config, Variant V, bool kVarlen, class Mask, class Score>
cudaError_t launch_config(const FwdProblem& p, cudaStream_t stream) {
  static_assert(Config::kSmemBytes <= smem_bytes(Config::kHeadDim),
                "k6_launch.h's smem_bytes() must bound the kernel's");
  auto* kernel = k6_forward_kernel<T, Config, V, kVarlen, Mask, Score>;
  if constexpr (kVarlen) {
    return sm90::with_varlen_plan<Mask>(p, Config::kBlockM, Config::kBlockN, stream, [&](int* plan) {
      return sm90::launch_persistent<Config>(kernel, threads(Config::kConsumerWarpgroups), sizeof(T),
                                             kL2GroupBytes, p, stream, plan);
    });
  } else if constexpr (V == Variant::kFull) {  // (the ablation variants keep the static rounds)
    if (dynamic_tile_order(p)) {
      auto* dynamic = k6_forward_kernel<T, Config, V, false, Mask, Score, true>;
      return sm90::with_tile_counter(stream, [&](int* counter) {
        return sm90::launch_persistent<Config>(dynamic, threads(Config::kConsumerWarpgroups),
                                               sizeof(T), kL2GroupBytes, p, stream, counter);
      });
    }
  }
  return sm90::launch_persistent<Config>(kernel, threads(Config::kConsumerWarpgroups), sizeof(T),
                                         kL2GroupBytes, p, stream);
}

// The policies of a score variant (k6_launch.h: launch_variant): the sliding window's mask, the
// softcap's score transform; and the variable-length batch.
template <typename T, int D, Variant V, bool kLocal, bool kSoftcap, bool kVarlen = false>
cudaError_t launch_policies(const FwdProblem& p, cudaStream_t stream) {
  using Mask = std::conditional_t<kLocal, sm90::LocalMask, sm90::AttentionMask>;
  using Score = std::conditional_t<kSoftcap, sm90::SoftcapScore, sm90::PlainScore>;
  if constexpr (max_consumer_warpgroups(D) == 3) {
    if (wide_q_tile(p)) return launch_config<T, K6Config<T, D, 3>, V, kVarlen, Mask, Score>(p, stream);
  }
  return launch_config<T, K6Config<T, D, 2>, V, kVarlen, Mask, Score>(p, stream);
}

template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_variant(const FwdProblem& p, cudaStream_t stream) {
  return launch_policies<T, D, Variant::kFull, kLocal, kSoftcap>(p, stream);
}

template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_varlen(const FwdProblem& p, cudaStream_t stream) {
  return launch_policies<T, D, Variant::kFull, kLocal, kSoftcap, true>(p, stream);
}

// Dense and causal attention here; the window and softcap variants and the variable-length
// batches in their own translation units (k6_variants_hdim<D>.cu, k6_varlen_hdim<D>.cu), compiled
// in parallel. Sinks need no variant: they enter once per tile, in the softmax's finalize. The
// ablation variants take none of them (k6.cu declares it).
template <typename T, int D, Variant V>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (V == Variant::kFull) {
    if (p.varlen()) {
      if (p.local) return p.softcap > 0.f ? launch_varlen<T, D, true, true>(p, stream)
                                           : launch_varlen<T, D, true, false>(p, stream);
      return p.softcap > 0.f ? launch_varlen<T, D, false, true>(p, stream)
                             : launch_varlen<T, D, false, false>(p, stream);
    }
    if (p.local) return p.softcap > 0.f ? launch_variant<T, D, true, true>(p, stream)
                                         : launch_variant<T, D, true, false>(p, stream);
    if (p.softcap > 0.f) return launch_variant<T, D, false, true>(p, stream);
  }
  return launch_policies<T, D, V, false, false>(p, stream);
}

}  // namespace hfa::k6
