// FA2 backward (FlashAttention-2, Algorithm 2) on mma.sync tensor cores, for sm80 and newer.
// Three launches (the first and last shared with bwd_sm90: kernels/common/backward_passes.cuh):
//   1. row_stats: D_i = rowsum(dO_i * O_i) and LSE_i in base 2; zeroes the fp32 dQ accumulator.
//   2. main:     one CTA per (KV block j, KV head, batch). K_j and V_j stay in shared memory and
//                dK_j, dV_j in registers while the CTA walks over every Q block i of every query
//                head that reads this KV head (GQA/MQA: the sum over the group happens on chip,
//                with no atomics for dK/dV). Per Q block:
//                  S = Q_i K_j^T, dP = dO_i V_j^T           (registers)
//                  P = exp(S - LSE_i) (recomputed), dS = P * (dP - D_i)
//                  dV_j += P^T dO_i, dK_j += dS^T Q_i       (P, dS through shared memory)
//                  dQ_i += dS K_j                           (added into the fp32 workspace:
//                      on sm90 staged in shared memory and added by TMA tensor reductions, one
//                      per 32-column slab, issued when block i + 1 starts; else by fp32 atomics
//                      from registers)
//                Causal: Q blocks wholly before the KV block are skipped; a sliding window
//                (LocalMask) also skips those wholly after it (BackwardQBlocks). Softcap
//                (SoftcapScore): P from the tanh of the score, and dS carries tanh'.
//                Deterministic (bp.deterministic, a kernel of its own): the dQ additions into each
//                Q block i (and 32-column slab, when staged) happen in a fixed order, the KV blocks
//                that add to it from the last, last(i), down to 0: KV block j waits for the turn
//                counter to read last(i) - j, adds, and passes the turn on once its addition has
//                completed (awaited at its next addition, so the wait overlaps a block's work).
//                (The blocks adding to Q block i are exactly 0 .. last(i): the causal skip only
//                drops a prefix of Q blocks, longer for later KV blocks.) Descending,
//                because causal KV block j + 1 starts one Q block later than j and so reaches each
//                Q block one step earlier: no one waits while all run at one pace (ascending, the
//                causal backward ran at half speed). KV block j is CTA gridDim.x - 1 - j, so that
//                the block waited for has the lower CTA index, is launched no later, and no wait
//                can deadlock.
//   3. convert:  dQ = scale * dQ_accum in the output dtype and strides.
// Q_{i+1} and dO_{i+1} load (cp.async) while block i computes, where shared memory allows.
// Variable-length batches (kVarlen, a kernel of its own so that the dense one keeps its code):
// the grid's third axis is the sequences; a CTA works on its sequence as a dense problem
// (sequence_span), with its pointers and workspace rows (backward_workspace.h) moved to the
// sequence's first rows, and a CTA past the sequence's keys zeroes the gradients of the rows it
// spans but does not use (past seqused_k) and returns.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "common/problem.h"
#include "kernels/common/backward_passes.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/turns.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/fa2/fa2_forward.cuh"
#include "kernels/sm90/common/bulk_reduce.cuh"
#include "kernels/sm90/common/tensor_map.h"

namespace hfa::fa2 {

// ---- 2. The main kernel --------------------------------------------------------------------------


// dq_map: the dQ workspace as (D, dq_plane_rows, dq_planes) fp32 with (32, kBlockM) boxes, for
// the staged path (unused by the atomics).
// kDeterministic (bp.deterministic): a kernel of its own, so that the default one's code is what
// it was (the turn logic in the same kernel made ptxas spill a loop bound at d = 128).
// kVarlen: bp.fwd.varlen() (the header). Mask and Score: the score variants' policies
// (kernels/common/attention_mask.cuh), as in the forward.
template <typename T, class Shape, bool kDeterministic, bool kVarlen, class Mask, class Score>
__global__ void __launch_bounds__(Shape::kThreads)
    fa2_backward_kernel(BwdProblem bp, const __grid_constant__ CUtensorMap dq_map) {
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
  // The staged dQ block first, at the first 1024-byte boundary (kDqStageBytes has the slack).
  char* const smem = reinterpret_cast<char*>(smem_raw);
  float* sdQ = reinterpret_cast<float*>(
      smem + ((0u - static_cast<unsigned>(__cvta_generic_to_shared(smem))) & 1023u));
  T* sK = reinterpret_cast<T*>(smem + Shape::kDqStageBytes);
  T* sV = sK + TileKV::kElems;
  T* sQ = sV + TileKV::kElems;       // kStages buffers
  T* sdO = sQ + kStages * TileQ::kElems;  // kStages buffers
  T* sP = sdO + kStages * TileQ::kElems;
  T* sdS = sP + TileP::kElems;
  float2* sStats = reinterpret_cast<float2*>(sdS + TileP::kElems);  // kStages x kBlockM (LSE, D)
  // dQ through shared memory and the bulk copy engine (fa2_shapes.h), else fp32 atomics; the k
  // loops of S, dP and dQ unroll only without the atomics (which hold registers: spills).
  constexpr bool kDqStaged = Shape::kDqStaged && sm90::kHasBulkReduce;
  constexpr bool kUnrollK = kDqStaged;
  constexpr int kDqSlabCols = Shape::kDqSlabCols, kDqSlabs = D / kDqSlabCols;
  static_assert(kDqSlabCols == DqStage<kBlockM>::kSlabCols, "one staged slab per reduction");
  static_assert(kDqSlabs <= Shape::kWarps, "one slab's reduction per warp");
  auto dq_stage_offset = [](int row, int col) { return DqStage<kBlockM>::offset(row, col); };

  const int kv_block = kDeterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int k0 = kv_block * kBlockN, hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // p: the problem as the CTA sees it, with kVarlen sequence b's lengths; its rows start at
  // q_begin / k_begin of the packed tensors, and it spans k_rows rows of k and v (of which it uses
  // the first seqlen_k).
  FwdProblem sequence;
  int q_begin = 0, k_begin = 0, k_rows = bp.fwd.seqlen_k;
  if constexpr (kVarlen) {
    const SequenceSpan span = sequence_span(bp.fwd, b);
    sequence = bp.fwd;
    sequence.seqlen_q = span.seqlen_q;
    sequence.seqlen_k = span.seqlen_k;
    q_begin = span.q_begin;
    k_begin = span.k_begin;
    k_rows = span.k_rows;
  }
  const FwdProblem& p = kVarlen ? sequence : bp.fwd;
  // Calls f(dk, dv) with row 0 of this CTA's dK and dV, typed as the gradients are (T, or fp32:
  // BwdProblem::grads_fp32).
  auto with_gradient_rows = [&](auto f) {
    const int64_t row0 = int64_t(k_begin) + k0;
    const int64_t dk_at = b * bp.dk_batch_stride + hk * bp.dk_head_stride + row0 * bp.dk_row_stride;
    const int64_t dv_at = b * bp.dv_batch_stride + hk * bp.dv_head_stride + row0 * bp.dv_row_stride;
    if (bp.grads_fp32)
      f(static_cast<float*>(bp.dk) + dk_at, static_cast<float*>(bp.dv) + dv_at);
    else
      f(static_cast<T*>(bp.dk) + dk_at, static_cast<T*>(bp.dv) + dv_at);
  };
  // Rows [first, last) of the block's dK and dV (relative to k0) set to 0: keys the sequence spans
  // but does not use (seqused_k), which no score reaches.
  auto zero_unused_rows = [&](int first, int last) {
    if (first >= last) return;
    with_gradient_rows([&](auto* dk_out, auto* dv_out) {
      using G = std::remove_pointer_t<decltype(dk_out)>;
      zero_rows<G, D>(dk_out + first * bp.dk_row_stride, bp.dk_row_stride, last - first, threadIdx.x, kThreads);
      zero_rows<G, D>(dv_out + first * bp.dv_row_stride, bp.dv_row_stride, last - first, threadIdx.x, kThreads);
    });
  };
  if constexpr (kVarlen) {
    if (k0 >= p.seqlen_k) {  // the grid is sized by max_seqlen_k
      zero_unused_rows(0, min(k_rows - k0, kBlockN));
      return;
    }
  }
  // This warp's rows and first columns (fa2_shapes.h): of S, dP, dQ, and of dK, dV.
  const int row_w = 16 * kMT * (warp % Shape::kSRowWarps);
  const int s_col_w = (warp / Shape::kSRowWarps) * 8 * kSTiles;
  const int dq_col_w = (warp / Shape::kSRowWarps) * 8 * kDqTiles;
  const int kv_row_w = 16 * kMT * (warp % Shape::kKVRowWarps);
  const int kv_col_w = (warp / Shape::kKVRowWarps) * 8 * kKVTiles;

  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride + int64_t(k_begin) * p.k_row_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride + int64_t(k_begin) * p.v_row_stride;
  const BackwardQBlocks<kBlockM> blocks(p, hk, k0, kBlockN);
  const int n_iters = blocks.n_iters;  // (query head of the group, Q block) pairs
  using QBlock = typename BackwardQBlocks<kBlockM>::Block;
  auto next_block = [&](QBlock blk) { return blocks.next(blk); };
  // Deterministic mode: this CTA's turn on Q block blk's dQ additions, and their counters.
  using Turns = DqTurns<kBlockM, kBlockN>;
  const int n_kv_blocks = kVarlen ? ceil_div(p.seqlen_k, kBlockN) : gridDim.x;  // the sequence's
  auto my_turn = [&](QBlock blk) { return Turns::turn(p, blk, kv_block, n_kv_blocks); };
  auto dq_turn = [&](QBlock blk, int slot) { return Turns::counter(bp, b, blk, slot); };
  // Staged dQ: warp w < kDqSlabs adds slab w of sdQ (block blk's dQ, columns 32w .. 32w + 31) to
  // the workspace with one TMA reduction (rows past seqlen_q lie outside the tensor map: skipped),
  // and later waits for its reads before the barrier after which sdQ is written again.
  // Deterministic: each slab's reduction waits for its turn; its completion is awaited, and its
  // turn passed on (pass_pending_turn), right after the issue when not causal, and at the slab's
  // next reduction, a block later, when causal. Causal KV blocks arrive at each Q block one step
  // apart (the header), so the deferred pass costs the next one no wait and the round trip no
  // longer stalls the slab's warp (causal 0.77 -> 0.86x of the default mode at d = 256); without
  // the mask all KV blocks arrive together, and a deferred pass delays each by a block more than
  // the one before it (non-causal d = 64 0.88 -> 0.76x).
  int* pending_turn = nullptr;  // lanes 0 of the slab warps: the turn of their last reduction
  auto pass_pending_turn = [&] {
    if (kDeterministic && pending_turn) {
      sm90::bulk_wait<0>();              // the reduction has completed (written, not just read)
      sm90::fence_proxy_async_global();  // and comes before the turn is passed
      pass_turn(pending_turn);
      pending_turn = nullptr;
    }
  };
  auto reduce_dq = [&](QBlock blk) {
    if (warp < kDqSlabs && lane == 0) {
      if constexpr (kDeterministic) {
        pass_pending_turn();
        pending_turn = dq_turn(blk, warp);
        wait_for_turn(pending_turn, my_turn(blk));
        sm90::fence_proxy_async_global();  // the earlier blocks' sums, before this one's reads
      }
      const WorkspaceRows ws = workspace_rows(bp, b, blk.h, q_begin, kVarlen);
      sm90::tensor_reduce_add(&dq_map, sdQ + warp * kBlockM * kDqSlabCols, warp * kDqSlabCols,
                              static_cast<int>(ws.dq_row0) + blk.q0, static_cast<int>(ws.dq_plane));
      sm90::bulk_commit_group();
      if (!p.causal) pass_pending_turn();
    }
  };
  auto load_q_do = [&](QBlock blk, int stage) {
    const int h = blk.h, q0 = blk.q0;
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride +
                 int64_t(q_begin) * p.q_row_stride;
    const T* dout = static_cast<const T*>(bp.dout) + b * bp.do_batch_stride + h * bp.do_head_stride +
                    int64_t(q_begin) * bp.do_row_stride;
    load_rows_async<TileQ, kThreads>(sQ + stage * TileQ::kElems, q, p.q_row_stride, q0, p.seqlen_q);
    load_rows_async<TileQ, kThreads>(sdO + stage * TileQ::kElems, dout, bp.do_row_stride, q0,
                                     p.seqlen_q);
    // The block's (LSE, D) pairs: kBlockM * 8 bytes, in range by the padding (fa2_shapes.h).
    constexpr int kStatChunks = kBlockM * sizeof(float2) / 16;
    static_assert(kStatChunks <= kThreads, "one 16-byte copy per thread");
    if (threadIdx.x < kStatChunks)
      cp_async_16(sStats + stage * kBlockM + 2 * threadIdx.x,
                  reinterpret_cast<const float2*>(bp.row_stats) +
                      workspace_rows(bp, b, h, q_begin, kVarlen).stats + q0 + 2 * threadIdx.x);
  };
  load_rows_async<TileKV, kThreads>(sK, k, p.k_row_stride, k0, p.seqlen_k);
  load_rows_async<TileKV, kThreads>(sV, v, p.v_row_stride, k0, p.seqlen_k);
  QBlock cur = blocks.first(), prev = cur;
  if (n_iters > 0) load_q_do(cur, 0);
  cp_async_commit();

  const Score score(p);
  const float scale_log2 = Score::log2_factor(p);
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
    const float2* sStatsi = sStats + stage * kBlockM + row_w + lane / 4;
    const int h = cur.h, q0 = cur.q0;
    if constexpr (kDqStaged) {  // block it - 1's dQ: its sdQ stores are visible (barrier above)
      if (it > 0) reduce_dq(prev);
    }

    {
      float s[kMT][kSTiles][4], dp[kMT][kSTiles][4];
      zero(s);
      zero(dp);
      warp_gemm<T, kMT, kSTiles, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV, kUnrollK>(
          s, sQi, row_w, sK, s_col_w);
      warp_gemm<T, kMT, kSTiles, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV, kUnrollK>(
          dp, sdOi, row_w, sV, s_col_w);
      // The mask from p each time, not held in registers across the loop (as in the forward).
      const Mask mask(p);
      const bool needs_mask = !mask.covers(q0, q0 + kBlockM - 1, k0, k0 + kBlockN);
      // Without a transform the mask and scale come before the row statistics' reads, as before the
      // variants: with the reads first, ptxas scheduled the d = 128 loop 1.3% slower (H100, A/B).
      float factor = 1.f;
      if constexpr (!Score::kTransforms)
        factor = transform_scale_and_mask(s, scale_log2, mask, score, needs_mask, q0 + row_w, k0 + s_col_w);
      // (LSE in base 2, D) of this lane's rows: g and g + 8 of each of the warp's 16-row tiles.
      float2 stats[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) stats[mt][r] = sStatsi[16 * mt + 8 * r];
      if constexpr (Score::kTransforms) {  // P and dS from the tanh of the raw score (its tanh')
        for_each_visible_element<kMT, kSTiles>(
            mask, needs_mask, q0 + row_w, k0 + s_col_w, [&](int mt, int nt, int i, bool seen) {
              transformed_p_and_ds(score, scale_log2, stats[mt][i / 2], seen, s[mt][nt][i], dp[mt][nt][i]);
            });
      } else {
        for_each_fragment_element<kMT, kSTiles>([&](int mt, int nt, int i) {
          const float2 st = stats[mt][i / 2];
          const float prob = exp2_approx(fmaf(s[mt][nt][i], factor, -st.x));
          s[mt][nt][i] = prob;                            // P
          dp[mt][nt][i] = prob * (dp[mt][nt][i] - st.y);  // dS (without the scale)
        });
      }
      store_c<TileP>(sP, s, row_w, s_col_w);
      store_c<TileP>(sdS, dp, row_w, s_col_w);
    }
    if constexpr (kDqStaged) sm90::bulk_wait_read<0>();  // sdQ is written after this barrier
    __syncthreads();

    // dV_j += P^T dO_i and dK_j += dS^T Q_i: A is read transposed from the [query][key] tiles.
    warp_gemm<T, kMT, kKVTiles, kBlockM, Stored::kTransposed, Stored::kTransposed, TileP, TileQ>(
        dv, sP, kv_row_w, sdOi, kv_col_w);
    warp_gemm<T, kMT, kKVTiles, kBlockM, Stored::kTransposed, Stored::kTransposed, TileP, TileQ>(
        dk, sdS, kv_row_w, sQi, kv_col_w);

    if constexpr (kStages == 1) {  // Q/dO are free once every warp is done with dV and dK; the
      // next block's loads then run under the dQ GEMM (which reads only dS and K).
      __syncthreads();
      if (it + 1 < n_iters) load_q_do(next_block(cur), 0);
      cp_async_commit();
    }

    // dQ_i += dS K_j, added into the fp32 workspace (other KV blocks add to the same rows); in
    // chunks of 64 columns so that d=256 with atomics does not need 64 more registers.
    constexpr bool kAtomicsTurn = !kDqStaged && kDeterministic;  // a Q block's whole dQ is one turn
    int* atomics_turn = kAtomicsTurn ? dq_turn(cur, 0) : nullptr;
    if constexpr (kAtomicsTurn) {
      if (threadIdx.x == 0) wait_for_turn(atomics_turn, my_turn(cur));
      __syncthreads();
    }
    {
      // Atomics: one base address per iteration; each of the lane's rows and n8 tiles is a
      // constant offset from it.
      const int row0 = q0 + row_w + lane / 4;
      const int64_t first = workspace_rows(bp, b, h, q_begin, kVarlen).dq + row0;
      float* dq_lane = bp.dq_accum + first * D + dq_col_w + 2 * (lane % 4);
#pragma unroll
      for (int chunk = 0; chunk < kDqTiles / kDqChunkTiles; ++chunk) {
        const int col0 = dq_col_w + chunk * 8 * kDqChunkTiles;
        float dq[kMT][kDqChunkTiles][4];
        zero(dq);
        warp_gemm<T, kMT, kDqChunkTiles, kBlockN, Stored::kRowMajor, Stored::kTransposed, TileP,
                  TileKV, kUnrollK>(dq, sdS, row_w, sK, col0);
        // The lane's rows g and g + 8 of each 16-row tile (r), two adjacent columns per n8 tile.
        auto add_rows = [&](auto rows_checked) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int dr = 16 * mt + 8 * r;
              if constexpr (kDqStaged) {
#pragma unroll
                for (int nt = 0; nt < kDqChunkTiles; ++nt)
                  *reinterpret_cast<float2*>(sdQ + dq_stage_offset(row_w + dr + lane / 4,
                                                                   col0 + 8 * nt + 2 * (lane % 4))) =
                      make_float2(dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]);
              } else {
                if (rows_checked && row0 + dr >= p.seqlen_q) continue;
#pragma unroll
                for (int nt = 0; nt < kDqChunkTiles; ++nt)
                  atomic_add_pair(dq_lane + dr * D + chunk * 8 * kDqChunkTiles + 8 * nt,
                                  dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]);
              }
            }
        };
        // A block wholly in range (uniform) adds without per-row branches: its atomics are then
        // one address plus constants. (Staged rows past the end are never reduced.)
        if (kDqStaged || q0 + kBlockM <= p.seqlen_q)
          add_rows(std::false_type{});
        else
          add_rows(std::true_type{});
      }
      if constexpr (kDqStaged) sm90::fence_proxy_async_shared();  // sdQ before the bulk reads
    }
    if constexpr (kAtomicsTurn) {  // every thread's atomics are done and visible; the turn passes
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) pass_turn(atomics_turn);
    }
    prev = cur;
    cur = next_block(cur);
  }
  cp_async_wait<0>();
  __syncthreads();
  if constexpr (kDqStaged) {  // the last block's dQ, complete before the convert kernel reads it
    if (n_iters > 0) reduce_dq(prev);
    pass_pending_turn();
    sm90::bulk_wait<0>();
  }

  // Epilogue: dK = scale * dS^T Q; stage dK and dV in the Q/dO buffers for 16-byte stores, or
  // with fp32 gradients (BwdProblem::grads_fp32) store the fragments as they are.
  for_each_fragment_element<kMT, kKVTiles>(
      [&](int mt, int nt, int i) { dk[mt][nt][i] *= p.softmax_scale; });
  const int used = p.seqlen_k - k0;  // the block's rows in range
  if constexpr (kVarlen) {  // read again rather than kept live across the walk (they spilled)
    const SequenceSpan span = sequence_span(bp.fwd, b);
    k_begin = span.k_begin;
    k_rows = span.k_rows;
  }
  if (bp.grads_fp32) {
    with_gradient_rows([&](auto* dk_out, auto* dv_out) {
      if constexpr (std::is_same_v<std::remove_pointer_t<decltype(dk_out)>, float>) {
        store_c_rows<float>(dk_out, bp.dk_row_stride, dk, kv_row_w, kv_col_w, used);
        store_c_rows<float>(dv_out, bp.dv_row_stride, dv, kv_row_w, kv_col_w, used);
      }
    });
  } else {
    store_c<TileKV>(sQ, dk, kv_row_w, kv_col_w);
    store_c<TileKV>(sdO, dv, kv_row_w, kv_col_w);
    __syncthreads();
    with_gradient_rows([&](auto* dk_out, auto* dv_out) {
      if constexpr (std::is_same_v<std::remove_pointer_t<decltype(dk_out)>, T>) {
        store_rows<TileKV, kThreads>(dk_out, bp.dk_row_stride, sQ, 0, used);
        store_rows<TileKV, kThreads>(dv_out, bp.dv_row_stride, sdO, 0, used);
      }
    });
  }
  if constexpr (kVarlen) zero_unused_rows(used, min(k_rows - k0, kBlockN));
}

// Host side: the main kernel in one shape, then the three launches for one (dtype, head_dim), with
// bp's workspace already allocated and dq_accum zeroed; instantiated in fa2_hdim<D>.cu.
template <typename T, class Shape, bool kVarlen, class Mask, class Score>
cudaError_t launch_backward_shape(const BwdProblem& bp, cudaStream_t stream) {
  const FwdProblem& p = bp.fwd;
  CUtensorMap dq_map{};  // staged dQ only, and only when there are rows to add
  if (Shape::kDqStaged && p.seqlen_q > 0) {
    if (cudaError_t err = sm90::encode_accumulator_tensor_map(
            &dq_map, sm90::AccumulatorType::kF32, bp.dq_accum, Shape::kHeadDim, dq_plane_rows(bp),
            static_cast<uint64_t>(dq_planes(bp)), Shape::kDqSlabCols, Shape::kBlockM);
        err != cudaSuccess)
      return err;
  }
  auto* kernel = bp.deterministic ? fa2_backward_kernel<T, Shape, true, kVarlen, Mask, Score>
                                  : fa2_backward_kernel<T, Shape, false, kVarlen, Mask, Score>;
  return launch_with_smem(kernel,
                          dim3(ceil_div(p.seqlen_k, Shape::kBlockN), p.heads_kv, p.batch),
                          Shape::kThreads, Shape::kSmemBytes, stream, bp, dq_map);
}

// One (dtype, head_dim, kVarlen, window, softcap) combination, as launch_forward (fa2_forward.cuh)
// says; the sinks' gradient is the shared pass's (launch_backward_passes).
template <typename T, int D, bool kVarlen, bool kLocal, bool kSoftcap>
cudaError_t launch_backward(const BwdProblem& bp, cudaStream_t stream) {
  using Mask = std::conditional_t<kLocal, LocalMask, AttentionMask>;
  using Score = std::conditional_t<kSoftcap, SoftcapScore, PlainScore>;
  return launch_backward_passes<T, D>(bp, stream, [&]() -> cudaError_t {
    if constexpr (kHasSmallSmemShape<BwdShape, D>) {
      bool small = false;
      if (cudaError_t err = use_small_smem_shape(BwdShape<D>::kSmemBytes, &small); err != cudaSuccess)
        return err;
      if (small) return launch_backward_shape<T, BwdShape<D, true>, kVarlen, Mask, Score>(bp, stream);
    }
    return launch_backward_shape<T, BwdShape<D>, kVarlen, Mask, Score>(bp, stream);
  });
}

}  // namespace hfa::fa2
