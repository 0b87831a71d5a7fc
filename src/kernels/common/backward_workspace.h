// The fp32 workspace every backward kernel shares (fa2, bwd_sm90), and its host-side allocation:
//   dq_accum   (batch, heads_q, seqlen_q, head_dim) fp32: dQ summed over KV blocks, converted to
//              the output dtype by the post-pass (backward_passes.cuh);
//   row_stats  (batch, heads_q, row_stats_rows) pairs (LSE * log2 e, D = rowsum(dO * O));
//   dq_turns   fa2's deterministic mode only: one turn counter per (batch, query head, 64-row Q
//              block, dQ slab), zeroed before the launch (not bwd_sm90's: it sums in launch order,
//              BwdProblem::dq_in_launch_order, with the default mode's workspace, or in fixed point).
// With BwdProblem::dq_fixed_point (bwd_sm90's deterministic mode but in launch order), dq_accum holds int64
// (twice the bytes) and two more pieces follow: dq_scale, a float per row-statistics row (the
// power of two that row's contributions are scaled by), and abs_max_kv (max |K|, max |V|, zeroed
// before the launch); no turns.
// A variable-length batch (FwdProblem::varlen()) has no batch dimension: dq_accum and row_stats
// are (heads_q, row_stats_rows) planes of rows, in which sequence b's rows start at
// varlen_workspace_row0() (WorkspaceRows says where for either layout).
// Nothing in it is O(seqlen^2).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.h"
#include "common/status_util.h"
#include "common/workspace_pool.h"

namespace hfa {

// The row statistics are stored per (batch, head) with the rows padded to a multiple of every
// backward kernel's Q block: a Q block's statistics are then one in-range 16-byte-aligned copy,
// and the padded rows hold (LSE = +inf, D = 0), which give P = 0.
constexpr int kRowStatsAlign = 128;
constexpr int row_stats_rows(int seqlen_q) {
  return (seqlen_q + kRowStatsAlign - 1) / kRowStatsAlign * kRowStatsAlign;
}

// A variable-length batch's workspace rows: sequence b's start at its first packed row moved up by
// b paddings of kRowStatsAlign rows and rounded down to a multiple of it, so that every sequence
// starts aligned (its Q blocks' statistics are aligned copies) and its last block, padded to
// kRowStatsAlign, ends before the next sequence's first row: with r(b) = that start and
// c(b) = its first packed row, r(b) <= c(b) + b A and r(b) + ceil(len / A) A is a multiple of A
// below c(b + 1) + (b + 1) A, so at most r(b + 1). The clamping of the device's cu_seqlens_q
// (varlen.cuh) keeps every sequence's rows inside the planes whatever they hold.
constexpr int64_t varlen_workspace_rows(int total_q, int batch) {
  return (static_cast<int64_t>(total_q) + kRowStatsAlign - 1) / kRowStatsAlign * kRowStatsAlign +
         static_cast<int64_t>(batch) * kRowStatsAlign;
}
HFA_HOST_DEVICE constexpr int64_t varlen_workspace_row0(int q_begin, int b) {
  return (static_cast<int64_t>(q_begin) + static_cast<int64_t>(b) * kRowStatsAlign) / kRowStatsAlign *
         kRowStatsAlign;
}

// dq_accum seen as (dq_planes(), dq_plane_rows(), head_dim): a plane per (batch entry, query
// head), or with a variable-length batch per query head. The TMA reductions' view.
HFA_HOST_DEVICE inline int64_t dq_plane_rows(const BwdProblem& bp) {
  return bp.fwd.varlen() ? bp.row_stats_rows : bp.fwd.seqlen_q;
}
HFA_HOST_DEVICE inline int64_t dq_planes(const BwdProblem& bp) {
  return bp.fwd.varlen() ? bp.fwd.heads_q : static_cast<int64_t>(bp.fwd.batch) * bp.fwd.heads_q;
}

// Where the workspace rows of (batch entry or sequence b, query head h) lie: query row i's
// statistics are row_stats[stats + i] (float2s), its dQ accumulator row dq + i of dq_accum (rows
// of head_dim floats), which is row dq_row0 + i of plane dq_plane. q_begin: a variable-length
// sequence's first packed row (sequence_span), unused otherwise; varlen: bp.fwd.varlen() (a
// kernel that knows it at compile time passes the constant).
struct WorkspaceRows {
  int64_t stats, dq, dq_plane, dq_row0;
};
HFA_HOST_DEVICE inline WorkspaceRows workspace_rows(const BwdProblem& bp, int b, int h, int q_begin,
                                                    bool varlen) {
  const FwdProblem& p = bp.fwd;
  const int64_t plane = varlen ? h : static_cast<int64_t>(b) * p.heads_q + h;
  const int64_t row0 = varlen ? varlen_workspace_row0(q_begin, b) : 0;
  const int64_t plane_rows = varlen ? bp.row_stats_rows : p.seqlen_q;  // dq_plane_rows(bp), by `varlen`
  return WorkspaceRows{plane * bp.row_stats_rows + row0, plane * plane_rows + row0, plane, row0};
}

// Deterministic backward (BwdProblem::dq_turns): a turn counter per (batch, query head, Q block,
// dQ slab), laid out for the smallest Q block (64 rows) and the most slabs (d = 256: 8 of 32
// columns); a kernel with larger blocks or fewer slabs uses a prefix of each row of counters.
constexpr int kDqTurnRows = 64;
constexpr int kDqTurnSlots = 8;
constexpr int64_t dq_turn_blocks(int seqlen_q) { return (seqlen_q + kDqTurnRows - 1) / kDqTurnRows; }
constexpr int64_t dq_turn_count(int batch, int heads_q, int seqlen_q) {
  return int64_t(batch) * heads_q * dq_turn_blocks(seqlen_q) * kDqTurnSlots;
}

// Allocates the workspace on the stream (laid out for bp.dq_fixed_point), zeroes the turn counters
// or abs_max_kv (the row-statistics pre-pass zeroes dq_accum), runs launch(bp) with bp's workspace
// pointers set, and frees the workspace in stream order. `kernel` names the backward in the error
// messages.
template <class Launch>
Status with_backward_workspace(const BwdProblem& problem, cudaStream_t stream, const char* kernel,
                               Launch launch) {
  BwdProblem bp = problem;
  const FwdProblem& p = bp.fwd;
  bp.row_stats_rows = static_cast<int>(p.varlen() ? varlen_workspace_rows(p.total_q, p.batch)
                                                   : row_stats_rows(p.seqlen_q));
  const size_t rows = static_cast<size_t>(dq_planes(bp) * dq_plane_rows(bp));
  const bool fixed = bp.dq_fixed_point;
  const size_t accum_bytes = rows * p.head_dim * (fixed ? sizeof(long long) : sizeof(float));
  const size_t stat_rows = static_cast<size_t>(dq_planes(bp)) * bp.row_stats_rows;
  const size_t stats_bytes = stat_rows * 2 * sizeof(float);
  const size_t scale_bytes = fixed ? stat_rows * sizeof(float) : 0;  // a multiple of 512 bytes
  const size_t max_bytes = fixed && rows > 0 ? 16 : 0;               // two used
  const size_t turn_bytes = bp.deterministic && !fixed && !bp.dq_in_launch_order
      ? static_cast<size_t>(dq_turn_count(p.batch, p.heads_q, p.seqlen_q)) * sizeof(int) : 0;
  void* workspace = nullptr;
  if (rows > 0)
    HFA_RETURN_IF_ERROR(cuda_status(
        workspace_alloc(&workspace, accum_bytes + stats_bytes + scale_bytes + max_bytes + turn_bytes, stream),
        (std::string(kernel) + " backward: allocating the dQ workspace").c_str()));
  // In order: dq_accum, row_stats, then dq_scale and abs_max_kv (fixed point) or dq_turns.
  char* const base = static_cast<char*>(workspace);
  const size_t stats_at = accum_bytes, tail_at = stats_at + stats_bytes;
  bp.dq_accum = reinterpret_cast<float*>(base);
  bp.row_stats = reinterpret_cast<float*>(base + stats_at);
  bp.dq_scale = scale_bytes ? reinterpret_cast<float*>(base + tail_at) : nullptr;
  bp.abs_max_kv = max_bytes ? reinterpret_cast<unsigned*>(base + tail_at + scale_bytes) : nullptr;
  bp.dq_turns = turn_bytes ? reinterpret_cast<int*>(base + tail_at) : nullptr;
  cudaError_t err = turn_bytes ? cudaMemsetAsync(bp.dq_turns, 0, turn_bytes, stream) : cudaSuccess;
  if (err == cudaSuccess && max_bytes) err = cudaMemsetAsync(bp.abs_max_kv, 0, max_bytes, stream);
  if (err == cudaSuccess) err = launch(bp);
  const cudaError_t free_err = workspace ? workspace_free(workspace, stream) : cudaSuccess;
  if (err == cudaSuccess) err = free_err;
  return cuda_status(err, ("launching " + std::string(kernel) + " backward").c_str());
}

}  // namespace hfa
