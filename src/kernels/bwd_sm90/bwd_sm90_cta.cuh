// What bwd_sm90's two arrangements share (bwd_sm90_kernel.cuh: the keys as WGMMA's M, d = 64 and
// 128; bwd_sm90_split_keys.cuh: the keys split between the warpgroups, d = 256): the CTA's view of
// its problem (a variable-length batch's sequence), its barriers, the producer that streams Q, dO
// and the row statistics, the CTA's course up to its consumers (run_backward_cta), and the tail of
// dK and dV. (The mask and softcap of P and dS, VisibleKeys and transformed_p_and_ds, are shared
// with fa2: kernels/common/attention_mask.cuh.)
//
// A Config provides E, kBlockM, kBlockN, kHeadDim, kStages, kStageConsumedBarriers, kCtaPairs,
// QLayout, KVLayout, Pipeline, Params (BwdParams below) and a SharedStorage with k, v, q[], dout[],
// stats[], kv_barrier, ds_ready[2], ds_free[2], pipeline (and stage_consumed[] with
// kStageConsumedBarriers; with kCtaPairs `pair`, a DqPairStorage).
//
// kCtaPairs: the CTAs run as clusters of two on adjacent KV blocks (j even, j + 1), ranks 0 and 1
// of the cluster, and both walk the Q blocks of the pair's 2 * kBlockN keys (the union of what
// each would visit: a block one of them does not see is masked whole, P = 0), so that they can sum
// their dQ blocks on chip (the deterministic mode at d = 128 and 256: bwd_sm90_launch.h,
// cta_pairs). The grid's KV-block axis is even: a pair's second CTA past the keys (an odd block
// count) walks with its partner, every key masked, and writes nothing; a pair wholly past a
// sequence's keys leaves.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "common/problem.h"
#include "kernels/common/attention_mask.cuh"
#include "kernels/common/backward_passes.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/sm90/common/bulk_reduce.cuh"
#include "kernels/sm90/common/cta_pair.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::bwd_sm90 {

// A producer warpgroup (one thread issues every load) and two consumer warpgroups; setmaxnreg
// moves registers within the launch's 384 x 168 = 64512: 128 x 24 + 256 x 240.
constexpr int kThreads = 384;
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= kThreads * 168,
              "setmaxnreg cannot hand out more registers than the CTA was launched with");

// A CTA pair's dQ mail (kCtaPairs): each warpgroup's sm90::PairMailbox with its barriers, kFloat4s
// 16-byte slots of it here (the rest, if any, elsewhere in the Config's SharedStorage). Last in a
// SharedStorage, so that the unpaired kernel's layout is the same without it.
template <int kFloat4s>
struct DqPairStorage {
  alignas(16) float4 dq_mail[2][kFloat4s];
  uint64_t dq_mail_full[2];
  uint64_t dq_mail_free[2];
};
struct NoDqPairStorage {};
// The mailbox of an unpaired kernel (never called: the dQ path of CTA pairs is not taken alone).
struct NoDqMailbox {
  __device__ void send(const float4 (&)[4]) {}
  __device__ void receive(float4 (&)[4], bool) {}
  __device__ void release() const {}
};

// The main kernel's parameters, in both arrangements: the problem, the TMA descriptors of Q and
// dO (BlockM-row tiles) and of K and V (BlockN-row tiles), and the dQ workspace as (D,
// dq_plane_rows, dq_planes) in (32, the Config's kDqRows) boxes, for the reductions.
template <class E, int BlockM, int BlockN, int D>
struct BwdParams {
  BwdProblem problem;
  sm90::TileTma<E, BlockM, D> tma_q, tma_do;
  sm90::TileTma<E, BlockN, D> tma_k, tma_v;
  CUtensorMap dq_map;
};

// The CTA's work: KV block kv_block (keys k0 ...) of KV head hk of batch entry or sequence b
// (blockIdx.y, .z), the block index blockIdx.x plus kv_block_offset (BwdProblem::
// dq_in_launch_order: a launch per KV block index). With across_heads
// (BwdProblem::kv_blocks_across_heads) the grid is (KV heads, KV blocks, batch): the CTAs are
// launched a batch entry's KV block 0 of every KV head first, then block 1, ... The coordinates
// stay block indices (uniform registers read from the grid), which a remapped linear index was
// not: computed in ordinary registers, it cost d = 256's kernel 2-7% (H100; WORKLOG, "bwd_sm90",
// session 32). With kVarlen, sequence b's lengths (sequence_span) in `sequence`, whose first
// packed rows `at` the TMA coordinates and the stores add, while the descriptors span the packed
// tensors; problem(): the problem as the CTA sees it.
template <bool kVarlen>
struct CtaSequence {
  int kv_block, k0, hk, b;
  FwdProblem sequence;
  SequenceOffsets at;
  __device__ CtaSequence(const FwdProblem& whole, bool across_heads, int kv_block_offset, int block_n)
      : kv_block((across_heads ? blockIdx.y : blockIdx.x) + kv_block_offset),
        k0(kv_block * block_n), hk(across_heads ? blockIdx.x : blockIdx.y), b(blockIdx.z) {
    if constexpr (kVarlen) {
      const SequenceSpan span = sequence_span(whole, b);
      sequence = whole;
      sequence.seqlen_q = span.seqlen_q;
      sequence.seqlen_k = span.seqlen_k;
      at = SequenceOffsets{span.q_begin, span.k_begin};
    }
  }
};

// Calls f(dk, dv, k_rows) with row k0 of batch entry (or sequence) b's dK and dV of KV head hk,
// typed as the gradients are (T, or fp32: BwdProblem::grads_fp32), and the rows of them the
// sequence spans (zeroed past seqlen_k). The first key row and the extent are read again here
// rather than kept in registers across the walk (they spilled).
template <typename T, bool kVarlen, class F>
__device__ __forceinline__ void with_gradient_rows(const BwdProblem& bp, int b, int hk, int k0, F f) {
  int k_begin = 0, k_rows = bp.fwd.seqlen_k;
  if constexpr (kVarlen) {
    const SequenceSpan span = sequence_span(bp.fwd, b);
    k_begin = span.k_begin;
    k_rows = span.k_rows;
  }
  const int64_t dk_at = b * bp.dk_batch_stride + hk * bp.dk_head_stride + (int64_t(k_begin) + k0) * bp.dk_row_stride;
  const int64_t dv_at = b * bp.dv_batch_stride + hk * bp.dv_head_stride + (int64_t(k_begin) + k0) * bp.dv_row_stride;
  if (bp.grads_fp32)
    f(static_cast<float*>(bp.dk) + dk_at, static_cast<float*>(bp.dv) + dv_at, k_rows);
  else
    f(static_cast<T*>(bp.dk) + dk_at, static_cast<T*>(bp.dv) + dv_at, k_rows);
}

// A variable-length batch's grid is sized by max_seqlen_k: a CTA whose walk (walk_k0: its block's
// first key, or its pair's) starts past its sequence's keys zeroes the rows of dK and dV its block
// spans but does not use (past seqused_k) and reports true (the CTA leaves).
template <typename T, int D, int BlockN, bool kVarlen>
__device__ __forceinline__ bool past_the_keys(const BwdProblem& bp, const FwdProblem& p, int b, int hk, int k0,
                                              int walk_k0) {
  if constexpr (kVarlen) {
    if (walk_k0 >= p.seqlen_k) {
      with_gradient_rows<T, kVarlen>(bp, b, hk, k0, [&](auto* dk_out, auto* dv_out, int k_rows) {
        using G = std::remove_pointer_t<decltype(dk_out)>;
        const int unused = min(k_rows - k0, BlockN);
        zero_rows<G, D>(dk_out, bp.dk_row_stride, unused, threadIdx.x, kThreads);
        zero_rows<G, D>(dv_out, bp.dv_row_stride, unused, threadIdx.x, kThreads);
      });
      return true;
    }
  }
  return false;
}

// The barriers, by thread 0, before the CTA's __syncthreads: the Q / dO ring, K and V's, and the
// two dS buffers' hand-over (ds_ready: both warpgroups' halves are in; ds_free: both warpgroups'
// dQ GEMMs have read it; 256 arrivals each).
template <class Config, class Storage>
__device__ __forceinline__ void init_barriers(Storage& ss) {
  Config::Pipeline::init(ss.pipeline, /*consumer_arrivals=*/256);
  sm90::OnceBarrier::init(ss.kv_barrier);
  for (int i = 0; i < 2; ++i) {
    cutlass::arch::ClusterBarrier::init(&ss.ds_ready[i], 256);
    cutlass::arch::ClusterBarrier::init(&ss.ds_free[i], 256);
  }
  if constexpr (Config::kStageConsumedBarriers)  // d = 256: its dQ staging in consumed stages
    for (int i = 0; i < Config::kStages; ++i) cutlass::arch::ClusterBarrier::init(&ss.stage_consumed[i], 256);
  if constexpr (Config::kCtaPairs)
    for (int w = 0; w < 2; ++w) sm90::PairMailbox::init(&ss.pair.dq_mail_full[w], &ss.pair.dq_mail_free[w]);
  cutlass::arch::fence_barrier_init();
}

// The producer thread: K_j and V_j once, then Q_i, dO_i and the (LSE * log2 e, D) pairs of every
// Q block the KV block sees, through the ring. `whole`: the descriptors' view (bp.fwd); p, at,
// tma_b: the CTA's (CtaSequence).
template <class Config, bool kVarlen, class Storage>
__device__ __forceinline__ void produce_q_blocks(const typename Config::Params& params, Storage& ss,
                                                 const FwdProblem& p, const SequenceOffsets& at,
                                                 const BackwardQBlocks<Config::kBlockM>& blocks,
                                                 int kv_block, int hk, int b) {
  using namespace cute;
  using E = typename Config::E;
  using Pipeline = typename Config::Pipeline;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, D = Config::kHeadDim;
  const BwdProblem& bp = params.problem;
  const FwdProblem& whole = bp.fwd;
  const int tma_b = kVarlen ? 0 : b;
  sm90::OnceBarrier::arm(ss.kv_barrier, 2 * kBlockN * D * sizeof(E));
  sm90::load_tile<kBlockN, D>(params.tma_k, ss.kv_barrier, make_tensor(make_smem_ptr(ss.k), typename Config::KVLayout{}),
                              whole.k_rows(), p.heads_kv, whole.tma_batch(), hk, tma_b, kv_block, at.k);
  sm90::load_tile<kBlockN, D>(params.tma_v, ss.kv_barrier, make_tensor(make_smem_ptr(ss.v), typename Config::KVLayout{}),
                              whole.k_rows(), p.heads_kv, whole.tma_batch(), hk, tma_b, kv_block, at.k);
  typename Pipeline::State st = Pipeline::producer_start();
  auto blk = blocks.first();
#pragma unroll 1  // (unrolled, the loop spilled the 24 registers)
  for (int it = 0; it < blocks.n_iters; ++it) {
    constexpr uint32_t kStatBytes = kBlockM * sizeof(float2);
    Pipeline::producer_acquire(ss.pipeline, st, 2 * kBlockM * D * sizeof(E) + kStatBytes);
    uint64_t& bar = Pipeline::full_barrier(ss.pipeline, st);
    const int m_block = blk.q0 / kBlockM;
    sm90::load_tile<kBlockM, D>(params.tma_q, bar, make_tensor(make_smem_ptr(ss.q[st.index]), typename Config::QLayout{}),
                                whole.q_rows(), p.heads_q, whole.tma_batch(), blk.h, tma_b, m_block, at.q);
    sm90::load_tile<kBlockM, D>(params.tma_do, bar, make_tensor(make_smem_ptr(ss.dout[st.index]), typename Config::QLayout{}),
                                whole.q_rows(), p.heads_q, whole.tma_batch(), blk.h, tma_b, m_block, at.q);
    // The block's (LSE, D) pairs lie in range by the padding (backward_workspace.h).
    const float2* stats = reinterpret_cast<const float2*>(bp.row_stats) +
                          workspace_rows(bp, b, blk.h, at.q, kVarlen).stats + blk.q0;
    SM90_BULK_COPY_G2S::copy(stats, &bar, ss.stats[st.index], kStatBytes);
    st.advance();
    blk = blocks.next(blk);
  }
}

// No role for the producer warpgroup's second warp (run_backward_cta's default).
struct NoWarpRole {
  template <class... Args>
  __device__ void operator()(Args&...) const {}
};

// The CTA's roles: thread 0 initializes the barriers; after the CTA's barrier the producer
// warpgroup gives up registers, its thread 0 streams the Q blocks and its second warp (warp 1)
// runs second_warp(); the consumer warpgroups take the registers. Returns true for the producer
// warpgroup (done: the caller returns).
// (With kCtaPairs the barriers are initialized earlier: run_backward_cta.)
template <class Config, bool kVarlen, class Storage, class SecondWarp>
__device__ __forceinline__ bool run_producer(const typename Config::Params& params, Storage& ss,
                                            const FwdProblem& p, const SequenceOffsets& at,
                                            const BackwardQBlocks<Config::kBlockM>& blocks,
                                            int kv_block, int hk, int b, SecondWarp second_warp) {
  if constexpr (!Config::kCtaPairs) {
    if (threadIdx.x == 0) init_barriers<Config>(ss);
    __syncthreads();
  }
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == 0 && blocks.n_iters > 0) {
      produce_q_blocks<Config, kVarlen>(params, ss, p, at, blocks, kv_block, hk, b);
    } else if (threadIdx.x / 32 == 1) {
      second_warp();
    }
    return true;
  }
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
  return false;
}

// A CTA of either arrangement: its view of the problem (CtaSequence; p, the problem as the CTA sees
// it, of which only the lengths and the first query row live through the walk), the exit of a
// block past its sequence's keys, the Q blocks it visits, the barriers and the producer warpgroup;
// then consumers(ss, p, at, blocks, kv_block, k0, hk, b) on the two consumer warpgroups and
// second_warp(the same) on the producer warpgroup's warp 1.
template <class Config, typename T, bool kVarlen, class Consumers, class SecondWarp = NoWarpRole>
__device__ __forceinline__ void run_backward_cta(const typename Config::Params& params, Consumers consumers,
                                                 SecondWarp second_warp = {}) {
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, D = Config::kHeadDim;
  auto& ss = sm90::aligned_shared_storage<typename Config::SharedStorage>();
  const BwdProblem& bp = params.problem;
  const CtaSequence<kVarlen> cta(bp.fwd, bp.kv_blocks_across_heads, bp.kv_block_offset, kBlockN);
  const FwdProblem& p = kVarlen ? cta.sequence : bp.fwd;
  int walk_k0 = cta.k0, walk_keys = kBlockN;  // the keys whose Q blocks the CTA visits
  if constexpr (Config::kCtaPairs) {
    // Both CTAs of the pair have their barriers before either may signal the other's.
    if (threadIdx.x == 0) init_barriers<Config>(ss);
    sm90::cluster_sync_all();
    walk_k0 = cta.k0 - static_cast<int>(sm90::cluster_cta_rank()) * kBlockN;
    walk_keys = 2 * kBlockN;
  }
  if (past_the_keys<T, D, kBlockN, kVarlen>(bp, p, cta.b, cta.hk, cta.k0, walk_k0)) return;
  const BackwardQBlocks<kBlockM> blocks(p, cta.hk, walk_k0, walk_keys);
  if (run_producer<Config, kVarlen>(params, ss, p, cta.at, blocks, cta.kv_block, cta.hk, cta.b, [&] {
        second_warp(ss, p, cta.at, blocks, cta.kv_block, cta.k0, cta.hk, cta.b);
      }))
    return;
  consumers(ss, p, cta.at, blocks, cta.kv_block, cta.k0, cta.hk, cta.b);
}

// The (LSE2, D) statistics of queries q and q + 1 (q even) of a ring stage's block, as (LSE2_q,
// D_q, LSE2_q+1, D_q+1): one 16-byte shared-memory load. (Written when aligned_shared_storage still
// hid the address space, so that plain reads of ss.stats were 4-byte generic loads; kept for the
// one 16-byte load per column pair. Volatile: it stays after the stage's barrier wait.)
__device__ __forceinline__ float4 load_stat_pair(const float2* stats, int q) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(stats + q));
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

// One store of a dQ fragment's staging, in both arrangements: fragment columns (c, c + 1) of row r
// (an 8-column group's pair), or for a thread of odd rows the partner group's pair, kSwapCols
// columns over (DqStage::kOddRowGroupSwap: no bank conflicts), to the staging at addr: as fp32,
// or with kFixedPoint (the deterministic mode's int64) times the row's power of two, row_scale[r],
// rounded.
template <bool kFixedPoint, int kSwapCols, class RowCol>
__device__ __forceinline__ void stage_dq_pair(uint32_t addr, const RowCol& dq_rc, int r, int c, bool odd_rows,
                                              const float* row_scale) {
  const float lo = odd_rows ? dq_rc(r, c ^ kSwapCols) : dq_rc(r, c);
  const float hi = odd_rows ? dq_rc(r, (c ^ kSwapCols) + 1) : dq_rc(r, c + 1);
  if constexpr (kFixedPoint) {
    const long long lo_fixed = __float2ll_rn(lo * row_scale[r]);
    const long long hi_fixed = __float2ll_rn(hi * row_scale[r]);
    asm volatile("st.shared.v2.b64 [%0], {%1, %2};\n" ::"r"(addr), "l"(lo_fixed), "l"(hi_fixed) : "memory");
  } else {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(lo), "f"(hi) : "memory");
  }
}

// A CTA pair's exchange of 64 dQ columns (a d = 128 warpgroup's, a d = 256 slice; both
// arrangements' fragments are 64 x 64 over a warpgroup: a thread holds two rows of 8 column pairs,
// dq_rc (2, 16)): fragment columns c and c + 8 of a row are 32 columns apart (8-column groups c / 2
// and c / 2 + 4), the first half rank 0's to keep, the second rank 1's. The partner's half goes
// to the mailbox (16 values: the same thread of the partner's warpgroup holds the same
// coordinates), this CTA's into `kept`.
using DqKept = float[2][8];
template <class RowCol, class Mailbox>
__device__ __forceinline__ void mail_and_keep_dq(const RowCol& dq_rc, int rank, Mailbox& mailbox, DqKept& kept) {
  static_assert(cute::size<0>(RowCol{}) == 2 && cute::size<1>(RowCol{}) == 16,
                "a thread holds two rows of 8 column pairs of 64 dQ columns");
  float4 mail[4];
  CUTE_UNROLL
  for (int k = 0; k < 4; ++k) {
    const int r = k / 2, c = 4 * (k % 2);
    auto sent = [&](int j) { return rank == 0 ? dq_rc(r, c + j + 8) : dq_rc(r, c + j); };
    mail[k] = make_float4(sent(0), sent(1), sent(2), sent(3));
  }
  mailbox.send(mail);
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r)
    CUTE_UNROLL
    for (int c = 0; c < 8; ++c) kept[r][c] = rank == 0 ? dq_rc(r, c) : dq_rc(r, c + 8);
}
// The partner's half added to `kept` (one fp32 addition of two partial sums: the same bits in
// either order); the mailbox released after the read when `release` (PairMailbox: not after the
// last message). leader: the warpgroup's thread 0.
template <class Mailbox>
__device__ __forceinline__ void receive_and_add_dq(Mailbox& mailbox, bool leader, bool release, DqKept& kept) {
  float4 mail[4];
  mailbox.receive(mail, leader);
  if (release) mailbox.release();
  CUTE_UNROLL
  for (int k = 0; k < 4; ++k) {
    float* row = kept[k / 2] + 4 * (k % 2);
    row[0] += mail[k].x, row[1] += mail[k].y, row[2] += mail[k].z, row[3] += mail[k].w;
  }
}

// After the walk: rows of dK and dV the sequence spans but does not use (past seqused_k, when
// the block holds its last used key) are zeroed; `used`: the block's used keys, p.seqlen_k - k0.
template <int D, bool kVarlen, int BlockN, class G>
__device__ __forceinline__ void zero_unused_tail(const BwdProblem& bp, G* dk_out, G* dv_out, int k_rows, int k0,
                                                 int used, int thread) {
  if (kVarlen && used < BlockN && k_rows - k0 > used) {
    const int unused = min(k_rows - k0, BlockN) - used;
    zero_rows<G, D>(dk_out + used * bp.dk_row_stride, bp.dk_row_stride, unused, thread, 256);
    zero_rows<G, D>(dv_out + used * bp.dv_row_stride, bp.dv_row_stride, unused, thread, 256);
  }
}

}  // namespace hfa::bwd_sm90
