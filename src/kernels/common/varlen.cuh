// One sequence of a variable-length batch (FwdProblem::cu_seqlens_q ...) as a dense problem of its
// own, so that masks, tile ranges and the direct stores need no varlen code: kernels call
// sequence_view() once per tile and hand the view to them.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"

namespace hfa {

// Where sequence b's rows start in the packed tensors (the TMA loads and stores, whose
// descriptors span the packed tensors, add these to their tile coordinates).
struct SequenceOffsets {
  int q = 0, k = 0;
};

// Sequence b of a variable-length problem: where its queries and keys start in the packed
// tensors and how many there are (cut to max_seqlen_q / max_seqlen_k); k_rows: the rows of k and
// v it spans, of which it uses the first seqlen_k (seqused_k). The device's cu_seqlens are
// clamped to [0, total] and seqused_k to [0, the sequence's keys], so whatever they hold nothing
// outside the tensors is touched. Call only for p.varlen().
struct SequenceSpan {
  int q_begin, seqlen_q, k_begin, seqlen_k, k_rows;
};
__device__ __forceinline__ SequenceSpan sequence_span(const FwdProblem& p, int b) {
  auto clamp = [](int x, int hi) { return min(max(x, 0), hi); };
  const int q_begin = clamp(p.cu_seqlens_q[b], p.total_q);
  const int q_end = max(q_begin, clamp(p.cu_seqlens_q[b + 1], p.total_q));
  const int k_begin = clamp(p.cu_seqlens_k[b], p.total_k);
  const int k_rows = min(max(k_begin, clamp(p.cu_seqlens_k[b + 1], p.total_k)) - k_begin, p.seqlen_k);
  const int k_len = p.seqused_k ? clamp(p.seqused_k[b], k_rows) : k_rows;
  return SequenceSpan{q_begin, min(q_end - q_begin, p.seqlen_q), k_begin, k_len, k_rows};
}

// Sequence b as a dense problem (sequence_span): seqlen_q / seqlen_k its own, q / o / lse and
// k / v pointing at its first row (the batch strides are 0, so any batch index reads it).
// T: the element type of q, k, v and o.
template <typename T>
__device__ __forceinline__ FwdProblem sequence_view(const FwdProblem& p, int b, SequenceOffsets* at) {
  const SequenceSpan span = sequence_span(p, b);
  FwdProblem s = p;
  s.seqlen_q = span.seqlen_q;
  s.seqlen_k = span.seqlen_k;
  s.q = static_cast<const T*>(p.q) + span.q_begin * p.q_row_stride;
  s.o = static_cast<T*>(p.o) + span.q_begin * p.o_row_stride;
  s.k = static_cast<const T*>(p.k) + span.k_begin * p.k_row_stride;
  s.v = static_cast<const T*>(p.v) + span.k_begin * p.v_row_stride;
  if (p.lse) s.lse = p.lse + span.q_begin * p.lse_row_stride;
  at->q = span.q_begin;
  at->k = span.k_begin;
  return s;
}

// Rows [0, rows) of a (rows, D) tile of dst (row stride in elements, 16-byte aligned rows) set to
// zero by `threads` threads, this one `thread`: the gradients of the keys a sequence spans but
// does not use (past seqused_k), which no score reaches.
template <typename T, int D>
__device__ __forceinline__ void zero_rows(T* dst, int64_t row_stride, int rows, int thread, int threads) {
  constexpr int kChunks = D * static_cast<int>(sizeof(T)) / 16, kPerChunk = 16 / static_cast<int>(sizeof(T));
  for (int i = thread; i < rows * kChunks; i += threads)
    *reinterpret_cast<uint4*>(dst + (i / kChunks) * row_stride + (i % kChunks) * kPerChunk) = make_uint4(0, 0, 0, 0);
}

}  // namespace hfa
