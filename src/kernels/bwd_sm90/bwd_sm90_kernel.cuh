// bwd_sm90: the FlashAttention-2 backward (Algorithm 2) built the Hopper way, on WGMMA and TMA
// with warp specialization. One CTA per (KV block j of 128 keys, KV head, batch):
//   producer warp   loads K_j and V_j once, then streams Q_i, dO_i and the row statistics
//                   (LSE_i, D_i) of every Q block i the KV block sees through a 2-stage mbarrier
//                   ring (TMA; the statistics by a 1-D bulk copy)
//   2 consumer      each owns 64 of the block's keys: dK and dV (64 x D fp32) stay in its
//   warpgroups      registers for the whole walk. Per Q block, with the keys as WGMMA's M
//                   ("swapAB": the GEMMs produce S^T and dP^T, not S and dP):
//                     S^T = K Q^T, dP^T = V dO^T              SS, K-major operands
//                     P^T = exp2(S^T * scale * log2 e - LSE2)  dS^T = P^T * (dP^T - D)
//                     dV += P^T dO, dK += dS^T Q               RS: P^T and dS^T straight from the
//                                                              registers (K4's handoff), dO and Q
//                                                              read MN-major
//                     dS^T -> shared memory (bf16), both warpgroups' halves, in one of two
//                     buffers handed over by mbarriers (ds_ready, ds_free)
//                     dQ_i = dS K, one Q block later           SS, both operands MN-major; the
//                                                              warpgroups split dQ's columns
//                   (the warpgroups meet only through those buffers, so they need not run in
//                   lockstep: one's exponentials can run during the other's GEMMs)
//                   and dQ_i (fp32) leaves through shared memory and TMA tensor reductions into
//                   the fp32 workspace (one per 32-column slab), converted to the output dtype by
//                   the post-pass
//   dQ writer warp  (the producer warpgroup's warp 1) issues those reductions once a warpgroup has
//                   staged its part, and hands the staging back once they have read it, so the
//                   consumer warps never wait for one thread's TMA issue (write_dq_blocks).
// The pre-pass (D = rowsum(dO * O), LSE in base 2) and the post-pass are fa2's
// (kernels/common/backward_passes.cuh); causal block skipping and the Q-block walk over the GQA
// group too. Deterministic mode (a kernel of its own): dQ in 64-bit fixed point
// (BwdProblem::dq_fixed_point; the scale of each row from the bound in backward_passes.cuh):
// dQ_i's values times the row's power of two, rounded to int64, staged in 16-column slabs and
// added by the same reductions on a u64 tensor map -- integer sums, so the bits do not depend on
// the order in which KV blocks add, and no CTA waits for another. At d = 128 the CTAs run in
// pairs (Config::kCtaPairs, bwd_sm90_cta.cuh) that add half of each dQ block on chip before
// staging it: half the int64 bytes into the L2. (The d = 256 arrangement does the same, its two
// int64 slices staged one after the other.) Variable-length batches (a kernel
// of their own too): the CTA works on its sequence as a dense problem, the grid's third axis
// being the sequences and the workspace laid out per sequence (backward_workspace.h).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "common/problem.h"
#include "kernels/bwd_sm90/bwd_sm90_cta.cuh"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"
#include "kernels/bwd_sm90/bwd_sm90_split_keys.cuh"
#include "kernels/common/backward_passes.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/sm90/common/attention_config.cuh"
#include "kernels/sm90/common/bulk_reduce.cuh"
#include "kernels/sm90/common/element.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tensor_map.h"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::bwd_sm90 {

// Named barriers (CUTLASS adds its reserved ids) between consumer warpgroup w and the dQ writer
// warp (write_dq_blocks; 160 threads each): w's dQ staging is free again (kDqFreeBarrier + w) and
// written (kDqWrittenBarrier + w).
constexpr int kDqFreeBarrier = 1, kDqWrittenBarrier = 3;
constexpr int kDqBarrierThreads = 128 + 32;

// BlockM, Stages: block_m() and stages() of the kernel's mode and mask (bwd_sm90_launch.h);
// kFixedPointDq: the deterministic mode's int64 dQ staging (BwdProblem::dq_fixed_point).
template <typename T, int D, int BlockM, int Stages, bool kFixedPointDq_ = false>
struct BwdConfig {
  using E = typename sm90::CutlassElement<T>::type;
  static constexpr int kBlockM = BlockM, kBlockN = block_n(D), kStages = Stages;
  static constexpr int kHeadDim = D;
  using QLayout = sm90::TileLayout<E, kBlockM, D>;         // Q_i, dO_i (query x d)
  using KVLayout = sm90::TileLayout<E, kBlockN, D>;        // K_j, V_j (key x d)
  using DsLayout = sm90::TileLayout<E, kBlockN, kBlockM>;  // dS^T (key x query), as computed
  using QtLayout = sm90::TransposedView<QLayout, kBlockM, D>;            // (d, query)
  using KtLayout = sm90::TransposedView<KVLayout, kBlockN, D>;           // (d, key)
  using DsViewLayout = sm90::TransposedView<DsLayout, kBlockN, kBlockM>; // dS (query, key)

  // The keys are M, 64 per consumer warpgroup, in S^T / dP^T (N = queries, k = d) and in dK / dV
  // (N = d, k = queries). dQ (M = queries, N = d, k = keys) splits its columns between the
  // warpgroups at 64-row blocks, its rows at 128-row ones (kDqSplitsRows): a warpgroup's dQ is
  // then 64 x D (m64nDk16: 2 + D / 32 KB of shared-memory operands per D / 2 tensor clocks) rather
  // than 128 x D / 2 (m64n(D/2)k16: 2 + D / 64 KB per D / 4 clocks): at d = 64, 128 bytes per
  // clock instead of 192, which is more than shared memory delivers.
  static constexpr bool kDqSplitsRows = kBlockM > 64;
  using MmaSdP = sm90::QkTiledMma<E, kBlockM, D, sm90::WarpgroupsAlongM<2>>;
  using MmadKV = sm90::RegisterATiledMma<E, D, kBlockM, cute::GMMA::Major::MN, sm90::WarpgroupsAlongM<2>>;
  using MmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float,
                                 cute::Shape<cute::_64, cute::Int<kDqSplitsRows ? D : D / 2>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>(),
      std::conditional_t<kDqSplitsRows, sm90::WarpgroupsAlongM<2>, sm90::WarpgroupsAlongN<2>>{}));
  using Pipeline = sm90::TmaPipeline<kStages>;
  static constexpr bool kFixedPointDq = kFixedPointDq_;
  using DqElem = std::conditional_t<kFixedPointDq, long long, float>;
  using DqStaging = DqStage<kBlockM, sizeof(DqElem)>;
  static constexpr int kDqSlabCols = DqStaging::kSlabCols;
  // The deterministic mode (int64) at d = 128 runs the CTAs in pairs (bwd_sm90_cta.cuh:
  // kCtaPairs): of each dQ block a warpgroup keeps half of its 64 columns (the first half in the
  // pair's rank 0) and mails the other half to the same warpgroup of the partner CTA (a
  // sm90::PairMailbox, 8 KB in ss.pair), which adds them to its own: each CTA stages and reduces
  // half of the block, half the int64 bytes into the L2. Measured against the unpaired kernel
  // (H100, WORKLOG "bwd_sm90", session 40): d = 128 1.06x, but d = 64 0.97x (causal 0.92-0.96x),
  // whose slower GEMMs put fewer dQ bytes per second into the L2: d = 64 stays unpaired.
  static constexpr bool kCtaPairs = cta_pairs(D, kFixedPointDq);
  static constexpr int kDqWarpgroupCols = kDqSplitsRows ? D : D / 2;
  static constexpr int kDqKeptCols = kCtaPairs ? kDqWarpgroupCols / 2 : kDqWarpgroupCols;
  static_assert(!kCtaPairs || (!kDqSplitsRows && kDqWarpgroupCols == 64),
                "pairs split a warpgroup's 64 dQ columns (as the paired exchange is written)");
  // A warpgroup's part of dQ: its slabs, and the rows of each (the reductions' box).
  static constexpr int kSlabsPerWarpgroup = kDqKeptCols / kDqSlabCols;
  static constexpr int kDqRows = kDqSplitsRows ? kBlockM / 2 : kBlockM;
  static constexpr bool kStageConsumedBarriers = false;  // (the d = 256 arrangement's)

  struct SharedStorage {
    alignas(1024) E k[kBlockN * D];
    alignas(1024) E v[kBlockN * D];
    alignas(1024) E q[kStages][kBlockM * D];
    alignas(1024) E dout[kStages][kBlockM * D];
    alignas(1024) E ds[2][kBlockN * kBlockM];  // double-buffered: ds_ready / ds_free below
    alignas(1024) DqElem dq[2 * kDqRows * kDqKeptCols];  // DqStaging slabs (warpgroup w's columns or rows,
                                                         // in CTA pairs the columns it keeps)
    alignas(16) float2 stats[kStages][kBlockM];  // (LSE * log2 e, D) of the stage's rows
    uint64_t kv_barrier;
    uint64_t ds_ready[2];  // both warpgroups' halves of dS^T are in ds[i] (256 arrivals)
    uint64_t ds_free[2];   // both warpgroups' dQ GEMMs have read ds[i] (256 arrivals)
    typename Pipeline::SharedStorage pipeline;
    std::conditional_t<kCtaPairs, DqPairStorage<512>, NoDqPairStorage> pair;  // 4 + 4 KB a warpgroup
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  using Params = BwdParams<E, kBlockM, kBlockN, D>;
};

template <class Mask>
constexpr bool kLocalMask = std::is_same_v<Mask, sm90::LocalMask>;
// The arrangement of a head dim (bwd_sm90_launch.h): the keys as M up to d = 128, split between
// the warpgroups at d = 256; the Q blocks and ring of the mode and mask.
template <typename T, int D, bool kDeterministic, class Mask>
using ConfigFor = std::conditional_t<
    (D > 128), SplitKeysConfig<T, kDeterministic>,
    BwdConfig<T, D, block_m(D, kDeterministic, kLocalMask<Mask>), stages(D, kDeterministic, kLocalMask<Mask>),
              kDeterministic>>;

// The rows of a thread's (rows, cols) accumulator fragment (times `factor`) to global memory in
// the gradients' dtype G (T, or fp32 unrounded), rows at or past row_limit dropped: dst points at
// row 0, column 0. A 2-byte G goes out in 16-byte pieces (sm90::store_fragment_rows_16B, as k7's
// O; every consumer thread calls this); fp32 in adjacent column pairs (store2).
template <typename G, class TA, class TC>
__device__ __forceinline__ void store_fragment_rows(G* dst, int64_t row_stride, const TA& acc_rc,
                                                    const TC& coord_rc, int row_limit, float factor) {
  using namespace cute;
  if constexpr (sizeof(G) == 2) {
    sm90::store_fragment_rows_16B<G>(dst, row_stride, acc_rc, coord_rc, row_limit, [&](int) { return factor; });
  } else {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(acc_rc); ++r) {
      const int row = get<0>(coord_rc(r, 0));
      if (row >= row_limit) continue;
      G* out = dst + row * row_stride;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(acc_rc); c += 2)
        store2<G>(out + get<1>(coord_rc(r, c)), acc_rc(r, c) * factor, acc_rc(r, c + 1) * factor);
    }
  }
}

// The dQ writer warp (warp 1 of the producer warpgroup): for every Q block of the walk and each
// consumer warpgroup w in turn, waits for w's staging of the block's dQ (kDqWrittenBarrier + w),
// adds it to the workspace by TMA reductions (lane 0: one per 32- or 16-column slab of w's part;
// rows past seqlen_q lie outside the tensor map and are skipped), waits for them to have read the
// staging and hands it back (kDqFreeBarrier + w; not after the last block, whose staging nobody
// waits for). Before, each warpgroup's leader issued its reductions itself, and the other three
// warps of the warpgroup waited for it at their next WGMMA (ncu at d = 128: ~16% of the consumer
// warps' samples around the staging). The reductions complete before the CTA ends (the post-pass
// reads the workspace).
template <class Config, bool kVarlen>
__device__ __forceinline__ void write_dq_blocks(const typename Config::Params& params,
                                                typename Config::SharedStorage& ss, const SequenceOffsets& at,
                                                const BackwardQBlocks<Config::kBlockM>& blocks, int b) {
  using NamedBarrier = cutlass::arch::NamedBarrier;
  constexpr int kBlockM = Config::kBlockM;
  const bool leader = threadIdx.x % 32 == 0;
  // In CTA pairs a warpgroup stages the kDqKeptCols columns it keeps of its part: rank 1's second half.
  const int rank = Config::kCtaPairs ? static_cast<int>(sm90::cluster_cta_rank()) : 0;
  auto blk = blocks.first();
#pragma unroll 1
  for (int it = 0; it < blocks.n_iters; ++it) {
    const WorkspaceRows dq_rows = workspace_rows(params.problem, b, blk.h, at.q, kVarlen);
    for (int warpgroup = 0; warpgroup < 2; ++warpgroup) {
      NamedBarrier::sync(kDqBarrierThreads, kDqWrittenBarrier + warpgroup);
      if (leader) {
        CUTE_UNROLL
        for (int s = 0; s < Config::kSlabsPerWarpgroup; ++s) {
          const int slab = Config::kDqSplitsRows ? s : warpgroup * Config::kSlabsPerWarpgroup + s;
          const int row0 = Config::kDqSplitsRows ? warpgroup * Config::kDqRows : 0;  // in the block
          const int col = Config::kDqSplitsRows
                              ? slab * Config::kDqSlabCols
                              : warpgroup * Config::kDqWarpgroupCols + rank * Config::kDqKeptCols + s * Config::kDqSlabCols;
          sm90::tensor_reduce_add(&params.dq_map,
                                  ss.dq + slab * kBlockM * Config::kDqSlabCols + row0 * Config::kDqSlabCols, col,
                                  static_cast<int>(dq_rows.dq_row0 + blk.q0 + row0), static_cast<int>(dq_rows.dq_plane));
          sm90::bulk_commit_group();
        }
        sm90::bulk_wait_read<0>();
      }
      __syncwarp();
      if (it + 1 < blocks.n_iters) NamedBarrier::arrive(kDqBarrierThreads, kDqFreeBarrier + warpgroup);
    }
    blk = blocks.next(blk);
  }
  if (leader) sm90::bulk_wait<0>();
}

// The consumer warpgroups of one CTA (run_backward_cta gives them its view of the problem).
template <typename T, int D, bool kDeterministic, bool kVarlen, class Mask, class Score, class Config>
__device__ __forceinline__ void keys_as_m_consumers(const typename Config::Params& params,
                                                    typename Config::SharedStorage& ss, const FwdProblem& p,
                                                    const SequenceOffsets& at,
                                                    const BackwardQBlocks<Config::kBlockM>& blocks, int kv_block,
                                                    int k0, int hk, int b) {
  using E = typename Config::E;
  using Pipeline = typename Config::Pipeline;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  using namespace cute;
  const BwdProblem& bp = params.problem;
  using QBlock = typename BackwardQBlocks<kBlockM>::Block;
  using NamedBarrier = cutlass::arch::NamedBarrier;
  const int mma_thread = threadIdx.x - 128;  // 0 .. 255
  const int warpgroup = mma_thread / 128;
  typename Config::MmaSdP mma_sdp;
  typename Config::MmadKV mma_dkv;
  typename Config::MmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_thread);
  auto thr_dkv = mma_dkv.get_thread_slice(mma_thread);
  auto thr_dq = mma_dq.get_thread_slice(mma_thread);

  Tensor tSrK = thr_sdp.partition_fragment_A(make_tensor(make_smem_ptr(ss.k), typename Config::KVLayout{}));
  Tensor tSrV = thr_sdp.partition_fragment_A(make_tensor(make_smem_ptr(ss.v), typename Config::KVLayout{}));
  Tensor tdQrK = thr_dq.partition_fragment_B(make_tensor(make_smem_ptr(ss.k), typename Config::KtLayout{}));
  Tensor tdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<D>>{});
  Tensor tdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<D>>{});
  clear(tdV);
  clear(tdK);
  // (key, query) coordinates of the S^T / dP^T fragments, and (query, d) of dQ's.
  Tensor c_rc = sm90::as_rowcol(thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{})));
  Tensor dq_coord_rc = sm90::as_rowcol(thr_dq.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<D>>{})));
  // This thread's first dQ row and column, and its staging row base (DqStage's XOR form), its
  // slab's offset included: dq_col0 = 2 (lane % 4) (+ warpgroup * D / 2 when the warpgroups split
  // the columns) lies in the first 8 columns of a slab, so a column dq_col0 + dcol has dcol's
  // 8-column group and slab step.
  const int dq_row0 = get<0>(dq_coord_rc(0, 0)), dq_col0 = get<1>(dq_coord_rc(0, 0));
  const uint32_t dq_stage = static_cast<uint32_t>(__cvta_generic_to_shared(ss.dq));
  using DqStaging = typename Config::DqStaging;
  // A thread's rows are dq_row0 + 8 i: all odd or all even. Odd rows store the partner group's
  // columns through the swapped base (DqStage::kOddRowGroupSwap: no bank conflicts).
  const bool odd_rows = dq_row0 % 2 == 1;
  const uint32_t dq_even_base = DqStaging::row_base(dq_row0, dq_col0 % 8) +
                                DqStaging::byte_offset(0, dq_col0 - dq_col0 % 8);
  const uint32_t dq_row_base = odd_rows ? DqStaging::swapped(dq_even_base) : dq_even_base;
  const float scale_log2 = Score::log2_factor(p);
  const Mask mask(p);
  const Score score(p);
  // The deterministic mode needs no turns here: fixed-point sums do not depend on the order.
  static_assert(Config::kFixedPointDq == kDeterministic, "the deterministic mode sums dQ in fixed point here");
  // dQ of Q block i (iteration i), one block late: both warpgroups' halves of dS^T are in buffer
  // i % 2 (ds_ready); dQ_i = dS K_j; the buffer is free once both have done so (ds_free); dQ_i is
  // staged (once the writer warp has handed the staging back from block i - 1) and the writer
  // warp told (write_dq_blocks). Its wait also completes the GEMMs issued before it.
  // dq_issue(i) issues the GEMM; dq_store(qb, i, tdQ), once a wait has completed it, hands the
  // buffer back and stores dQ_i into the staging; dq_publish() tells the writer warp, once the
  // stores are done (the proxy fence waits for them: issuing a GEMM before it keeps that wait off
  // the tensor cores' path); dq_block(qb, i) does all of it.
  using DqFragment = decltype(partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<D>>{}));
  auto dq_issue = [&](int i) {
    const int buf = i % 2;
    cutlass::arch::ClusterBarrier::wait(&ss.ds_ready[buf], (i / 2) % 2);
    Tensor tdQrdS = thr_dq.partition_fragment_A(make_tensor(make_smem_ptr(ss.ds[buf]), typename Config::DsViewLayout{}));
    DqFragment tdQ = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<D>>{});
    sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_dq, tdQrdS, tdQrK, tdQ);
    return tdQ;
  };
  auto dq_store = [&](QBlock qb, int i, DqFragment& tdQ) {
    sm90::fence_after_wait(tdQ);
    cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[i % 2]);

    Tensor dq_rc = sm90::as_rowcol(tdQ);
    // Fixed point: each row's power of two (the pre-pass's), read before the staging is free.
    float row_scale[size<0>(dq_rc)];
    if constexpr (Config::kFixedPointDq) {
      const float* scales = bp.dq_scale + workspace_rows(bp, b, qb.h, at.q, kVarlen).stats + qb.q0;
      CUTE_UNROLL
      for (int r = 0; r < size<0>(dq_rc); ++r) row_scale[r] = scales[get<0>(dq_coord_rc(r, 0))];
    }
    if (i > 0) NamedBarrier::sync(kDqBarrierThreads, kDqFreeBarrier + warpgroup);
    // Fragment columns (c, c + 1) are 8-column group c / 2; the partner group's are c ^ kSwapCols.
    constexpr int kSwapCols = 2 * DqStaging::kOddRowGroupSwap;
    static_assert(size<1>(dq_rc) % (2 * kSwapCols) == 0, "the partner group lies in the thread's fragment");
    CUTE_UNROLL
    for (int r = 0; r < size<0>(dq_rc); ++r)
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dq_rc); c += 2) {
        // (row, col) = dq_row0 + (constant), dq_col0 + (constant): one base, immediates per store.
        const int dcol = get<1>(dq_coord_rc(r, c)) - dq_col0;
        // The row's offset: 8 rows per r within a 64-row atom, 64 rows per atom (kBlockM = 128).
        const int drow = get<0>(dq_coord_rc(r, 0)) - dq_row0;
        const uint32_t addr = dq_stage + DqStaging::byte_offset(dq_row_base, dcol) + drow * 128;
        stage_dq_pair<Config::kFixedPointDq, kSwapCols>(addr, dq_rc, r, c, odd_rows, row_scale);
      }
  };
  auto dq_publish = [&] {
    sm90::fence_proxy_async_shared();  // the staging, before the bulk engine's reads
    NamedBarrier::arrive(kDqBarrierThreads, kDqWrittenBarrier + warpgroup);
  };
  // In CTA pairs (the deterministic mode at d = 128, int64; Config::kCtaPairs) the pair's two CTAs
  // walk the same Q blocks, and dq_exchange takes dq_store's and dq_publish's place: of dQ_i each
  // warpgroup keeps half of its 64 columns (the first 32 in rank 0) and mails the other half (16
  // of a thread's 32 values, sm90::PairMailbox) to the same thread of the partner's same
  // warpgroup, whose fragment holds the same (row, column) coordinates; it adds the partner's
  // values to its kept ones (one fp32 addition of two partial sums: the same bits in either order)
  // and stages the sums as int64 (the row's 2^e_i times dQ, rounded) in its 32 columns of the
  // staging for the writer warp. The partner's mail is read right after this CTA's is sent: read
  // after dP^T's issue instead (the partner's values then have longer to cross the SMs), the
  // kernel measured 0.4% faster and spilled 16 bytes, with the softcap or a window 144-152 (H100,
  // WORKLOG "bwd_sm90", session 40). The mailbox (ss.pair, 8 KB a warpgroup) holds nothing else,
  // so it is freed right after each read: once before the first message, then after every message
  // but the last (the partner waits for no release after it, and may have left).
  const int rank = Config::kCtaPairs ? static_cast<int>(sm90::cluster_cta_rank()) : 0;
  auto mailbox = [&] {
    if constexpr (Config::kCtaPairs) {
      float4* mail = ss.pair.dq_mail[warpgroup];
      return sm90::PairMailbox(mail, mail + 256, &ss.pair.dq_mail_full[warpgroup], &ss.pair.dq_mail_free[warpgroup],
                               mma_thread % 128);
    } else {
      return NoDqMailbox{};
    }
  }();
  // The thread's first kept column in the staging: the warpgroup's 32 columns from 32 * warpgroup,
  // its kept fragment column c at 8 (c / 2) + c % 2 from the thread's first.
  const uint32_t pair_even_base = DqStaging::row_base(dq_row0, dq_col0 % 8) +
                                  DqStaging::byte_offset(0, warpgroup * Config::kDqKeptCols);
  const uint32_t pair_row_base = odd_rows ? DqStaging::swapped(pair_even_base) : pair_even_base;
  auto dq_exchange = [&](QBlock qb, int i, DqFragment& tdQ) {
    sm90::fence_after_wait(tdQ);
    cutlass::arch::ClusterBarrier::arrive(&ss.ds_free[i % 2]);
    DqKept kept;
    if constexpr (Config::kCtaPairs) mail_and_keep_dq(sm90::as_rowcol(tdQ), rank, mailbox, kept);
    float row_scale[2];
    const float* scales = bp.dq_scale + workspace_rows(bp, b, qb.h, at.q, kVarlen).stats + qb.q0;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) row_scale[r] = scales[dq_row0 + 8 * r];
    receive_and_add_dq(mailbox, mma_thread % 128 == 0, /*release=*/i + 1 < blocks.n_iters, kept);
    if (i > 0) NamedBarrier::sync(kDqBarrierThreads, kDqFreeBarrier + warpgroup);
    constexpr int kSwapCols = 2 * DqStaging::kOddRowGroupSwap;
    static_assert(!Config::kCtaPairs || 8 % (2 * kSwapCols) == 0, "the partner group lies in the kept columns");
    auto kept_rc = [&](int r, int c) { return kept[r][c]; };
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r)
      CUTE_UNROLL
      for (int c = 0; c < 8; c += 2) {
        const uint32_t addr = dq_stage + DqStaging::byte_offset(pair_row_base, 8 * (c / 2)) + 8 * r * 128;
        stage_dq_pair<true, kSwapCols>(addr, kept_rc, r, c, odd_rows, row_scale);
      }
    dq_publish();
  };
  // dQ_i's staging from its fragment, alone or in a pair, the writer warp told.
  auto dq_stage_and_publish = [&](QBlock qb, int i, DqFragment& tdQ) {
    if constexpr (Config::kCtaPairs) {
      dq_exchange(qb, i, tdQ);
    } else {
      dq_store(qb, i, tdQ);
      dq_publish();
    }
  };
  auto dq_block = [&](QBlock qb, int i) {
    auto tdQ = dq_issue(i);
    warpgroup_wait<0>();
    dq_stage_and_publish(qb, i, tdQ);
  };

  if (blocks.n_iters > 0) sm90::OnceBarrier::wait(ss.kv_barrier);
  if (Config::kCtaPairs && blocks.n_iters > 0) mailbox.release();  // for the partner's first message
  typename Pipeline::State st = Pipeline::consumer_start();
  QBlock blk = blocks.first(), prev = blk;
  for (int it = 0; it < blocks.n_iters; ++it) {
    Pipeline::consumer_wait(ss.pipeline, st);
    Tensor tSrQ = thr_sdp.partition_fragment_B(make_tensor(make_smem_ptr(ss.q[st.index]), typename Config::QLayout{}));
    Tensor tSrdO = thr_sdp.partition_fragment_B(make_tensor(make_smem_ptr(ss.dout[st.index]), typename Config::QLayout{}));
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    // The previous block's dQ: the two warpgroups meet only through the dS^T buffers, a block
    // apart, so one's softmax can run during the other's GEMMs (in lockstep, both left the tensor
    // cores idle at once). S^T, dP^T and dQ in flight together with dK and dV do not fit 240
    // registers but at d = 64's 64-row blocks (ptxas serialized the WGMMAs, C7512, and spilled):
    // - d = 64, 64-row blocks: dQ's GEMM queues behind S^T's and dP^T's;
    // - d = 128: dQ's GEMM and S^T's run together, dQ is staged while S^T's runs, then dP^T's
    //   is issued (measured against dQ first: +0.8% over the sweep, +3.5% in the deterministic
    //   mode; WORKLOG, "bwd_sm90", session 35);
    // - d = 64, 128-row blocks: dQ first, then S^T and dP^T (beside S^T it measured 0.997x).
    constexpr bool kDqBehindSdP = D <= 64 && kBlockM == 64;
    constexpr bool kDqBesideS = D > 64;
    // At d = 64 with 128-row blocks (the default mode without a window), P is computed while
    // dP^T's GEMM runs: the wait before it leaves that GEMM (the last one issued) in flight, and
    // dP^T is waited for once dV's GEMM is issued (as FlashAttention-3 orders them). Measured on
    // the H100 (WORKLOG, "bwd_sm90", session 36): d = 64 1.025x, but d = 128 0.971x and the
    // deterministic mode 0.992x, which keep the wait for both. (The softcap's loop computes P and
    // dS together and needs both.)
    constexpr int kWaitBeforeP = !Score::kTransforms && D == 64 && kBlockM == 128 ? 1 : 0;
    // With dQ first (d = 64's 128-row blocks), its staging is published once S^T's and dP^T's GEMMs
    // are issued, so that the proxy fence's wait for the stores does not hold them back (H100 A/B,
    // WORKLOG "bwd_sm90", session 37: d = 64 1.010x; the same after dP^T's issue at d = 128
    // measured 0.988x, and with the softcap it spilled twice as much).
    constexpr bool kPublishAfterSdP = !kDqBehindSdP && !kDqBesideS && !Score::kTransforms;
    if (!kDqBesideS || it == 0) {
      static_assert(!Config::kCtaPairs || kDqBesideS, "CTA pairs: dq_exchange is called beside S^T's GEMM");
      if (!kDqBehindSdP && it > 0) {
        auto tdQ = dq_issue(it - 1);
        warpgroup_wait<0>();
        dq_store(prev, it - 1, tdQ);
        if (!kPublishAfterSdP) dq_publish();
      }
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrK, tSrQ, tSrS);
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrV, tSrdO, tSrdP);
      if (kPublishAfterSdP && it > 0) dq_publish();
      if (kDqBehindSdP && it > 0) {
        dq_block(prev, it - 1);
      } else {
        warpgroup_wait<kWaitBeforeP>();
      }
    } else {
      auto tdQ = dq_issue(it - 1);
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrK, tSrQ, tSrS);
      warpgroup_wait<1>();  // dQ's GEMM (S^T's may still run)
      dq_stage_and_publish(prev, it - 1, tdQ);
      sm90::warpgroup_gemm_issue</*kZeroInit=*/true>(mma_sdp, tSrV, tSrdO, tSrdP);
      warpgroup_wait<kWaitBeforeP>();
    }
    sm90::fence_after_wait(tSrS);
    if constexpr (kWaitBeforeP == 0) sm90::fence_after_wait(tSrdP);

    // P^T. A key is seen by a query iff it lies in the query's [key_begin, key_limit) (the Mask);
    // only KV blocks that cross the causal diagonal, a window's edge or the end of the keys pay
    // for the compares. Padded query rows have LSE2 = +inf: P = 0.
    // With the softcap, dS^T = P^T (dP^T - D) tanh'(.) is computed here too, from the tanh in hand
    // (kept for later, it would take another S^T-sized fragment of registers); without it, below,
    // while dV's GEMM runs.
    Tensor s_rc = sm90::as_rowcol(tSrS);
    Tensor dp_rc = sm90::as_rowcol(tSrdP);
    const float2* stats = ss.stats[st.index];
    const bool needs_mask = !mask.covers(blk.q0, blk.q0 + kBlockM - 1, k0, k0 + kBlockN);
    // A thread's columns come in pairs (c, c + 1) = queries (q, q + 1), q even: one load of their
    // statistics per pair.
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s_rc); c += 2) {
      const float4 pair = load_stat_pair(stats, get<1>(c_rc(0, c)));
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int q = get<1>(c_rc(0, c + h));
        const float2 stat = h == 0 ? make_float2(pair.x, pair.y) : make_float2(pair.z, pair.w);  // (LSE2, D)
        const VisibleKeys<Mask> keys(mask, needs_mask, blk.q0 + q, k0, kBlockN);
        CUTE_UNROLL
        for (int r = 0; r < size<0>(s_rc); ++r) {
          const bool seen = keys.sees(get<0>(c_rc(r, c + h)));
          if constexpr (Score::kTransforms) {
            transformed_p_and_ds(score, scale_log2, stat, seen, s_rc(r, c + h), dp_rc(r, c + h));
          } else {
            const float prob = exp2_approx(fmaf(s_rc(r, c + h), scale_log2, -stat.x));
            s_rc(r, c + h) = seen ? prob : 0.f;
          }
        }
      }
    }
    Tensor tdVrP = sm90::acc_to_a_operand<E>(tSrS);

    // dV += P^T dO runs on the tensor cores while dS^T is computed, then dK += dS^T Q.
    Tensor tdVrdO = thr_dkv.partition_fragment_B(make_tensor(make_smem_ptr(ss.dout[st.index]), typename Config::QtLayout{}));
    Tensor tdKrQ = thr_dkv.partition_fragment_B(make_tensor(make_smem_ptr(ss.q[st.index]), typename Config::QtLayout{}));
    sm90::warpgroup_gemm_issue</*kZeroInit=*/false, /*kRegisterA=*/true>(mma_dkv, tdVrP, tdVrdO, tdV);
    if constexpr (!Score::kTransforms) {
      if constexpr (kWaitBeforeP == 1) {
        warpgroup_wait<1>();  // dP^T's GEMM (dV's may still run)
        sm90::fence_after_wait(tSrdP);
      }
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dp_rc); c += 2) {
        const float4 pair = load_stat_pair(stats, get<1>(c_rc(0, c)));
        CUTE_UNROLL
        for (int r = 0; r < size<0>(dp_rc); ++r) {
          dp_rc(r, c) = s_rc(r, c) * (dp_rc(r, c) - pair.y);
          dp_rc(r, c + 1) = s_rc(r, c + 1) * (dp_rc(r, c + 1) - pair.w);
        }
      }
    }
    Tensor tdKrdS = sm90::acc_to_a_operand<E>(tSrdP);
    sm90::warpgroup_gemm_issue</*kZeroInit=*/false, /*kRegisterA=*/true>(mma_dkv, tdKrdS, tdKrQ, tdK);

    // dS^T (key x query) to shared memory for dQ, as K6 stages O (stmatrix into the 128-byte
    // swizzled tile), each warpgroup its 64 keys, once both warpgroups' dQ GEMMs of two blocks
    // ago have read the buffer.
    if (it >= 2) cutlass::arch::ClusterBarrier::wait(&ss.ds_free[it % 2], ((it - 2) / 2) % 2);
    // The warpgroup's keys are rows [64 w, 64 w + 64) of the (kBlockN x kBlockM) tile: they start
    // 64 rows into its first 64-column slab.
    const float ones[2] = {1.f, 1.f};
    sm90::stage_output<T, kBlockM, kBlockN>(ss.ds[it % 2] + warpgroup * 64 * 64, dp_rc, ones, mma_thread % 128);
    cutlass::arch::fence_view_async_shared();  // the stores, before the WGMMA's (async-proxy) reads
    cutlass::arch::ClusterBarrier::arrive(&ss.ds_ready[it % 2]);

    warpgroup_wait<0>();
    sm90::fence_after_wait(tdV, tdK, tdVrP, tdKrdS);
    Pipeline::consumer_release(ss.pipeline, st);  // Q_i and dO_i are read
    st.advance();
    prev = blk;
    blk = blocks.next(blk);
  }
  if (blocks.n_iters > 0) dq_block(prev, blocks.n_iters - 1);

  // dK = scale * sum dS^T Q and dV to global memory, rows past seqlen_k dropped (and zeroed up
  // to the sequence's rows when seqused_k leaves some unused).
  Tensor kv_coord_rc = sm90::as_rowcol(thr_dkv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<D>>{})));
  const int used = p.seqlen_k - k0;
  with_gradient_rows<T, kVarlen>(bp, b, hk, k0, [&](auto* dk_out, auto* dv_out, int k_rows) {
    using G = std::remove_pointer_t<decltype(dk_out)>;
    store_fragment_rows<G>(dk_out, bp.dk_row_stride, sm90::as_rowcol(tdK), kv_coord_rc, used, p.softmax_scale);
    store_fragment_rows<G>(dv_out, bp.dv_row_stride, sm90::as_rowcol(tdV), kv_coord_rc, used, 1.f);
    zero_unused_tail<D, kVarlen, kBlockN>(bp, dk_out, dv_out, k_rows, k0, used, mma_thread);
  });
}

// Mask and Score: the forward's policies (sm90/common/mask.cuh), AttentionMask or LocalMask and
// PlainScore or SoftcapScore. kVarlen: a variable-length batch (FwdProblem::varlen()), a kernel of
// its own so that the dense one keeps its code (as k6's).
template <typename T, int D, bool kDeterministic, bool kVarlen, class Mask, class Score>
__global__ void __launch_bounds__(kThreads, 1)
    bwd_sm90_kernel(const __grid_constant__ typename ConfigFor<T, D, kDeterministic, Mask>::Params params) {
  using Config = ConfigFor<T, D, kDeterministic, Mask>;
  run_backward_cta<Config, T, kVarlen>(
      params,
      [&](auto&... cta) { keys_as_m_consumers<T, D, kDeterministic, kVarlen, Mask, Score, Config>(params, cta...); },
      [&](auto& ss, const FwdProblem&, const SequenceOffsets& at, const BackwardQBlocks<Config::kBlockM>& blocks,
          int /*kv_block*/, int /*k0*/, int /*hk*/, int b) { write_dq_blocks<Config, kVarlen>(params, ss, at, blocks, b); });
}
}  // namespace hfa::bwd_sm90
