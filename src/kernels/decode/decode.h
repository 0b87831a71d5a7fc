// Flash decode's host side: the split heuristic, the workspace layout, and the launches
// (decode.cu; the kernels are instantiated per head dim in decode_hdim<D>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"
#include "kernels/decode/decode_problem.h"

namespace hfa::flash_decode {

// The split count plan_decode() chooses when num_splits == 0 (docs/WORKLOG.md, "Flash decode").
int choose_num_splits(const DecodeProblem& p, int sm_count);

// Bytes of fp32 partial O and LSE for p.num_splits splits (0 for one split).
size_t workspace_bytes(const DecodeProblem& p);

// Shared memory one CTA of the split kernel takes for this head dim and cache (bf16/fp16 or e4m3;
// the larger of the contiguous and paged shapes) (0 for a head dim this build does not
// instantiate).
size_t smem_bytes(int head_dim, bool fp8_cache);

// Launches the append (with k_new / v_new), the split kernel and, with several splits, the
// combine on `stream`: inside the split grid when the device holds all its CTAs at once (a
// cooperative launch), else the merge kernel after it (decode_launch.cuh). p.o_partial /
// p.lse_partial must point into a workspace of workspace_bytes(p) when p.num_splits > 1.
Status launch(const DecodeProblem& p, cudaStream_t stream);

// Whether launch() may merge the splits inside the split grid (true unless set otherwise; for all
// of the process's threads). The tests turn it off to compare the two paths bit for bit.
void set_merge_in_grid_allowed(bool allowed);
bool merge_in_grid_allowed();

}  // namespace hfa::flash_decode
