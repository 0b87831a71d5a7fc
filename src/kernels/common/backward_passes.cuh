// The two passes around every backward kernel's main launch (fa2, bwd_sm90), on the workspace of
// backward_workspace.h:
//   pre-pass:  D_i = rowsum(dO_i * O_i) in fp32 (FlashAttention-2's preprocessing step), stored
//              with LSE_i in base 2 beside it so that a main kernel copies both with its Q block;
//              it also zeroes the dQ accumulator (and with fixed-point dQ writes each row's scale,
//              from max |K| and |V|, which a pass before it finds);
//   post-pass: dQ = scale * dQ_accum in the output dtype and strides.
// And the layout in which the main kernels stage a Q block's dQ in shared memory for the bulk
// copy engine's reductions (DqStage).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "common/problem.h"
#include "kernels/common/backward_workspace.h"
#include "kernels/common/sink_grad.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/varlen.cuh"

namespace hfa {

constexpr float kBackwardLog2e = 1.4426950408889634f;

// A Q block's dQ (BlockM rows x D, fp32 or, with fixed-point dQ, int64: ElemBytes 4 or 8) staged
// in shared memory as slabs of 128 bytes a row (32 fp32 or 16 int64 columns) x BlockM rows, one
// per TMA tensor reduction, 128-byte swizzled as the reduction's tensor map says
// (encode_accumulator_tensor_map): 16-byte chunk c of row r at chunk c ^ (r % 8). The swizzle
// puts the C fragments' pair stores (8 rows x 4 lanes) on distinct banks.
// For code that stores a fragment, the same offset in bytes as (row_base(row, col % 8) ^ the
// column's 8-column group within its slab, shifted to the chunk bits above the group's) + the
// slab's offset: an 8-column group is kGroupChunks = ElemBytes / 2 chunks, so the group's bits
// and those of the chunk within it are disjoint, and (group * kGroupChunks + sub) ^ (row % 8) is
// (sub ^ row % 8) ^ group * kGroupChunks: a thread keeps one row base and each store is an XOR and
// an add of immediates (k6's staged O: precomputed addresses were hoisted and spilled). Rows 8
// apart differ by 1024 bytes. Tested against offset() in tests/cpu.
template <int BlockM, int ElemBytes = 4>
struct DqStage {
  static_assert(ElemBytes == 4 || ElemBytes == 8, "fp32 or int64");
  static constexpr int kSlabCols = 128 / ElemBytes;
  static constexpr int kChunkElems = 16 / ElemBytes;
  static constexpr int kGroupChunks = ElemBytes / 2;          // 16-byte chunks per 8 columns
  static constexpr int kGroupShift = kGroupChunks == 2 ? 5 : 6;  // log2(16 * kGroupChunks)
  __host__ __device__ static constexpr int offset(int row, int col) {  // in elements
    return (col / kSlabCols) * BlockM * kSlabCols + row * kSlabCols +
           ((col % kSlabCols / kChunkElems) ^ (row % 8)) * kChunkElems + col % kChunkElems;
  }
  __host__ __device__ static constexpr uint32_t row_base(int row, int col_in_group) {
    return row * 128 + (((col_in_group / kChunkElems) ^ (row % 8)) << 4) + (col_in_group % kChunkElems) * ElemBytes;
  }
  __host__ __device__ static constexpr uint32_t byte_offset(uint32_t row_base, int col) {
    return (row_base ^ ((col % kSlabCols / 8) << kGroupShift)) + (col / kSlabCols) * BlockM * 128;
  }
  // A warp's pair stores (8 rows x 4 lanes, 2 elements each) go out in phases of 128 bytes: 16
  // lanes (4 rows) of 8-byte stores, 8 lanes (2 rows) of 16-byte ones. Rows r and r ^ 1 put an
  // 8-column group on the same chunks (the swizzle XORs r % 8 into the chunk index, and a group
  // spans kGroupChunks aligned chunks), so a phase storing one group hits each of its banks twice:
  // ncu measured twice the ideal wavefronts on bwd_sm90's dQ staging (session 35). So in each
  // store the lanes of odd rows write group k ^ kOddRowGroupSwap (in the same slab) where the
  // others write group k: every phase then covers 8 distinct chunks (tests/cpu). swapped(base):
  // the row base of a thread whose rows are odd, with which byte_offset(swapped(base), col) is the
  // address of column col ^ (8 kOddRowGroupSwap).
  static constexpr int kOddRowGroupSwap = ElemBytes == 4 ? 2 : 1;
  __host__ __device__ static constexpr uint32_t swapped(uint32_t row_base) {
    return row_base ^ (kOddRowGroupSwap << kGroupShift);
  }
};

// The query rows of (batch entry or sequence b, query head h) as the row passes see them: how
// many, row 0 of o, dout and lse, the first packed row, and their workspace rows. A variable-length batch's
// sequence b (its batch strides are 0, so b moves no pointer) starts at its first packed row.
template <typename T>
struct BackwardQRows {
  int seqlen_q;
  const T* o;
  const T* dout;
  int q_begin;
  const float* lse;
  WorkspaceRows ws;
};
template <typename T>
__device__ __forceinline__ BackwardQRows<T> backward_q_rows(const BwdProblem& bp, int b, int h) {
  const FwdProblem& p = bp.fwd;
  int q_begin = 0, seqlen_q = p.seqlen_q;
  if (p.varlen()) {
    const SequenceSpan span = sequence_span(p, b);
    q_begin = span.q_begin;
    seqlen_q = span.seqlen_q;
  }
  BackwardQRows<T> r;
  r.seqlen_q = seqlen_q;
  r.o = static_cast<const T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + q_begin * p.o_row_stride;
  r.dout = static_cast<const T*>(bp.dout) + b * bp.do_batch_stride + h * bp.do_head_stride +
           q_begin * bp.do_row_stride;
  r.q_begin = q_begin;
  r.lse = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + q_begin * p.lse_row_stride;
  r.ws = workspace_rows(bp, b, h, q_begin, p.varlen());
  return r;
}

// ---- Fixed-point dQ (BwdProblem::dq_fixed_point): the scale of a row's contributions ----------
// Row i's contributions to the accumulator (before the softmax scale) are sums over keys of
// dS_ij K_jc, dS_ij = P_ij (dP_ij - D_i) (times tanh' <= 1 with a softcap), so every partial sum
// is at most sum_j P_ij (|dP_ij| + |D_i|) max|K| <= 2 ||dO_i||_1 max|V| max|K|: sum_j P_ij <= 1,
// |dP_ij| = |dO_i . V_j| <= ||dO_i||_1 max|V|, and |D_i| = |dO_i . O_i| <= ||dO_i||_1 max|V| since
// O_i is a convex combination of V's rows. Doubled for the roundings on the way (dS in bf16, the
// GEMMs' fp32 sums, O's rounding, sum_j P_ij a little above 1), the row's contributions are scaled
// by 2^e with 4 ||dO_i||_1 max|V| max|K| 2^e <= 2^58, rounded to integers and summed in int64:
// no partial sum comes within 32x of overflow, and the sum has the same bits in any order. The
// resolution is 2^-e: for attention spread over 16k keys with outliers 10-20x the typical |K| and
// |V| the bound exceeds the true dQ by ~2^19, which leaves ~2^39 steps, finer than an fp32 sum's.
// Returns e (0 when a factor is 0 or not finite: dQ is then 0, or not finite anyway), within
// [-126, 126] so that 2^e and 2^-e are normal floats.
HFA_HOST_DEVICE inline int dq_fixed_point_exponent(float l1_dout, float max_k, float max_v) {
  const bool usable = l1_dout > 0.f && max_k > 0.f && max_v > 0.f && l1_dout <= 3.0e38f &&
                      max_k <= 3.0e38f && max_v <= 3.0e38f;  // also false for NaN
  if (!usable) return 0;
  int a, b, c;  // x < 2^a
  frexpf(l1_dout, &a);
  frexpf(max_k, &b);
  frexpf(max_v, &c);
  const int e = 56 - (a + b + c);  // 4 * (< 2^(a+b+c)) * 2^e < 2^58
  return e < -126 ? -126 : e > 126 ? 126 : e;
}

// max |K| and max |V| over the whole tensors (every batch entry, head and row, a variable-length
// batch's rows past its last sequence too: a larger max only loosens the bound), into
// bp.abs_max_kv[0 / 1] (zeroed by the workspace's allocation) as fp32 bits, which order as
// unsigned integers for non-negative values. A thread per 16-byte chunk of K and of V, grid-stride.
constexpr int kAbsMaxThreads = 256, kAbsMaxBlocks = 528;

template <typename T, int D>
__global__ void __launch_bounds__(kAbsMaxThreads) backward_abs_max_kv_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  constexpr int kChunks = D / kElemsPer16B;
  const int k_rows = p.k_rows();
  const int64_t items = static_cast<int64_t>(k_rows) * p.heads_kv * p.tma_batch() * kChunks;
  float max_k = 0.f, max_v = 0.f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kAbsMaxThreads + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * kAbsMaxThreads) {
    const int c = static_cast<int>(i % kChunks);
    const int64_t r = i / kChunks;
    const int row = static_cast<int>(r % k_rows), h = static_cast<int>(r / k_rows % p.heads_kv);
    const int64_t b = r / k_rows / p.heads_kv;
    const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride + row * p.k_row_stride;
    const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride + row * p.v_row_stride;
    float kf[8], vf[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(k + c * kElemsPer16B), kf);
    unpack8<T>(*reinterpret_cast<const uint4*>(v + c * kElemsPer16B), vf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      max_k = fmaxf(max_k, fabsf(kf[e]));
      max_v = fmaxf(max_v, fabsf(vf[e]));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    max_k = fmaxf(max_k, __shfl_xor_sync(0xffffffffu, max_k, off));
    max_v = fmaxf(max_v, __shfl_xor_sync(0xffffffffu, max_v, off));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&bp.abs_max_kv[0], __float_as_uint(max_k));
    atomicMax(&bp.abs_max_kv[1], __float_as_uint(max_v));
  }
}

// ---- Pre-pass: row statistics (LSE * log2 e, D = rowsum(dO * O)) and the zeroed dQ workspace ---
// D / 8 lanes per query row, one 16-byte chunk of O and of dO each; the same lanes zero the row's
// D fp32 (or int64) of the dQ accumulator (which the main kernel adds into), so that the
// workspace needs no separate memset pass. One CTA row per (batch entry or sequence, query head),
// its rows padded to kRowStatsAlign (a sequence's CTAs past them return).

constexpr int kRowStatsThreads = 256;

template <typename T, int D>
__global__ void __launch_bounds__(kRowStatsThreads) backward_row_stats_kernel(BwdProblem bp) {
  constexpr int kLanesPerRow = D / kElemsPer16B;  // 8, 16 or 32: a power of two within a warp
  constexpr int kRowsPerBlock = kRowStatsThreads / kLanesPerRow;
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "a row's lanes lie in one warp");
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kLanesPerRow, h = blockIdx.y,
            b = blockIdx.z;
  const int c = threadIdx.x % kLanesPerRow;  // this lane's 16-byte chunk of the row
  const BackwardQRows<T> rows = backward_q_rows<T>(bp, b, h);
  if (row >= row_stats_rows(rows.seqlen_q)) return;  // a row's lanes return together (as for padding rows)
  float2* stats = reinterpret_cast<float2*>(bp.row_stats) + rows.ws.stats + row;
  if (row >= rows.seqlen_q) {  // padding: P = 0, so no gradient
    if (c == 0) {
      *stats = make_float2(INFINITY, 0.f);
      if (bp.dq_fixed_point) bp.dq_scale[rows.ws.stats + row] = 1.f;
    }
    return;
  }
  const T* o = rows.o + row * bp.fwd.o_row_stride;
  const T* dout = rows.dout + row * bp.do_row_stride;
  float of[8], df[8];
  unpack8<T>(*reinterpret_cast<const uint4*>(o + c * kElemsPer16B), of);
  unpack8<T>(*reinterpret_cast<const uint4*>(dout + c * kElemsPer16B), df);
  float dot = 0.f, l1 = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    dot += of[e] * df[e];
    l1 += fabsf(df[e]);
  }
  // This lane's 8 accumulator elements: 32 bytes of fp32, or 64 of int64 (fixed point).
  const int chunks16 = bp.dq_fixed_point ? 4 : 2;
  float4* accum = reinterpret_cast<float4*>(bp.dq_accum) + ((rows.ws.dq + row) * (D / 8) + c) * chunks16;
  for (int i = 0; i < chunks16; ++i) accum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  // The shuffles name only this row's lanes: other rows of the warp may have returned.
  const unsigned row_lanes = static_cast<unsigned>((uint64_t{1} << kLanesPerRow) - 1)
                             << (threadIdx.x % 32 / kLanesPerRow * kLanesPerRow);
#pragma unroll
  for (int off = kLanesPerRow / 2; off > 0; off /= 2) {
    dot += __shfl_xor_sync(row_lanes, dot, off);
    l1 += __shfl_xor_sync(row_lanes, l1, off);
  }
  if (c == 0) {
    // A row that saw no key (LSE = -inf) gets +inf as well: P = 0.
    const float lse = rows.lse[row * bp.fwd.lse_row_stride];
    *stats = make_float2(lse == -INFINITY ? INFINITY : lse * kBackwardLog2e, dot);
    if (bp.dq_fixed_point)
      bp.dq_scale[rows.ws.stats + row] = ldexpf(
          1.f, dq_fixed_point_exponent(l1, __uint_as_float(bp.abs_max_kv[0]), __uint_as_float(bp.abs_max_kv[1])));
  }
}

// ---- Post-pass: dQ = scale * dQ_accum, in the gradients' dtype G -----------------------------
// (T, or fp32: BwdProblem::grads_fp32). A thread per 8 elements of dQ; one CTA row per (batch
// entry or sequence, query head).

constexpr int kConvertThreads = 256;

template <typename T, typename G, int D>
__global__ void __launch_bounds__(kConvertThreads) backward_convert_dq_kernel(BwdProblem bp) {
  constexpr int kChunks = D / kElemsPer16B;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x;
  const int row = static_cast<int>(idx / kChunks), c = static_cast<int>(idx % kChunks);
  const int b = blockIdx.z, h = blockIdx.y;
  const BackwardQRows<T> rows = backward_q_rows<T>(bp, b, h);
  if (row >= rows.seqlen_q) return;
  float scaled[8];
  if (bp.dq_fixed_point) {  // int64 in units of 2^-e: times 2^-e (exact), then the softmax scale
    const longlong2* src = reinterpret_cast<const longlong2*>(bp.dq_accum_fixed() + (rows.ws.dq + row) * D +
                                                              c * kElemsPer16B);
    const float unit = 1.f / bp.dq_scale[rows.ws.stats + row];  // a power of two: exact
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const longlong2 pair = src[i];
      scaled[2 * i] = __ll2float_rn(pair.x) * unit * bp.fwd.softmax_scale;
      scaled[2 * i + 1] = __ll2float_rn(pair.y) * unit * bp.fwd.softmax_scale;
    }
  } else {
    const float4* src = reinterpret_cast<const float4*>(bp.dq_accum + (rows.ws.dq + row) * D + c * kElemsPer16B);
    const float4 lo = src[0], hi = src[1];
    const float vals[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) scaled[e] = vals[e] * bp.fwd.softmax_scale;
  }
  G* dq = static_cast<G*>(bp.dq) + b * bp.dq_batch_stride + h * bp.dq_head_stride +
          (int64_t(rows.q_begin) + row) * bp.dq_row_stride + c * kElemsPer16B;
  store8<G>(dq, scaled);
}

// ---- A variable-length batch's rows past its last sequence: zero gradients --------------------
// Rows [cu_seqlens_q[batch], total_q) of dq and [cu_seqlens_k[batch], total_k) of dk and dv
// belong to no sequence (none when the last entries are the totals): no score reaches them, so
// their gradient is 0. A thread per 16-byte chunk of the gradients' dtype G, grid-stride.

constexpr int kZeroTailThreads = 256, kZeroTailBlocks = 64;

template <typename G, int D>
__global__ void __launch_bounds__(kZeroTailThreads) backward_zero_tails_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(G)), kChunks = D / kPerChunk;
  const int q_tail = min(max(p.cu_seqlens_q[p.batch], 0), p.total_q);
  const int k_tail = min(max(p.cu_seqlens_k[p.batch], 0), p.total_k);
  const int64_t q_items = static_cast<int64_t>(p.total_q - q_tail) * p.heads_q * kChunks;
  const int64_t k_items = static_cast<int64_t>(p.total_k - k_tail) * p.heads_kv * kChunks;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kZeroTailThreads + threadIdx.x; i < q_items + 2 * k_items;
       i += static_cast<int64_t>(gridDim.x) * kZeroTailThreads) {
    const bool is_q = i < q_items;
    const int64_t j = is_q ? i : (i - q_items) % k_items;  // dk's items, then dv's
    const int heads = is_q ? p.heads_q : p.heads_kv;
    const int c = static_cast<int>(j % kChunks);
    const int h = static_cast<int>(j / kChunks % heads);
    const int64_t row = (is_q ? q_tail : k_tail) + j / kChunks / heads;
    G* base = static_cast<G*>(is_q ? bp.dq : i < q_items + k_items ? bp.dk : bp.dv);
    const int64_t row_stride = is_q ? bp.dq_row_stride : i < q_items + k_items ? bp.dk_row_stride : bp.dv_row_stride;
    const int64_t head_stride = is_q ? bp.dq_head_stride : i < q_items + k_items ? bp.dk_head_stride : bp.dv_head_stride;
    *reinterpret_cast<uint4*>(base + row * row_stride + h * head_stride + c * kPerChunk) = make_uint4(0, 0, 0, 0);
  }
}

// The Q blocks that the CTA of one KV block (first key k0, KV head hk) visits, in order: every
// Q block of every query head that reads KV head hk (GQA/MQA: the sum over the group happens on
// chip), skipping under causal masking the Q blocks wholly before the KV block (query i sees key
// k0 iff i >= k0 - offset), and under a sliding window (FwdProblem::local) also those wholly
// after it (query i sees key k0 + block_n - 1 iff i <= k0 + block_n - 1 - offset + window_left).
// Iteration it works on query head h and the Q block starting at row q0; next() steps without an
// integer division.
template <int BlockM>
struct BackwardQBlocks {
  struct Block {
    int h, q0;
  };
  int m_begin, n_iters, q_end, h_first;

  __device__ BackwardQBlocks(const FwdProblem& p, int hk, int k0, int block_n) {
    const int offset = p.causal_offset();
    const int first_row = p.causal ? k0 - offset : p.local ? k0 - offset - p.window_right : 0;
    // One past the last row that sees a key of the block (window_left <= 2^30, no overflow).
    const int row_end = p.local ? min(p.seqlen_q, max(0, k0 + block_n - offset + p.window_left))
                                : p.seqlen_q;
    m_begin = first_row <= 0 ? 0 : first_row / BlockM;
    const int m_count = max(0, (row_end + BlockM - 1) / BlockM - m_begin);
    n_iters = p.group_size() * m_count;
    q_end = (m_begin + m_count) * BlockM;
    h_first = hk * p.group_size();
  }
  __device__ Block first() const { return Block{h_first, m_begin * BlockM}; }
  __device__ Block next(Block blk) const {
    blk.q0 += BlockM;
    if (blk.q0 == q_end) blk.q0 = m_begin * BlockM, ++blk.h;
    return blk;
  }
};

// Deterministic dQ (BwdProblem::dq_turns, backward_workspace.h): the additions into each Q block
// (and dQ slab) happen in a fixed order, from the last KV block that adds to it, last(blk), down
// to the first. counter(): the turn counter of block blk's slab `slot`; turn(): KV block
// kv_block's turn on it, last(blk) - kv_block. (The blocks adding to Q block blk are a contiguous
// range ending at last(blk): the causal skip drops a prefix of Q blocks, the window a prefix and
// a suffix.)
template <int BlockM, int BlockN>
struct DqTurns {
  static_assert(BlockM % kDqTurnRows == 0, "a Q block covers whole turn blocks");
  __device__ static int* counter(const BwdProblem& bp, int b, typename BackwardQBlocks<BlockM>::Block blk,
                                 int slot) {
    const int64_t bh = static_cast<int64_t>(b) * bp.fwd.heads_q + blk.h;
    return bp.dq_turns + (bh * dq_turn_blocks(bp.fwd.seqlen_q) + blk.q0 / kDqTurnRows) * kDqTurnSlots + slot;
  }
  __device__ static int turn(const FwdProblem& p, typename BackwardQBlocks<BlockM>::Block blk,
                             int kv_block, int n_kv_blocks) {
    int last = n_kv_blocks - 1;
    if (p.causal) last = min(last, (blk.q0 + BlockM - 1 + p.causal_offset()) / BlockN);
    if (p.local) last = min(last, (blk.q0 + BlockM - 1 + p.causal_offset() + p.window_right) / BlockN);
    return last - kv_block;
  }
};

// The pre-pass, `main` (the main kernel's launch, a callable returning cudaError_t), the zeroed
// rows past a variable-length batch's last sequence, and the post-pass for one (dtype,
// head_dim), with bp's workspace allocated (with_backward_workspace).
// seqlen_q == 0 still runs the main kernel (dK = dV = 0); seqlen_k == 0 does not (the zeroed
// accumulator converts to dQ = 0).
template <typename T, int D, class MainLaunch>
cudaError_t launch_backward_passes(const BwdProblem& bp, cudaStream_t stream, MainLaunch main) {
  const FwdProblem& p = bp.fwd;
  if (bp.dq_fixed_point && p.seqlen_q > 0 && p.k_rows() > 0) {  // the bound's max |K|, |V| first
    backward_abs_max_kv_kernel<T, D><<<kAbsMaxBlocks, kAbsMaxThreads, 0, stream>>>(bp);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.seqlen_q > 0) {  // with a variable-length batch, sized by max_seqlen_q
    constexpr int kRowsPerBlock = kRowStatsThreads / (D / kElemsPer16B);
    backward_row_stats_kernel<T, D>
        <<<dim3((row_stats_rows(p.seqlen_q) + kRowsPerBlock - 1) / kRowsPerBlock, p.heads_q, p.batch),
           kRowStatsThreads, 0, stream>>>(bp);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (bp.dsinks) {  // also with seqlen_q == 0: the sum of no rows, 0
    if (cudaError_t err = launch_backward_sink_grad(bp, stream); err != cudaSuccess) return err;
  }
  if (p.seqlen_k > 0 && p.k_rows() > 0) {
    if (cudaError_t err = main(); err != cudaSuccess) return err;
  }
  if (p.varlen()) {
    auto* zero_tails = bp.grads_fp32 ? backward_zero_tails_kernel<float, D> : backward_zero_tails_kernel<T, D>;
    zero_tails<<<kZeroTailBlocks, kZeroTailThreads, 0, stream>>>(bp);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.seqlen_q > 0) {
    const int64_t chunks = static_cast<int64_t>(p.seqlen_q) * (D / kElemsPer16B);
    auto* convert = bp.grads_fp32 ? backward_convert_dq_kernel<T, float, D> : backward_convert_dq_kernel<T, T, D>;
    convert<<<dim3(static_cast<unsigned>((chunks + kConvertThreads - 1) / kConvertThreads), p.heads_q, p.batch),
              kConvertThreads, 0, stream>>>(bp);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace hfa
