// The fp32 workspace every backward kernel shares (fa2, bwd_sm90), and its host-side allocation:
//   dq_accum   (batch, heads_q, seqlen_q, head_dim) fp32: dQ summed over KV blocks, converted to
//              the output dtype by the post-pass (backward_passes.cuh);
//   row_stats  (batch, heads_q, row_stats_rows) pairs (LSE * log2 e, D = rowsum(dO * O));
//   dq_turns   deterministic mode only: one turn counter per (batch, query head, 64-row Q block,
//              dQ slab), zeroed before the launch.
// Nothing in it is O(seqlen^2).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.h"
#include "common/status_util.h"

namespace hfa {

// The row statistics are stored per (batch, head) with the rows padded to a multiple of every
// backward kernel's Q block: a Q block's statistics are then one in-range 16-byte-aligned copy,
// and the padded rows hold (LSE = +inf, D = 0), which give P = 0.
constexpr int kRowStatsAlign = 128;
constexpr int row_stats_rows(int seqlen_q) {
  return (seqlen_q + kRowStatsAlign - 1) / kRowStatsAlign * kRowStatsAlign;
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

// Allocates the workspace on the stream, zeroes the turn counters (the row-statistics pre-pass
// zeroes dq_accum), runs launch(bp) with bp's workspace pointers set, and frees the workspace in
// stream order. `kernel` names the backward in the error messages.
template <class Launch>
Status with_backward_workspace(const BwdProblem& problem, cudaStream_t stream, const char* kernel,
                               Launch launch) {
  BwdProblem bp = problem;
  const FwdProblem& p = bp.fwd;
  const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q;
  bp.row_stats_rows = row_stats_rows(p.seqlen_q);
  const size_t accum_bytes = rows * p.head_dim * sizeof(float);
  const size_t stats_bytes =
      static_cast<size_t>(p.batch) * p.heads_q * bp.row_stats_rows * 2 * sizeof(float);
  const size_t turn_bytes =
      bp.deterministic ? static_cast<size_t>(dq_turn_count(p.batch, p.heads_q, p.seqlen_q)) * sizeof(int) : 0;
  void* workspace = nullptr;
  if (rows > 0)
    HFA_RETURN_IF_ERROR(cuda_status(cudaMallocAsync(&workspace, accum_bytes + stats_bytes + turn_bytes, stream),
                                    (std::string(kernel) + " backward: allocating the fp32 dQ workspace").c_str()));
  bp.dq_accum = static_cast<float*>(workspace);
  bp.row_stats = bp.dq_accum + rows * p.head_dim;
  bp.dq_turns = turn_bytes ? reinterpret_cast<int*>(bp.row_stats + stats_bytes / sizeof(float)) : nullptr;
  cudaError_t err = turn_bytes ? cudaMemsetAsync(bp.dq_turns, 0, turn_bytes, stream) : cudaSuccess;
  if (err == cudaSuccess) err = launch(bp);
  const cudaError_t free_err = workspace ? cudaFreeAsync(workspace, stream) : cudaSuccess;
  if (err == cudaSuccess) err = free_err;
  return cuda_status(err, ("launching " + std::string(kernel) + " backward").c_str());
}

}  // namespace hfa
