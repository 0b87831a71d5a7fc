// bwd_sm90 at d = 256: the keys split between the two consumer warpgroups. In the d <= 128
// arrangement (bwd_sm90_kernel.cuh) each warpgroup owns 64 keys as WGMMA's M and keeps dK and dV
// (64 x D fp32) in registers: 256 registers per thread at d = 256, more than a consumer has. Here
// (FlashAttention-3's arrangement at d = 256) a CTA owns a KV block of 64 keys, warpgroup w the
// keys [32 w, 32 w + 32), and keeps dK^T and dV^T (256 x 32 fp32: 64 + 64 registers). Per Q block
// of 64 rows:
//   S = Q K_w^T, dP = dO V_w^T             SS, K-major; the warpgroups split N (the keys)
//   P = exp2(S * scale * log2 e - LSE2)    dS = P (dP - D): a row is a query (two per thread)
//   P and dS -> shared memory (bf16), the warpgroup's (64 x 32) halves side by side
//   dV^T += dO^T P_w, dK^T += Q^T dS_w     SS, M = d (four 64-row atoms), N = the warpgroup's 32
//                                          keys, k = the queries; dO, Q and the halves read MN-major
//   dQ = dS K, one Q block later           SS, each warpgroup 128 of dQ's columns in two slices of
//                                          64 (32 registers each), staged and added to the
//                                          workspace by TMA reductions
// K, V and two stages of Q and dO take 192 KB: no room is left for a 64 KB fp32 dQ staging tile,
// so dQ_i is staged in the ring stage that block i was read from (Q's tile and dO's, 32 KB each),
// which goes back to the producer once the reductions have read it. (8-byte fp32 atomics from the
// registers, the first version, made the kernel L2-bound: WORKLOG.) The deterministic mode sums
// dQ in 64-bit fixed point, as the d <= 128 kernel does (BwdProblem::dq_fixed_point), twice the
// bytes into the L2, which bound it: so there the CTAs run in pairs (clusters of two on KV blocks
// 2j and 2j + 1, bwd_sm90_cta.cuh: kCtaPairs) that walk the same Q blocks, and per slice each CTA
// mails half of its columns to the other (sm90::PairMailbox) and reduces the other half, summed
// with what it received: half the bytes. (The default mode measured 9% slower in pairs: the
// waits for the partner's mail cost more than the bytes saved. WORKLOG, "bwd_sm90", session 39.)
// The producer, the walk over Q blocks, the variable-length view and the dS hand-over between the
// warpgroups (ds_ready / ds_free, two buffers) are the d <= 128 kernel's (bwd_sm90_cta.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "common/problem.h"
#include "kernels/bwd_sm90/bwd_sm90_cta.cuh"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"
#include "kernels/common/backward_passes.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/sm90/common/attention_config.cuh"
#include "kernels/sm90/common/bulk_reduce.cuh"
#include "kernels/sm90/common/cta_pair.cuh"
#include "kernels/sm90/common/element.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::bwd_sm90 {

// Named barriers (CUTLASS adds its reserved ids): each warpgroup's P and dS halves are stored
// (ids 1, 2) before its own GEMMs read them; its dQ staging is written (ids 3, 4) before the leader
// issues the reductions (and in CTA pairs its mail read before it stores P over it).
constexpr int kHalvesStoredBarrier = 1;  // + warpgroup
constexpr int kDqStagedBarrier = 3;      // + warpgroup

// kFixedPointDq_: the deterministic mode's int64 dQ (BwdProblem::dq_fixed_point).
template <typename T, bool kFixedPointDq_ = false>
struct SplitKeysConfig {
  using E = typename sm90::CutlassElement<T>::type;
  static constexpr int kHeadDim = 256, D = kHeadDim;
  static constexpr int kBlockM = block_m(D, false), kBlockN = block_n(D), kStages = stages(D, false);
  static constexpr int kKeysPerWarpgroup = kBlockN / 2;
  // dQ: a warpgroup's 128 columns, computed in two slices of 64 (32 registers each), staged and
  // reduced in DqStage's slabs (32 fp32 or 16 int64 columns) in one Q or dO tile of the ring:
  // both slices whole in fp32 (the default mode); in int64 (fixed point, the deterministic mode)
  // the CTAs run in pairs (kCtaPairs), each keeping 32 columns of each slice (the first 32 in
  // rank 0) and mailing the other 32 to its partner, so that the kept sums of both slices fill
  // the tile.
  static constexpr bool kFixedPointDq = kFixedPointDq_;
  static constexpr bool kCtaPairs = cta_pairs(D, kFixedPointDq);
  static_assert(kCtaPairs == kFixedPointDq, "d = 256's deterministic mode runs in pairs");
  using DqElem = std::conditional_t<kFixedPointDq, long long, float>;
  using DqStaging = DqStage<kBlockM, sizeof(DqElem)>;
  static constexpr int kDqCols = D / 2, kDqSliceCols = 64, kDqSlices = kDqCols / kDqSliceCols;
  static constexpr int kDqKeptCols = kCtaPairs ? kDqSliceCols / 2 : kDqSliceCols;  // of a slice
  static constexpr int kDqSlabCols = DqStaging::kSlabCols;
  static constexpr int kDqSlabsPerStaging = kDqSlices * kDqKeptCols / kDqSlabCols;
  static constexpr int kDqRows = kBlockM;  // the rows of a dQ reduction's box
  static constexpr bool kStageConsumedBarriers = true;  // stage_consumed[] (init_barriers)
  static_assert(kBlockM * kDqSlices * kDqKeptCols * sizeof(DqElem) == kBlockM * D * sizeof(E),
                "a warpgroup's kept dQ columns of both slices fill one Q or dO tile of the ring");
  static_assert(kBlockN == 64 && kBlockM == 64, "the GEMM shapes below assume 64 x 64 blocks");
  using QLayout = sm90::TileLayout<E, kBlockM, D>;                // Q_i, dO_i (query x d)
  using KVLayout = sm90::TileLayout<E, kBlockN, D>;               // K_j, V_j (key x d)
  using QtLayout = sm90::TransposedView<QLayout, kBlockM, D>;     // Q^T, dO^T (d x query)
  using KtLayout = sm90::TransposedView<KVLayout, kBlockN, D>;    // K^T (d x key)
  // P and dS (query x key): warpgroup w's keys a (64 x 32) K-major tile of its own at w * 64 * 32,
  // so that the whole (64 x 64) tile is the two halves side by side along the keys (64-byte swizzle
  // atoms stacked down the rows first, then across: PdSLayout), which dQ reads K-major, while a
  // warpgroup reads its own half as (key x query), MN-major, for dV^T and dK^T (HalfViewLayout).
  // tests/cpu checks that PdSLayout's columns [32 w, 32 w + 32) are HalfLayout at w * 64 * 32.
  using HalfLayout = sm90::TileLayout<E, kBlockM, kKeysPerWarpgroup>;
  using HalfViewLayout = sm90::TransposedView<HalfLayout, kBlockM, kKeysPerWarpgroup>;
  using PdSLayout = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW64_Atom<E>{},
                                                 cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>>{}));

  using MmaSdP = sm90::QkTiledMma<E, kKeysPerWarpgroup, D, sm90::WarpgroupsAlongN<2>>;
  // One warpgroup each (its own keys, its own slices of dQ).
  using MmadKV = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float, cute::Shape<cute::_64, cute::Int<kKeysPerWarpgroup>, cute::Int<kBlockM>>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));
  using MmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float, cute::Shape<cute::_64, cute::Int<kDqSliceCols>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  using Pipeline = sm90::TmaPipeline<kStages>;

  struct SharedStorage {
    alignas(1024) E k[kBlockN * D];
    alignas(1024) E v[kBlockN * D];
    alignas(1024) E q[kStages][kBlockM * D];
    alignas(1024) E dout[kStages][kBlockM * D];
    alignas(1024) E p[kBlockM * kBlockN];      // each warpgroup its half; read by itself only
    alignas(1024) E ds[2][kBlockM * kBlockN];  // double-buffered: ds_ready / ds_free
    alignas(16) float2 stats[kStages][kBlockM];  // (LSE * log2 e, D) of the stage's rows
    uint64_t kv_barrier;
    uint64_t ds_ready[2];
    uint64_t ds_free[2];
    uint64_t stage_consumed[kStages];  // both warpgroups' GEMMs are done with the stage (256 arrivals)
    typename Pipeline::SharedStorage pipeline;
    // Last, so that the unpaired kernel's layout is the same without it: each warpgroup's mailbox
    // is its half of the P tile (free while it computes dQ) and 4 KB here.
    std::conditional_t<kCtaPairs, DqPairStorage<256>, NoDqPairStorage> pair;
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  using Params = BwdParams<E, kBlockM, kBlockN, D>;
};

// Each warpgroup's dQ mailbox in CTA pairs (its half of the P tile and 4 KB of ss.pair), or none.
template <class Config, class Storage>
__device__ __forceinline__ auto dq_mailbox(Storage& ss, int warpgroup, int wg_thread) {
  if constexpr (Config::kCtaPairs) {
    return sm90::PairMailbox(ss.p + warpgroup * Config::kBlockM * Config::kKeysPerWarpgroup, ss.pair.dq_mail[warpgroup],
                             &ss.pair.dq_mail_full[warpgroup], &ss.pair.dq_mail_free[warpgroup], wg_thread);
  } else {
    return NoDqMailbox{};
  }
}

// Two packed 2-byte values to shared memory (a generic pointer into it, 4-byte aligned).
template <typename E>
__device__ __forceinline__ void store_shared_pair(E* dst, uint32_t pair) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pair) : "memory");
}

// The consumer warpgroups of one CTA (run_backward_cta gives them its view of the problem).
// Config: SplitKeysConfig<T, kFixedPointDq>, int64 dQ in the deterministic mode.
template <typename T, class Config, bool kVarlen, class Mask, class Score>
__device__ __forceinline__ void split_keys_consumers(const typename Config::Params& params,
                                                     typename Config::SharedStorage& ss,
                                                     const FwdProblem& p, const SequenceOffsets& at,
                                                     const BackwardQBlocks<Config::kBlockM>& blocks,
                                                     int /*kv_block*/, int k0, int hk, int b) {
  using E = typename Config::E;
  using Pipeline = typename Config::Pipeline;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, D = Config::kHeadDim;
  constexpr int kHalf = kBlockM * Config::kKeysPerWarpgroup;  // elements of a warpgroup's P / dS half
  using namespace cute;
  const BwdProblem& bp = params.problem;
  using QBlock = typename BackwardQBlocks<kBlockM>::Block;
  const int mma_thread = threadIdx.x - 128;  // 0 .. 255
  const int warpgroup = mma_thread / 128, wg_thread = mma_thread % 128;
  typename Config::MmaSdP mma_sdp;
  typename Config::MmadKV mma_dkv;
  typename Config::MmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_thread);
  auto thr_dkv = mma_dkv.get_thread_slice(wg_thread);
  auto thr_dq = mma_dq.get_thread_slice(wg_thread);

  Tensor tSrK = thr_sdp.partition_fragment_B(make_tensor(make_smem_ptr(ss.k), typename Config::KVLayout{}));
  Tensor tSrV = thr_sdp.partition_fragment_B(make_tensor(make_smem_ptr(ss.v), typename Config::KVLayout{}));
  // This warpgroup's halves of P and dS as dV^T's and dK^T's B operand (key x query).
  Tensor tdVrP = thr_dkv.partition_fragment_B(make_tensor(make_smem_ptr(ss.p + warpgroup * kHalf),
                                                          typename Config::HalfViewLayout{}));
  Tensor tdV = partition_fragment_C(mma_dkv, Shape<Int<D>, Int<Config::kKeysPerWarpgroup>>{});
  Tensor tdK = partition_fragment_C(mma_dkv, Shape<Int<D>, Int<Config::kKeysPerWarpgroup>>{});
  clear(tdV);
  clear(tdK);
  // (query, key) coordinates of the S / dP fragments (the key within the block), and (query,
  // column within a slice) of dQ's.
  Tensor c_rc = sm90::as_rowcol(thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})));
  Tensor dq_coord_rc = sm90::as_rowcol(thr_dq.partition_C(make_identity_tensor(Shape<_64, Int<Config::kDqSliceCols>>{})));
  const float scale_log2 = Score::log2_factor(p);
  const Mask mask(p);
  const Score score(p);

  // dQ of Q block i (iteration i + 1), one block late: both warpgroups' halves of dS are in
  // buffer i % 2 (ds_ready); each warpgroup computes its 128 columns of dQ_i = dS K_j in two
  // slices and stages them (DqStage's slabs) in the ring stage block i was read from --
  // warpgroup 0 in its Q tile, warpgroup 1 in its dO tile, 32 KB each -- once both warpgroups'
  // GEMMs are done with that stage (stage_consumed): alone (dq_block, the default mode) both
  // slices in fp32, a half of dQ_i exactly; in CTA pairs (dq_start / dq_finish below, the
  // deterministic mode) the 32 kept columns of each slice in int64. After the staging the
  // warpgroup's leader adds its slabs to the workspace by TMA reductions (rows past seqlen_q lie
  // outside the tensor map: skipped); it hands the stage to the producer once they have read it
  // (release_staged). The dS buffer is free once both warpgroups' dQ GEMMs have read it (ds_free).
  using DqStaging = typename Config::DqStaging;
  const int dq_row0 = get<0>(dq_coord_rc(0, 0)), dq_col0 = get<1>(dq_coord_rc(0, 0));
  // This thread's staging row base for each 8-column group of a slab (DqStage's XOR form): a
  // store's address is one of them plus immediates.
  // A thread's rows are all odd or all even: odd ones store the partner group's columns through
  // the swapped bases (DqStage::kOddRowGroupSwap: no bank conflicts).
  const bool odd_rows = dq_row0 % 2 == 1;
  const uint32_t even_base = DqStaging::row_base(dq_row0, dq_col0 % 8) + DqStaging::byte_offset(0, dq_col0 - dq_col0 % 8);
  const uint32_t dq_row_base = odd_rows ? DqStaging::swapped(even_base) : even_base;
  uint32_t row_bases[Config::kDqSlabCols / 8];
  CUTE_UNROLL
  for (int g = 0; g < Config::kDqSlabCols / 8; ++g) row_bases[g] = DqStaging::byte_offset(dq_row_base, g * 8);
  constexpr int kSlicesPerStaging = Config::kDqSlices;  // alone: fp32, both slices at once
  constexpr int kSlabsPerStaging = kSlicesPerStaging * Config::kDqSliceCols / Config::kDqSlabCols;
  auto dq_block = [&](QBlock qb, int i, const typename Pipeline::State& st_i) {
    const int buf = i % 2;
    cutlass::arch::ClusterBarrier::wait(&ss.ds_ready[buf], (i / 2) % 2);
    Tensor tdQrdS = thr_dq.partition_fragment_A(make_tensor(make_smem_ptr(ss.ds[buf]), typename Config::PdSLayout{}));
    Tensor s_kt = make_tensor(make_smem_ptr(ss.k), typename Config::KtLayout{});
    void* stage = warpgroup == 0 ? static_cast<void*>(ss.q[st_i.index]) : static_cast<void*>(ss.dout[st_i.index]);
    const uint32_t stage_addr = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
    // Fixed point: the power of two of each of the thread's rows (the pre-pass's).
    float row_scale[2];
    if constexpr (Config::kFixedPointDq) {
      const float* scales = bp.dq_scale + workspace_rows(bp, b, qb.h, at.q, kVarlen).stats + qb.q0;
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) row_scale[r] = scales[dq_row0 + 8 * r];
    }
    CUTE_UNROLL
    for (int slice = 0; slice < Config::kDqSlices; ++slice) {
      Tensor tdQrK = thr_dq.partition_fragment_B(
          local_tile(s_kt, Shape<Int<Config::kDqSliceCols>, Int<kBlockN>>{}, make_coord(warpgroup * Config::kDqSlices + slice, _0{})));
      Tensor tdQ = partition_fragment_C(mma_dq, Shape<_64, Int<Config::kDqSliceCols>>{});
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_dq, tdQrdS, tdQrK, tdQ);
      const int in_staging = slice % kSlicesPerStaging;
      warpgroup_wait<0>();
      sm90::fence_after_wait(tdQ);
      if (slice == 0) cutlass::arch::ClusterBarrier::wait(&ss.stage_consumed[st_i.index], st_i.phase);
      if (slice == Config::kDqSlices - 1) cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[buf]);
      Tensor dq_rc = sm90::as_rowcol(tdQ);
      static_assert(size<0>(decltype(dq_rc){}) == 2, "a thread holds two rows of a dQ slice");
      // Fragment columns (c, c + 1) are 8-column group c / 2; the partner group's are c ^ kSwapCols.
      constexpr int kSwapCols = 2 * DqStaging::kOddRowGroupSwap;
      static_assert(size<1>(dq_rc) % (2 * kSwapCols) == 0, "the partner group lies in the slice");
      CUTE_UNROLL
      for (int r = 0; r < size<0>(dq_rc); ++r)
        CUTE_UNROLL
        for (int c = 0; c < size<1>(dq_rc); c += 2) {
          // (row, col) = dq_row0 + 8 r, the staged slices' columns + dq_col0 + (constant): one
          // base, immediates per store (as bwd_sm90_kernel.cuh stages its dQ).
          const int col = in_staging * Config::kDqSliceCols + get<1>(dq_coord_rc(r, c)) - dq_col0;
          const uint32_t addr = stage_addr + row_bases[col % Config::kDqSlabCols / 8] +
                                DqStaging::byte_offset(0, col - col % Config::kDqSlabCols) + r * 1024;
          stage_dq_pair<Config::kFixedPointDq, kSwapCols>(addr, dq_rc, r, c, odd_rows, row_scale);
        }
      if (in_staging != kSlicesPerStaging - 1) continue;
      sm90::fence_proxy_async_shared();  // the staging, before the bulk engine's reads
      // Only the leader's warp waits for the staging to be complete; the others go on. (Named
      // barriers count whole warps: a warp must not split between sync and arrive.)
      if (wg_thread < 32) {
        cutlass::arch::NamedBarrier::sync(128, kDqStagedBarrier + warpgroup);
      } else {
        cutlass::arch::NamedBarrier::arrive(128, kDqStagedBarrier + warpgroup);
      }
      if (wg_thread == 0) {
        const WorkspaceRows rows = workspace_rows(bp, b, qb.h, at.q, kVarlen);
        const int first_col = warpgroup * Config::kDqCols + (slice + 1 - kSlicesPerStaging) * Config::kDqSliceCols;
        CUTE_UNROLL
        for (int s = 0; s < kSlabsPerStaging; ++s)
          sm90::tensor_reduce_add(&params.dq_map, static_cast<char*>(stage) + s * kBlockM * 128,
                                  first_col + s * Config::kDqSlabCols, static_cast<int>(rows.dq_row0 + qb.q0),
                                  static_cast<int>(rows.dq_plane));
        sm90::bulk_commit_group();
      }
    }
  };
  // The leader hands a stage that carried dQ back to the producer once the reductions have read
  // it: called while the warpgroup waits for its next GEMMs anyway, not right after the issue,
  // where every warp of the warpgroup would wait for the leader's wait.
  auto release_staged = [&](const typename Pipeline::State& st_i) {
    if (wg_thread == 0) {
      sm90::bulk_wait_read<0>();
      Pipeline::consumer_release(ss.pipeline, st_i, 128);
    }
  };

  // In CTA pairs (the deterministic mode, int64): of each slice a warpgroup keeps 32 columns (the
  // first 32 in the pair's rank-0 CTA) and mails the other 32 to the same warpgroup of the
  // partner CTA, which works on the same Q block: 16 of a thread's 32 values, the partner's
  // thread of the same index holding the same (row, column) coordinates. It adds the partner's 16
  // to its kept ones (one fp32 addition of two partial sums, the same bits in either order) and
  // stages the sums of both slices (32 KB of int64: the row's 2^e_i times dQ, rounded). The
  // partner's mail takes a while (it crosses the SMs, and the partner may be behind): slice 0's
  // is read after slice 1's GEMM is issued (dq_start), slice 1's after the next block's S and dP
  // GEMMs are (dq_finish), with slice 1's kept columns in registers in between. The mailbox is the
  // warpgroup's half of the P tile and 4 KB of dq_mail: freed for dQ_i's slice 0 message once this
  // warpgroup's dV^T GEMM has read P_i (the end of iteration i), for slice 1's once slice 0's
  // message is read; every warp's mail is read before any warp stores the next P over it (in
  // dq_finish every warp waits on the staged barrier; with only the leader's warp waiting there,
  // after a barrier of its own for the mail, racecheck reported WAR hazards between the mail reads
  // and the P stores, none since). The lambdas are generic: instantiated in CTA pairs only.
  const int rank = Config::kCtaPairs ? static_cast<int>(sm90::cluster_cta_rank()) : 0;
  auto mailbox = dq_mailbox<Config>(ss, warpgroup, wg_thread);
  using Kept = DqKept;  // a slice's kept columns: the thread's two rows, four column pairs
  // The partner's half of a slice to its mailbox; this CTA's half into `kept`.
  auto mail_and_keep = [&](const auto& tdQ, Kept& kept) {
    mail_and_keep_dq(sm90::as_rowcol(tdQ), rank, mailbox, kept);
  };
  // The partner's half of a slice added to `kept`, and the sums staged: both slices' kept
  // columns side by side, the row's 2^e_i times dQ (the pre-pass's) in int64.
  auto receive_and_stage = [&](Kept& kept, int slice, uint32_t stage_addr, const float (&row_scale)[2]) {
    receive_and_add_dq(mailbox, wg_thread == 0, /*release=*/slice == 0, kept);
    constexpr int kSwapCols = 2 * DqStaging::kOddRowGroupSwap;
    static_assert(8 % (2 * kSwapCols) == 0, "the partner group lies in the kept columns");
    auto kept_rc = [&](int r, int c) { return kept[r][c]; };
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r)
      CUTE_UNROLL
      for (int c = 0; c < 8; c += 2) {
        const int col = slice * Config::kDqKeptCols + get<1>(dq_coord_rc(r, c)) - dq_col0;
        const uint32_t addr = stage_addr + row_bases[col % Config::kDqSlabCols / 8] +
                              DqStaging::byte_offset(0, col - col % Config::kDqSlabCols) + r * 1024;
        stage_dq_pair<Config::kFixedPointDq, kSwapCols>(addr, kept_rc, r, c, odd_rows, row_scale);
      }
  };
  // The power of two of each of the thread's rows (the pre-pass's), loaded ahead of the mail.
  auto pair_row_scales = [&](auto qb, float (&row_scale)[2]) {
    const float* scales = bp.dq_scale + workspace_rows(bp, b, qb.h, at.q, kVarlen).stats + qb.q0;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) row_scale[r] = scales[dq_row0 + 8 * r];
  };
  auto pair_stage = [&](const auto& st_i) {
    return warpgroup == 0 ? static_cast<void*>(ss.q[st_i.index]) : static_cast<void*>(ss.dout[st_i.index]);
  };
  auto dq_start = [&](auto qb, int i, const auto& st_i, Kept& kept1) {
    static_assert(Config::kDqSlices == 2, "one slice staged in dq_start, one in dq_finish");
    const int buf = i % 2;
    cutlass::arch::ClusterBarrier::wait(&ss.ds_ready[buf], (i / 2) % 2);
    Tensor tdQrdS = thr_dq.partition_fragment_A(make_tensor(make_smem_ptr(ss.ds[buf]), typename Config::PdSLayout{}));
    Tensor s_kt = make_tensor(make_smem_ptr(ss.k), typename Config::KtLayout{});
    auto slice_gemm = [&](int slice, auto& tdQ) {
      Tensor tdQrK = thr_dq.partition_fragment_B(
          local_tile(s_kt, Shape<Int<Config::kDqSliceCols>, Int<kBlockN>>{}, make_coord(warpgroup * Config::kDqSlices + slice, _0{})));
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_dq, tdQrdS, tdQrK, tdQ);
    };
    Kept kept0;
    {
      Tensor tdQ = partition_fragment_C(mma_dq, Shape<_64, Int<Config::kDqSliceCols>>{});
      slice_gemm(0, tdQ);
      warpgroup_wait<0>();
      sm90::fence_after_wait(tdQ);
      mail_and_keep(tdQ, kept0);
    }
    Tensor tdQ = partition_fragment_C(mma_dq, Shape<_64, Int<Config::kDqSliceCols>>{});
    slice_gemm(1, tdQ);
    float row_scale[2];
    pair_row_scales(qb, row_scale);
    cutlass::arch::ClusterBarrier::wait(&ss.stage_consumed[st_i.index], st_i.phase);
    receive_and_stage(kept0, 0, sm90::shared_address(pair_stage(st_i)), row_scale);
    warpgroup_wait<0>();
    sm90::fence_after_wait(tdQ);
    cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[buf]);
    mail_and_keep(tdQ, kept1);
  };
  auto dq_finish = [&](auto qb, const auto& st_i, Kept& kept1) {
    void* stage = pair_stage(st_i);
    float row_scale[2];
    pair_row_scales(qb, row_scale);
    receive_and_stage(kept1, 1, sm90::shared_address(stage), row_scale);
    sm90::fence_proxy_async_shared();  // the staging, before the bulk engine's reads
    cutlass::arch::NamedBarrier::sync(128, kDqStagedBarrier + warpgroup);
    if (wg_thread == 0) {
      const WorkspaceRows rows = workspace_rows(bp, b, qb.h, at.q, kVarlen);
      CUTE_UNROLL
      for (int s = 0; s < Config::kDqSlabsPerStaging; ++s) {
        // Slab s holds kept columns [s * kDqSlabCols, ...) of the slices side by side.
        const int kept_col = s * Config::kDqSlabCols;
        const int col = warpgroup * Config::kDqCols + kept_col / Config::kDqKeptCols * Config::kDqSliceCols +
                        rank * Config::kDqKeptCols + kept_col % Config::kDqKeptCols;
        sm90::tensor_reduce_add(&params.dq_map, static_cast<char*>(stage) + s * kBlockM * 128, col,
                                static_cast<int>(rows.dq_row0 + qb.q0), static_cast<int>(rows.dq_plane));
      }
      sm90::bulk_commit_group();
    }
  };
  float kept1[2][8];  // CTA pairs: dQ_{it - 1}'s slice 1, kept columns (dq_start to dq_finish)

  if (blocks.n_iters > 0) sm90::OnceBarrier::wait(ss.kv_barrier);
  typename Pipeline::State st = Pipeline::consumer_start(), st_prev = st;
  QBlock blk = blocks.first(), prev = blk;
  for (int it = 0; it < blocks.n_iters; ++it) {
    // The previous block's dQ first: with S and dP in flight beside dK^T and dV^T its staging
    // did not fit the registers (ptxas serialized the WGMMAs, C7512, and spilled), as at d = 128.
    if (it > 0) {
      if constexpr (Config::kCtaPairs) {
        dq_start(prev, it - 1, st_prev, kept1);
      } else {
        dq_block(prev, it - 1, st_prev);
      }
    }
    Pipeline::consumer_wait(ss.pipeline, st);
    Tensor s_q = make_tensor(make_smem_ptr(ss.q[st.index]), typename Config::QLayout{});
    Tensor s_do = make_tensor(make_smem_ptr(ss.dout[st.index]), typename Config::QLayout{});
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor tSrQ = thr_sdp.partition_fragment_A(s_q);
    Tensor tSrdO = thr_sdp.partition_fragment_A(s_do);
    sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrQ, tSrK, tSrS);
    sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrdO, tSrV, tSrdP);
    if (it > 0) {
      if constexpr (Config::kCtaPairs) dq_finish(prev, st_prev, kept1);
      release_staged(st_prev);
    }
    warpgroup_wait<0>();
    sm90::fence_after_wait(tSrS, tSrdP);

    // P and dS; a row is a query (its LSE2 and D), a column a key. Only blocks that cross the
    // causal diagonal, a window's edge or the end of the keys pay for the compares; padded query
    // rows have LSE2 = +inf: P = 0. With the softcap, dS = P (dP - D) tanh'(.).
    Tensor s_rc = sm90::as_rowcol(tSrS);
    Tensor dp_rc = sm90::as_rowcol(tSrdP);
    const float2* stats = ss.stats[st.index];
    const bool needs_mask = !mask.covers(blk.q0, blk.q0 + kBlockM - 1, k0, k0 + kBlockN);
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int q = get<0>(c_rc(r, 0));
      const float2 stat = stats[q];  // (LSE2, D)
      const VisibleKeys<Mask> keys(mask, needs_mask, blk.q0 + q, k0, kBlockN);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        const bool seen = keys.sees(get<1>(c_rc(r, c)));
        if constexpr (Score::kTransforms) {
          transformed_p_and_ds(score, scale_log2, stat, seen, s_rc(r, c), dp_rc(r, c));
        } else {
          const float prob = seen ? exp2_approx(fmaf(s_rc(r, c), scale_log2, -stat.x)) : 0.f;
          s_rc(r, c) = prob;
          dp_rc(r, c) = prob * (dp_rc(r, c) - stat.y);
        }
      }
    }

    // P and dS (the element type) into this warpgroup's halves: P's single buffer was last read
    // by the previous block's dV^T GEMM (completed); dS's buffer it % 2 by both warpgroups' dQ
    // GEMMs two blocks ago (ds_free).
    if (it >= 2) cutlass::arch::ClusterBarrier::wait(&ss.ds_free[it % 2], ((it - 2) / 2) % 2);
    // A thread's column pairs (2j, 2j + 1) are adjacent in the tile (the swizzle moves 16-byte
    // chunks): one 4-byte shared store each.
    Tensor p_s = sm90::as_rowcol(thr_sdp.partition_C(make_tensor(make_smem_ptr(ss.p), typename Config::PdSLayout{})));
    Tensor ds_s = sm90::as_rowcol(thr_sdp.partition_C(make_tensor(make_smem_ptr(ss.ds[it % 2]), typename Config::PdSLayout{})));
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r)
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); c += 2) {
        store_shared_pair(&p_s(r, c), sm90::pack_pair<T>(s_rc(r, c), s_rc(r, c + 1)));
        store_shared_pair(&ds_s(r, c), sm90::pack_pair<T>(dp_rc(r, c), dp_rc(r, c + 1)));
      }
    cutlass::arch::fence_view_async_shared();  // the stores, before the WGMMAs' (async-proxy) reads
    cutlass::arch::NamedBarrier::sync(128, kHalvesStoredBarrier + warpgroup);
    cutlass::arch::ClusterBarrier::arrive(&ss.ds_ready[it % 2]);

    // dV^T += dO^T P_w, dK^T += Q^T dS_w.
    Tensor tdKrdS = thr_dkv.partition_fragment_B(make_tensor(make_smem_ptr(ss.ds[it % 2] + warpgroup * kHalf),
                                                             typename Config::HalfViewLayout{}));
    Tensor tdVrdOt = thr_dkv.partition_fragment_A(make_tensor(make_smem_ptr(ss.dout[st.index]), typename Config::QtLayout{}));
    Tensor tdKrQt = thr_dkv.partition_fragment_A(make_tensor(make_smem_ptr(ss.q[st.index]), typename Config::QtLayout{}));
    sm90::warpgroup_gemm_issue</*kZeroInit=*/false>(mma_dkv, tdVrdOt, tdVrP, tdV);
    sm90::warpgroup_gemm_issue</*kZeroInit=*/false>(mma_dkv, tdKrQt, tdKrdS, tdK);
    warpgroup_wait<0>();
    sm90::fence_after_wait(tdV, tdK);
    // Q_i and dO_i are read; the stage is released after it has carried dQ_i (release_staged).
    cutlass::arch::ClusterBarrier::arrive(&ss.stage_consumed[st.index]);
    // CTA pairs: P_i is read, the mailbox may take the partner's first message of dQ_i.
    if constexpr (Config::kCtaPairs) mailbox.release();
    st_prev = st;
    st.advance();
    prev = blk;
    blk = blocks.next(blk);
  }
  if (blocks.n_iters > 0) {
    if constexpr (Config::kCtaPairs) {
      dq_start(prev, blocks.n_iters - 1, st_prev, kept1);
      dq_finish(prev, st_prev, kept1);
    } else {
      dq_block(prev, blocks.n_iters - 1, st_prev);
    }
    release_staged(st_prev);
    if (wg_thread == 0) sm90::bulk_wait<0>();  // complete before the post-pass reads the workspace
  }

  // dK = scale * (dK^T)^T and dV to global memory, rows (keys) past seqlen_k dropped (and zeroed
  // up to the sequence's rows when seqused_k leaves some unused). A thread holds (d, key) pairs:
  // the stores are 2- or 4-byte scattered ones, once per CTA.
  Tensor kv_coord_rc = sm90::as_rowcol(
      thr_dkv.partition_C(make_identity_tensor(Shape<Int<D>, Int<Config::kKeysPerWarpgroup>>{})));
  const int used = p.seqlen_k - k0;
  const int key0 = warpgroup * Config::kKeysPerWarpgroup;
  with_gradient_rows<T, kVarlen>(bp, b, hk, k0, [&](auto* dk_out, auto* dv_out, int k_rows) {
    using G = std::remove_pointer_t<decltype(dk_out)>;
    Tensor dk_rc = sm90::as_rowcol(tdK);
    Tensor dv_rc = sm90::as_rowcol(tdV);
    CUTE_UNROLL
    for (int c = 0; c < size<1>(dk_rc); ++c) {
      const int key = key0 + get<1>(kv_coord_rc(0, c));
      if (key >= used) continue;
      CUTE_UNROLL
      for (int r = 0; r < size<0>(dk_rc); ++r) {
        const int d = get<0>(kv_coord_rc(r, c));
        dk_out[key * bp.dk_row_stride + d] = from_float<G>(dk_rc(r, c) * p.softmax_scale);
        dv_out[key * bp.dv_row_stride + d] = from_float<G>(dv_rc(r, c));
      }
    }
    zero_unused_tail<D, kVarlen, kBlockN>(bp, dk_out, dv_out, k_rows, k0, used, mma_thread);
  });
}

// Config: SplitKeysConfig<T, kFixedPointDq> (ConfigFor in bwd_sm90_kernel.cuh).
template <typename T, class Config, bool kVarlen, class Mask, class Score>
__global__ void __launch_bounds__(kThreads, 1)
    bwd_sm90_split_keys_kernel(const __grid_constant__ typename Config::Params params) {
  run_backward_cta<Config, T, kVarlen>(params, [&](auto&... cta) {
    split_keys_consumers<T, Config, kVarlen, Mask, Score>(params, cta...);
  });
}

}  // namespace hfa::bwd_sm90
