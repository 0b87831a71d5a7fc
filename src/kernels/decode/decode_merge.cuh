// Flash decode's merge of its splits' partial results inside the split grid (one launch per step),
// and the MergeProblem those results make (for that merge and for the merge kernel launched after
// the split kernel otherwise: decode_launch.cuh).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/decode/decode_problem.h"
#include "kernels/merge/merge_kernel.cuh"
#include "kernels/merge/merge_problem.h"

namespace hfa::flash_decode {

// The splits' fp32 partial results (DecodeProblem::o_partial, lse_partial: (num_splits, batch,
// seqlen_q, heads_q[, head_dim]), packed) as a merge into q's dtype, out and lse.
HFA_HOST_DEVICE inline MergeProblem split_results(const DecodeProblem& p) {
  MergeProblem m;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
  m.num_parts = p.num_splits;
  m.batch = p.batch, m.seqlen = p.seqlen_q, m.heads = p.heads_q, m.head_dim = p.head_dim;
  m.o_parts = p.o_partial;
  m.part_dtype = DType::kFP32;
  m.o_part_stride = rows * p.head_dim;
  m.o_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q * p.head_dim;
  m.o_row_stride = static_cast<int64_t>(p.heads_q) * p.head_dim;
  m.o_head_stride = p.head_dim;
  m.lse_parts = p.lse_partial;
  m.lse_part_stride = rows;
  m.lse_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q;
  m.lse_head_stride = 1;
  m.lse_row_stride = p.heads_q;
  m.out = p.o;
  m.out_dtype = p.dtype;
  m.out_batch_stride = p.o_batch_stride, m.out_row_stride = p.o_row_stride, m.out_head_stride = p.o_head_stride;
  m.lse = p.lse;
  m.lse_out_batch_stride = p.lse_batch_stride, m.lse_out_head_stride = p.lse_head_stride;
  m.lse_out_row_stride = p.lse_row_stride;
  return m;
}

// Rows of the splits' merge that each CTA of the split grid takes in merge_splits_in_grid: a warp's
// row each (at most kWarpRowMaxParts splits) or the CTA's one. The launch merges in the grid only
// when every row has its own warp or CTA (decode_launch.cuh): a CTA merging two rows one after the
// other took longer than the merge kernel's CTAs side by side (a causal 4-token step, 256 rows on
// 176 CTAs: 0.94x).
HFA_HOST_DEVICE inline int merge_rows_per_cta(int num_splits, int threads) {
  return num_splits <= merge::kWarpRowMaxParts ? threads / 32 : 1;
}

// The merge of the splits' partial results inside the split grid (DecodeProblem::merge_in_grid:
// a cooperative launch, every CTA resident, at most one row per warp or CTA; decode_launch.cuh):
// every CTA arrives at a grid-wide barrier once its partial result is written; the CTAs with
// rows to merge wait there (the others leave) and merge them with the merge kernel's arithmetic
// (merge_row_by_warp for at most kWarpRowMaxParts splits, as merge_rows_kernel; merge_row_by_cta
// past that, as merge_kernel), so the result has the same bits as the two-kernel path. It saves
// the merge kernel's launch: one launch per decode step, not two (issue 20's host cost per call).
// `scratch`: the CTA's dynamic shared memory, no longer in use.
template <typename T, int D, int kThreads>
__device__ __forceinline__ void merge_splits_in_grid(const DecodeProblem& p, void* scratch) {
  static_assert(kThreads == merge::kMergeThreads, "the merge's row functions take the CTA's threads");
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  auto arrived = grid.barrier_arrive();  // this CTA's partial result is written
  const MergeProblem m = split_results(p);
  const int64_t cta = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z);
  const int rows_per_cta = merge_rows_per_cta(p.num_splits, kThreads);
  if (cta * rows_per_cta >= m.rows()) return;  // no row here: the CTA need not wait
  grid.barrier_wait(std::move(arrived));       // every split's partial result is written and visible
  if (rows_per_cta > 1) {
    const int64_t row = cta * rows_per_cta + threadIdx.x / 32;
    if (row < m.rows()) merge::merge_row_by_warp<float, T, D>(m, row, threadIdx.x % 32);
  } else {
    merge::merge_row_by_cta<float, T, D>(m, cta, *static_cast<merge::MergeRowStorage<D>*>(scratch));
  }
}

}  // namespace hfa::flash_decode
