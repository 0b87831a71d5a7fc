// K7: the FP8 forward. Q, K, V in e4m3 with per-(batch, KV head) descales; O in bf16/fp16.
//
// K6's structure (a producer warpgroup, two consumer warpgroups with ping-pong at d >= 128 or
// three at d = 64, the intra-warpgroup overlap, the persistent scheduler), with both GEMMs on
// e4m3 WGMMA (k = 32, twice the bf16 rate). What FP8 changes (sm90/common/fp8_pv.cuh):
//  1. V must be K-major for P V. The producer warpgroup's warps 1-3, idle in K6, transpose each
//     V tile in shared memory (V ring -> Vt ring) while warp 0 issues the TMA loads. The V ring's
//     consumers are those 96 threads; the Vt ring is filled by their stores and read by the
//     consumer warpgroups: each KV tile passes three rings (K, V, Vt) that advance together.
//  2. P leaves the softmax as e4m3 packed straight from the fp32 accumulator in register order;
//     the keys are renamed to make that layout the A operand's (the transpose writes V's rows in
//     the same renamed order), so no bytes move between threads.
//  3. The softmax takes P = exp2(s - max + 8) (OnlineSoftmax's kPOffsetLog2): P <= 256 fits e4m3
//     (max 448) and small P stay normal numbers instead of flushing to zero.
//  4. The descales: q_descale * k_descale joins the softmax scale, v_descale the epilogue's 1/l.
//     K8 is this kernel with the BlockDescale policy: a descale per 128-row Q tile and per 128
//     keys, so the scores' scale changes from KV tile to KV tile; the softmax keeps its running
//     max scaled (OnlineSoftmax's kTileFactor) and still folds the scale into exp2's FFMA.
// Long causal rows at d = 64 and 256 take their tiles dynamically in L2-sized head groups, as K6's
// (kDynamic; k7_launch.h: dynamic_tile_order).
//  5. Each tile's P V is accumulated from zero and added to O in fp32 (two levels: fp8_pv.cuh,
//     add_tile_to_output): the FP8 tensor cores' accumulation keeps ~13 bits, and onto a large O
//     it lost 26% (relative RMS) over 16k keys of one-sign V. At d = 256, where the second
//     accumulator does not fit beside S under the intra-warpgroup overlap, the loop runs without
//     that overlap and P V in column quarters (k7_launch.h: serial_two_level_pv).
// O is stored from registers (K6's staging through shared memory is not built here yet).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/k7/k7_launch.h"
#include "kernels/sm90/common/attention_config.cuh"
#include "kernels/sm90/common/attention_loads.cuh"
#include "kernels/sm90/common/fp8_pv.cuh"
#include "kernels/sm90/common/fragment_softmax.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/warpgroup_turns.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::k7 {

// A producer warpgroup (warp 0: TMA; warps 1-3: V transpose) and two or three consumer
// warpgroups (k7_launch.h: consumer_warpgroups). setmaxnreg moves registers within what the CTA
// got at launch: 384 threads x 168 (the __launch_bounds__ share of 65536, in steps of 8) = 64512,
// or 512 x 128 = 65536. A split that asks for more makes the consumers' alloc wait forever (it
// hung the H100 once: 32 / 240), hence the static_assert.
// d = 256 with 128-key tiles needs 240 per consumer (O 128 registers, S 64, P 16 in flight; at
// 232 ptxas serializes the WGMMAs, C7512); the producer then gets 24 and spills a few values per
// KV tile (its loops are not the critical path: measured 6% faster than 64-key tiles at 56 / 224).
// At d <= 128, 56 / 224 (40 / 232 measured 1% slower). Three consumer warpgroups (d = 64, 128-key
// tiles: S 64 registers, O 32, P 16) get 160 each, the producer 32.
constexpr int threads(int consumer_warpgroups) { return 128 * (1 + consumer_warpgroups); }
constexpr int launch_registers(int consumer_warpgroups) { return consumer_warpgroups == 2 ? 168 : 128; }
constexpr int consumer_registers(int head_dim, int consumer_warpgroups) {
  return consumer_warpgroups == 3 ? 160 : head_dim <= 128 ? 224 : 240;
}
constexpr int producer_registers(int head_dim, int consumer_warpgroups) {
  return consumer_warpgroups == 3 ? 32 : head_dim <= 128 ? 56 : 24;
}
constexpr bool registers_fit(int head_dim, int consumer_warpgroups) {
  return 128 * producer_registers(head_dim, consumer_warpgroups) +
             128 * consumer_warpgroups * consumer_registers(head_dim, consumer_warpgroups) <=
         threads(consumer_warpgroups) * launch_registers(consumer_warpgroups);
}
static_assert(registers_fit(64, 2) && registers_fit(128, 2) && registers_fit(256, 2) && registers_fit(64, 3),
              "setmaxnreg cannot hand out more registers than the CTA was launched with");
constexpr int kTransposeThreads = 96;
constexpr long long kL2GroupBytes = 24LL << 20;  // as K6

// The scores' dequantization, a policy of the kernel. PerHeadDescale: tile_scale_log2(n), the
// factor of KV tile n's scores (softmax scale * Q's descale * K's descale * log2(e)), the same for
// every tile. BlockDescale: segment_scales_log2(n, f), one factor per segment of tile n.
struct PerHeadDescale {  // k7: one factor per (batch, KV head), folded into exp2's FFMA
  static constexpr bool kFoldScale = true;
  static constexpr bool kTileFactor = false;
  float scale_log2;
  __device__ PerHeadDescale(const FwdProblem& p, const sm90::BlockCoord& bc, int hk, int /*row0*/)
      : scale_log2(p.softmax_scale * p.q_descale.at(bc.batch, hk) * p.k_descale.at(bc.batch, hk) *
                   sm90::kLog2e) {}
  __device__ float tile_scale_log2(int) const { return scale_log2; }
};

// k8: Q's descale per 128 rows, K's per 128 keys (kFp8ScaleBlock). A consumer warpgroup's 64 Q
// rows (first row `row0`, a multiple of 64) lie in one Q scale block, whether the Q tile has two
// warpgroups (128 rows: one block) or three (192 rows: a tile can span two); rows wholly past
// seqlen_q (never stored) read the last block's scale. A KV tile of kBlockN keys
// is taken in segments of segment_keys(kBlockN) = gcd(kBlockN, 128) keys, each inside one K scale
// block: a 128-key tile is one segment, a 192-key tile (which spans parts of two blocks) three of
// 64. OnlineSoftmax folds each segment's factor into exp2's FFMA.
struct BlockDescale {
  static constexpr bool kFoldScale = true;
  static constexpr bool kTileFactor = true;  // the factor changes between (and within) KV tiles
  static constexpr int segment_keys(int block_n) {
    int a = block_n, b = kFp8ScaleBlock;
    while (b != 0) {
      const int r = a % b;
      a = b;
      b = r;
    }
    return a;
  }
  float q_scale_log2;
  const float* k_scales;  // this (batch, KV head)'s row of k_block_descale
  int block_stride;       // 32-bit: validation keeps the last block's offset below 2^31
  int last_block;  // a last tile's segments past seqlen_k (all masked) read the last block's scale
  static_assert(kFp8ScaleBlock % 64 == 0, "a warpgroup's 64 rows in one Q scale block");
  __device__ BlockDescale(const FwdProblem& p, const sm90::BlockCoord& bc, int hk, int row0)
      : q_scale_log2(p.softmax_scale * sm90::kLog2e *
                     p.q_block_descale.at(bc.batch, bc.head, min(row0, p.seqlen_q - 1) / kFp8ScaleBlock)),
        k_scales(&p.k_block_descale.data[bc.batch * p.k_block_descale.batch_stride +
                                         hk * p.k_block_descale.head_stride]),
        block_stride(static_cast<int>(p.k_block_descale.block_stride)),
        last_block((p.seqlen_k - 1) / kFp8ScaleBlock) {}
  // One load per K scale block the tile touches, not one per segment: a 128-key tile lies in
  // block n; a 192-key tile's three segments in blocks b = floor(1.5 n) and b + 1 -- segment 0 in
  // b, segment 2 in b + 1, segment 1 (keys 192 n + 64 ... 192 n + 127) in b when n is even, in
  // b + 1 when n is odd. The offsets are 32-bit (block_stride). (One load per segment, with 64-bit
  // offsets, made ~35 of the 76 warp instructions per tile k8 issued more than k7 at d = 128: ncu,
  // WORKLOG K8.)
  template <int kBlockN, int kSegments>
  __device__ void segment_scales_log2(int n_tile, float (&f)[kSegments]) const {
    static_assert(kSegments * segment_keys(kBlockN) == kBlockN, "whole segments per KV tile");
    if constexpr (kBlockN == kFp8ScaleBlock) {
      f[0] = q_scale_log2 * k_scales[min(n_tile, last_block) * block_stride];
    } else {
      static_assert(kFp8ScaleBlock == 128 && kBlockN == 192 && kSegments == 3,
                    "the blocks of a 192-key tile's 64-key segments");
      const int b = n_tile + (n_tile >> 1);
      const float k0 = k_scales[min(b, last_block) * block_stride];
      const float k1 = k_scales[min(b + 1, last_block) * block_stride];
      f[0] = q_scale_log2 * k0;
      f[2] = q_scale_log2 * k1;
      f[1] = (n_tile & 1) ? f[2] : f[0];
    }
  }
};

// The launch-facing tile configuration (what sm90::launch_attention reads) and the shared memory.
template <typename T, int D, class ScalesPolicy, int BlockN, int ConsumerWarpgroups>
struct K7Config {
  using Scales = ScalesPolicy;
  using E = cute::float_e4m3_t;
  using Out = T;
  static constexpr int kConsumerWarpgroups = ConsumerWarpgroups;
  static constexpr int kBlockM = 64 * ConsumerWarpgroups, kBlockN = BlockN, kStages = stages(D);
  static constexpr int kHeadDim = D;
  static constexpr bool kStageO = false;
  static constexpr bool kWaitPvAfterMax = wait_pv_after_max(D, BlockN);
  static constexpr bool kBroadcastTileCoord = broadcast_tile_coord(D, BlockN);
  static constexpr bool kUniformStorageBase = uniform_storage_base(D, BlockN);
  static constexpr bool kTwoLevelPv = two_level_pv(D);
  // d = 256: the two-level accumulation without the intra-warpgroup overlap, P V in four quarters
  // of D / 4 columns whose two accumulators take S's registers (k7_launch.h: serial_two_level_pv).
  static constexpr bool kSerialPv = serial_two_level_pv(D);
  static constexpr int kConsumerThreads = 128 * ConsumerWarpgroups;
  static constexpr int kThreads = threads(ConsumerWarpgroups);
  using QLayout = sm90::TileLayout<E, kBlockM, D>;
  using KVLayout = sm90::TileLayout<E, kBlockN, D>;
  using VtLayout = sm90::TileLayout<E, D, kBlockN>;  // (head_dim, keys), keys contiguous
  // kSerialPv: a quarter of it (D / 4 rows: the swizzle atoms stack down the rows, so each
  // quarter is contiguous) and the GEMM that reads it.
  using VtQuarterLayout = sm90::TileLayout<E, D / 4, kBlockN>;
  using MmaPVQuarter = sm90::RegisterATiledMma<E, D / 4, kBlockN, cute::GMMA::Major::K,
                                               sm90::WarpgroupsAlongM<ConsumerWarpgroups>>;
  using MmaQK = sm90::QkTiledMma<E, kBlockN, D, sm90::WarpgroupsAlongM<ConsumerWarpgroups>>;
  using MmaPV = sm90::RegisterATiledMma<E, D, kBlockN, cute::GMMA::Major::K,
                                        sm90::WarpgroupsAlongM<ConsumerWarpgroups>>;
  using Pipeline = sm90::TmaPipeline<kStages>;  // K (TMA), V (TMA), Vt (transposers' stores)
  using QPipeline = sm90::TmaPipeline<1>;
  static constexpr int kQElems = kBlockM * D, kKVElems = kBlockN * D;

  struct SharedStorage {
    alignas(1024) E q[kQElems];
    alignas(1024) E k[kStages][kKVElems];
    alignas(1024) E v[kStages][kKVElems];
    alignas(1024) E vt[kStages][kKVElems];
    typename Pipeline::SharedStorage pipeline_k, pipeline_v, pipeline_vt;
    typename QPipeline::SharedStorage q_pipeline;
    int q_tile_coord[3];  // (m_block, head, batch) of the tile in q, published with it
    // kDynamic: per V ring stage, 1 if it holds the end marker, 0 if a tile (published with it,
    // so the transposers tell the marker from a tile).
    int v_stage_is_end[kStages];
    uint8_t wait_order[kConsumerThreads];  // kWaitPvAfterMax: warpgroup_wait_after's slots
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  struct Params {
    FwdProblem problem;
    sm90::TileTma<E, kBlockM, D> tma_q;
    sm90::TileTma<E, kBlockN, D> tma_k, tma_v;
    int tile_group;  // the scheduler's (head, batch) pairs per group (sm90::launch_persistent)
    int* tile_plan;  // kDynamic: DynamicTileScheduler's counter
  };
};

// One consumer warpgroup's work on one Q tile (its 64 rows), as K6's consume_tile with the
// intra-warpgroup overlap: S_j = Q K_j^T and O += P_{j-1} V_{j-1} in flight together.
template <class Config, bool kPingPong>
__device__ __forceinline__ void consume_tile(const typename Config::Params& params,
                                             typename Config::SharedStorage& ss,
                                             typename Config::Pipeline::State& kv,
                                             typename Config::QPipeline::State& q,
                                             const sm90::WarpgroupTurns<kPingPong>& turns,
                                             int mma_thread) {
  using namespace cute;
  constexpr int D = Config::kHeadDim;
  using Pipeline = typename Config::Pipeline;
  using QPipeline = typename Config::QPipeline;
  using E = typename Config::E;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  const FwdProblem& p = params.problem;
  QPipeline::consumer_wait(ss.q_pipeline, q);
  const sm90::BlockCoord bc = sm90::published_tile<Config::kBroadcastTileCoord>(ss.q_tile_coord);
  const int q0 = bc.m_block * kBlockM;
  const sm90::KvRange range = sm90::AttentionMask::range(p, q0, kBlockM, kBlockN);
  const sm90::AttentionMask mask(p);
  const int hk = bc.head / p.group_size();
  using Scales = typename Config::Scales;
  const Scales scales(p, bc, hk, q0 + 64 * (mma_thread / 128));
  const float v_descale = p.v_descale.at(bc.batch, hk);  // read now: in the epilogue its load stalled

  typename Config::MmaQK mma_qk;
  typename Config::MmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(mma_thread);
  auto thr_pv = mma_pv.get_thread_slice(mma_thread);
  Tensor tSrQ = thr_qk.partition_fragment_A(make_tensor(make_smem_ptr(ss.q), typename Config::QLayout{}));
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<D>>{});
  Tensor tOrP = sm90::make_a_operand_for<E>(tSrS);
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor s_rc = sm90::as_rowcol(tSrS);
  Tensor c_rc = sm90::as_rowcol(tScS);
  Tensor o_rc = sm90::as_rowcol(tOrO);
  constexpr int kRows = decltype(size<0>(o_rc))::value;
  constexpr bool kTwoLevelPv = Config::kTwoLevelPv;
  constexpr bool kFoldScale = Scales::kFoldScale;
  constexpr bool kTileFactor = Scales::kTileFactor;
  constexpr int kSegments = [] {
    if constexpr (kTileFactor) return kBlockN / Scales::segment_keys(kBlockN);
    return 1;
  }();
  // The factors of a tile's scores: one (PerHeadDescale) or one per segment (BlockDescale), read
  // before S is waited for.
  struct TileScales {
    float f[kSegments];
  };
  auto tile_scales = [&](int tile) {
    TileScales t;
    if constexpr (kTileFactor) scales.template segment_scales_log2<kBlockN>(tile, t.f);
    else t.f[0] = scales.tile_scale_log2(tile);
    return t;
  };
  // k8: tile 0's K descales read here, beside Q's and V's, so that the three loads' latencies
  // overlap; read after S_0's wait, their L2 round trip followed the others' (ncu, d = 64 s = 512:
  // the stalls on these loads were 4% of k8's samples against k7's 1.5%). With no tile nothing is
  // read (seqlen_k = 0 has no scale block). (k7's factor is a constant: its code stays as it was.)
  TileScales tile0_scales{};
  if constexpr (kTileFactor) {
    if (range.end > 0) tile0_scales = tile_scales(0);
  }
  sm90::OnlineSoftmax<kRows, kFoldScale, /*kLazyRescale=*/false, /*kPOffsetLog2=*/8, kTileFactor,
                      kSegments>
      softmax(kTileFactor ? 1.f : tile_scales(0).f[0]);
  float alpha[kRows];
  clear(tOrO);
  // Two-level accumulation (fp8_pv.cuh: add_tile_to_output): each tile's P V lands in a fresh
  // accumulator T, which joins O in fp32. O lags one rescale: before tile j's T is added it is at
  // tile j - 1's max, and the FFMA O = O * alpha_{j-1} + T takes it to tile j's (alpha_prev holds
  // alpha_{j-1}; 0 before the first tile, whose O is zero).
  Tensor tOrT = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<D>>{});  // unused unless kTwoLevelPv
  Tensor t_rc = sm90::as_rowcol(tOrT);
  float alpha_prev[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) alpha_prev[r] = 0.f;

  auto issue_qk = [&](const typename Pipeline::State& st) {
    Tensor tSrK = thr_qk.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.k[st.index]), typename Config::KVLayout{}));
    sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_qk, tSrQ, tSrK, tSrS);
  };
  auto issue_pv = [&](const typename Pipeline::State& st) {
    Tensor tOrV = thr_pv.partition_fragment_B(
        make_tensor(make_smem_ptr(ss.vt[st.index]), typename Config::VtLayout{}));
    if constexpr (kTwoLevelPv) {
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true, /*kRegisterA=*/true>(mma_pv, tOrP, tOrV, tOrT);
    } else {
      sm90::warpgroup_gemm_issue</*kZeroInit=*/false, /*kRegisterA=*/true>(mma_pv, tOrP, tOrV, tOrO);
    }
  };
  // P_{j-1} V_{j-1} has landed (and the softmax gave alpha_j): O takes it and its rescale.
  auto take_pv = [&] {
    if constexpr (kTwoLevelPv) {
      sm90::fence_after_wait(tOrT, tOrP);
      sm90::add_tile_to_output(o_rc, t_rc, alpha_prev);
    } else {
      sm90::fence_after_wait(tOrO, tOrP);
    }
  };
  // S of `tile` (K stage `st`) has landed: release K_j (and Q after the last), mask, softmax.
  // With per-segment factors set_factors scales (only) non-positive segments and the mask follows
  // with a positive scale that scale_and_mask leaves alone.
  auto softmax_of = [&](int tile, const typename Pipeline::State& st, const TileScales& ts) {
    Pipeline::consumer_release(ss.pipeline_k, st);
    if (tile == range.end - 1) QPipeline::consumer_release(ss.q_pipeline, q);
    if constexpr (kTileFactor) softmax.set_factors(s_rc, ts.f);
    sm90::scale_and_mask<kFoldScale>(s_rc, c_rc, mask, range.needs_mask(tile), q0,
                                     tile * kBlockN, kTileFactor ? 1.f : ts.f[0]);
    softmax.update_scores(s_rc, alpha);
  };

  if (range.end == 0) QPipeline::consumer_release(ss.q_pipeline, q);  // sees no key: O = 0
  if constexpr (Config::kSerialPv) {
    // Each tile in turn: S_j, its softmax and P_j, then P_j V_j in four column quarters through
    // two accumulators taken in turn (S's registers, free once P_j is packed), each quarter added
    // to O's with the rescale: O = O * alpha_j + T (alpha 0 on the first tile, whose O is zero).
    // A quarter's GEMM runs while the previous quarter joins O; in halves through one accumulator
    // each GEMM waited for the last one's FFMAs (0.991x k7, 0.982x k8: WORKLOG, K7 session 48).
    // The turns of the ping-pong order the S GEMMs; while one warpgroup's softmax runs, the
    // other's GEMMs do.
    typename Config::MmaPVQuarter mma_pv_quarter;
    auto thr_pv_quarter = mma_pv_quarter.get_thread_slice(mma_thread);
    Tensor tOrTa = partition_fragment_C(mma_pv_quarter, Shape<Int<kBlockM>, Int<D / 4>>{});
    Tensor tOrTb = partition_fragment_C(mma_pv_quarter, Shape<Int<kBlockM>, Int<D / 4>>{});
    Tensor ta_rc = sm90::as_rowcol(tOrTa);
    Tensor tb_rc = sm90::as_rowcol(tOrTb);
    constexpr int kQuarterCols = decltype(size<1>(ta_rc))::value;
    for (int tile = 0; tile < range.end; ++tile) {
      const TileScales ts = (kTileFactor && tile == 0) ? tile0_scales : tile_scales(tile);
      // The same steps as tile 0 of the overlapped loop below. The S step is shared
      // (WarpgroupTurns::s_alone: SASS identical to the copies it replaced); the softmax and the
      // conversion are not: shared through a lambda with them, that loop's register allocation
      // changed (16 -> 24 stack bytes, 28 -> 36 LDL/STL at d = 128).
      turns.template s_alone<Pipeline>(ss.pipeline_k, kv, issue_qk, tSrS);
      softmax_of(tile, kv, ts);
      sm90::convert_to_fp8_a_operand(tSrS, tOrP);
      if (tile == 0) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) alpha[r] = 0.f;
      }
      Pipeline::consumer_wait(ss.pipeline_vt, kv);
      auto issue_quarter = [&](int quarter, auto& t) {
        Tensor tOrV = thr_pv_quarter.partition_fragment_B(make_tensor(
            make_smem_ptr(ss.vt[kv.index] + quarter * (D / 4) * kBlockN), typename Config::VtQuarterLayout{}));
        sm90::warpgroup_gemm_issue</*kZeroInit=*/true, /*kRegisterA=*/true>(mma_pv_quarter, tOrP, tOrV, t);
      };
      issue_quarter(0, tOrTa);
      issue_quarter(1, tOrTb);
      warpgroup_wait<1>();  // quarter 0
      sm90::fence_after_wait(tOrTa);
      sm90::add_tile_to_output(o_rc, ta_rc, alpha, 0 * kQuarterCols);
      issue_quarter(2, tOrTa);
      warpgroup_wait<1>();  // quarter 1
      sm90::fence_after_wait(tOrTb);
      sm90::add_tile_to_output(o_rc, tb_rc, alpha, 1 * kQuarterCols);
      issue_quarter(3, tOrTb);
      warpgroup_wait<1>();  // quarter 2
      sm90::fence_after_wait(tOrTa);
      sm90::add_tile_to_output(o_rc, ta_rc, alpha, 2 * kQuarterCols);
      warpgroup_wait<0>();  // quarter 3, and P_j no longer read
      sm90::fence_after_wait(tOrTb, tOrP);
      sm90::add_tile_to_output(o_rc, tb_rc, alpha, 3 * kQuarterCols);
      Pipeline::consumer_release(ss.pipeline_vt, kv);
      kv.advance();
    }
  } else {
  typename Pipeline::State prev = kv;  // the stage whose P V is pending
  if (range.end > 0) {             // tile 0: S_0 alone (O is zero: no rescale)
    turns.template s_alone<Pipeline>(ss.pipeline_k, kv, issue_qk, tSrS);
    softmax_of(0, kv, kTileFactor ? tile0_scales : tile_scales(0));
    sm90::convert_to_fp8_a_operand(tSrS, tOrP);
    prev = kv;
    kv.advance();
  }
  for (int tile = 1; tile < range.end; ++tile) {
    const TileScales ts = tile_scales(tile);
    Pipeline::consumer_wait(ss.pipeline_k, kv);
    turns.begin();
    issue_qk(kv);
    Pipeline::consumer_wait(ss.pipeline_vt, prev);
    issue_pv(prev);
    turns.end();
    warpgroup_wait<1>();
    sm90::fence_after_wait(tSrS);
    softmax_of(tile, kv, ts);
    // P_{j-1} V_{j-1} must land before O is rescaled and P_j takes its registers. A bare wait is
    // scheduled by ptxas ahead of the row max (wgmma.cuh: warpgroup_wait_after); tied to alpha
    // (the row max's result) it lands late in the exponentials, which then overlap P V.
    if constexpr (Config::kWaitPvAfterMax) sm90::warpgroup_wait_after<0>(alpha, &ss.wait_order[mma_thread]);
    else warpgroup_wait<0>();
    take_pv();
    Pipeline::consumer_release(ss.pipeline_vt, prev);
    if constexpr (kTwoLevelPv) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) alpha_prev[r] = alpha[r];
    } else {
      softmax.rescale(o_rc, alpha);
    }
    sm90::convert_to_fp8_a_operand(tSrS, tOrP);
    prev = kv;
    kv.advance();
  }
  if (range.end > 0) {  // the last tile's P V
    Pipeline::consumer_wait(ss.pipeline_vt, prev);
    turns.begin();
    issue_pv(prev);
    turns.end();
    warpgroup_wait<0>();
    take_pv();
    Pipeline::consumer_release(ss.pipeline_vt, prev);
  }
  }  // !kSerialPv

  float lse[kRows], inv[kRows];
  softmax.finalize(inv, lse);
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) inv[r] *= v_descale;
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<D>>{}));
  sm90::store_output_16B<typename Config::Out>(p, o_rc, inv, sm90::as_rowcol(tOcO), lse, bc.batch,
                                               bc.head, q0);
}

// KV tiles Q tile bc visits (from the first: the plain and causal masks only cut the end).
template <class Config>
__device__ __forceinline__ int kv_tiles_of(const FwdProblem& p, const sm90::BlockCoord& bc) {
  return sm90::AttentionMask::range(p, bc.m_block * Config::kBlockM, Config::kBlockM, Config::kBlockN).end;
}

// The static rounds' tile walk, shared by the TMA thread and the transposers: for every tile of
// this CTA, its coordinates and KV tile count.
template <class Config, class Fn>
__device__ __forceinline__ void for_each_tile(const FwdProblem& p,
                                              const sm90::PersistentTileScheduler& scheduler,
                                              const Fn& fn) {
  for (int round = 0; round < scheduler.rounds(gridDim.x); ++round) {
    const int idx = scheduler.tile_index(round, blockIdx.x, gridDim.x);
    if (idx >= scheduler.tiles()) continue;
    const sm90::BlockCoord bc = scheduler.block_coord(idx);
    fn(bc, kv_tiles_of<Config>(p, bc));
  }
}

// kDynamic: the tiles are taken from a counter (sm90::DynamicTileScheduler: dense causal
// problems with long rows, k7_launch.h: dynamic_tile_order) instead of the static snake rounds;
// the producer ends the walk with markers through the Q stage (for the consumers) and the V ring
// (for the transposers).
template <class Config, bool kDynamic>
__global__ void __launch_bounds__(Config::kThreads, 1)
    k7_forward_kernel(const __grid_constant__ typename Config::Params params) {
  constexpr int D = Config::kHeadDim;
  using Pipeline = typename Config::Pipeline;
  using QPipeline = typename Config::QPipeline;
  constexpr bool kPingPong = ping_pong(D);
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage, Config::kUniformStorageBase>();
  const FwdProblem& p = params.problem;
  using Scheduler = std::conditional_t<kDynamic, sm90::DynamicTileScheduler, sm90::PersistentTileScheduler>;
  const Scheduler scheduler = [&] {
    if constexpr (kDynamic) {
      return Scheduler(params.tile_plan, p, Config::kBlockM, params.tile_group);
    } else {
      return Scheduler(p, Config::kBlockM, params.tile_group);
    }
  }();
  if (threadIdx.x == 0) {
    Pipeline::init(ss.pipeline_k, Config::kConsumerThreads);
    Pipeline::init(ss.pipeline_v, kTransposeThreads);
    Pipeline::init(ss.pipeline_vt, Config::kConsumerThreads, /*producer_arrivals=*/kTransposeThreads);
    QPipeline::init(ss.q_pipeline, Config::kConsumerThreads);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<producer_registers(D, Config::kConsumerWarpgroups)>();
    if (threadIdx.x < 32) {  // warp 0: one thread streams Q, K and V for every tile of this CTA
      if (threadIdx.x != 0) return;
      typename Pipeline::State kv = Pipeline::producer_start();
      typename QPipeline::State q = QPipeline::producer_start();
      auto produce = [&](const sm90::BlockCoord& bc, int n_tiles) {
        sm90::load_q_stage_of<QPipeline, Config::kBlockM, D, typename Config::QLayout>(
            ss.q_pipeline, q, params.tma_q, ss.q, p, bc, ss.q_tile_coord);
        const int hk = bc.head / p.group_size();
        for (int tile = 0; tile < n_tiles; ++tile) {
          sm90::load_ring_tile<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
              ss.pipeline_k, kv, params.tma_k, ss.k[0], p, hk, bc.batch, tile);
          if constexpr (kDynamic) {
            sm90::load_ring_tile<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
                ss.pipeline_v, kv, params.tma_v, ss.v[0], p, hk, bc.batch, tile, 0,
                [&] { ss.v_stage_is_end[kv.index] = 0; });
          } else {
            sm90::load_ring_tile<Pipeline, Config::kBlockN, D, typename Config::KVLayout>(
                ss.pipeline_v, kv, params.tma_v, ss.v[0], p, hk, bc.batch, tile);
          }
          kv.advance();
        }
      };
      if constexpr (kDynamic) {
        for (;;) {  // a tile once the Q stage is free (so a CTA asks when about to start one)
          QPipeline::producer_wait_empty(ss.q_pipeline, q);
          const int idx = sm90::producer_uniform(scheduler.fetch());
          if (idx >= scheduler.tiles()) break;
          const sm90::BlockCoord bc = scheduler.block_coord(idx);
          produce(bc, kv_tiles_of<Config>(p, bc));
        }
        // The end markers: arrivals with no bytes, each with what tells it from a tile.
        QPipeline::producer_acquire(ss.q_pipeline, q, 0, [&] { sm90::publish_end_of_tiles(ss.q_tile_coord); });
        Pipeline::producer_acquire(ss.pipeline_v, kv, 0, [&] { ss.v_stage_is_end[kv.index] = 1; });
      } else {
        for_each_tile<Config>(p, scheduler, produce);
      }
    } else {  // warps 1-3: V ring -> Vt ring, tile by tile
      const int thread = threadIdx.x - 32;
      typename Pipeline::State in = Pipeline::consumer_start();
      typename Pipeline::State out = Pipeline::producer_start();
      auto transpose = [&] {
        Pipeline::producer_wait_empty(ss.pipeline_vt, out);
        sm90::transpose_v_tile<Config::kBlockN, D, transpose_units_in_flight(D)>(
            reinterpret_cast<const uint8_t*>(ss.v[in.index]),
            reinterpret_cast<uint8_t*>(ss.vt[out.index]), thread, kTransposeThreads);
        cutlass::arch::fence_view_async_shared();  // the stores, visible to WGMMA's reads
        Pipeline::producer_commit(ss.pipeline_vt, out);
        Pipeline::consumer_release(ss.pipeline_v, in);
        in.advance();
        out.advance();
      };
      if constexpr (kDynamic) {
        // Until the V ring's end marker, the stage after the last tile. (Its flag is per stage
        // and published with the stage: one flag for the ring would be written while a slower
        // transposer may still read it for the last tile, a race though a harmless one.)
        for (;;) {
          Pipeline::consumer_wait(ss.pipeline_v, in);
          // (From lane 0: a warp-uniform exit, as sm90::is_end_of_tiles.)
          if (__shfl_sync(0xffffffffu, ss.v_stage_is_end[in.index], 0)) break;
          transpose();
        }
      } else {
        for_each_tile<Config>(p, scheduler, [&](const sm90::BlockCoord&, int n_tiles) {
          for (int tile = 0; tile < n_tiles; ++tile) {
            Pipeline::consumer_wait(ss.pipeline_v, in);
            transpose();
          }
        });
      }
    }
  } else {  // consumers
    cutlass::arch::warpgroup_reg_alloc<consumer_registers(D, Config::kConsumerWarpgroups)>();
    const int mma_thread = threadIdx.x - 128;
    const sm90::WarpgroupTurns<kPingPong> turns(mma_thread / 128);
    typename Pipeline::State kv = Pipeline::consumer_start();
    typename QPipeline::State q = QPipeline::consumer_start();
    turns.start();
    if constexpr (kDynamic) {  // until the producer's end marker (consume_tile's wait then returns at once)
      for (;;) {
        QPipeline::consumer_wait(ss.q_pipeline, q);
        if (sm90::is_end_of_tiles(ss.q_tile_coord)) break;
        consume_tile<Config, kPingPong>(params, ss, kv, q, turns, mma_thread);
        q.advance();
      }
    } else {
      for (int round = 0; round < scheduler.rounds(gridDim.x); ++round) {
        if (scheduler.tile_index(round, blockIdx.x, gridDim.x) >= scheduler.tiles()) continue;
        consume_tile<Config, kPingPong>(params, ss, kv, q, turns, mma_thread);
        q.advance();
      }
    }
    turns.finish();
  }
}

template <typename T, int D, class Scales, int BlockN, int ConsumerWarpgroups>
cudaError_t launch_tiles(const FwdProblem& p, cudaStream_t stream) {
  using Config = K7Config<T, D, Scales, BlockN, ConsumerWarpgroups>;
  static_assert(Config::kSmemBytes <= smem_bytes(D), "k7_launch.h's smem_bytes() must bound the kernel's");
  if constexpr (dynamic_order_min_seqlen_q(D) > 0) {
    if (dynamic_tile_order(p)) {
      return sm90::with_tile_counter(stream, [&](int* counter) {
        return sm90::launch_persistent<Config>(k7_forward_kernel<Config, true>, Config::kThreads,
                                               /*element_bytes=*/1, kL2GroupBytes, p, stream, counter);
      });
    }
  }
  return sm90::launch_persistent<Config>(k7_forward_kernel<Config, false>, Config::kThreads,
                                         /*element_bytes=*/1, kL2GroupBytes, p, stream);
}

template <typename T, int D, class Scales>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (max_consumer_warpgroups(D) == 3) {
    if (consumer_warpgroups(p) == 3) return launch_tiles<T, D, Scales, kBlockN, 3>(p, stream);
  }
  if constexpr (max_block_n(D) != kBlockN) {
    if (wide_kv_tile(p)) return launch_tiles<T, D, Scales, kWideBlockN, 2>(p, stream);
  }
  return launch_tiles<T, D, Scales, kBlockN, 2>(p, stream);
}

}  // namespace hfa::k7
