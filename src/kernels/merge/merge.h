// The launch of the merge kernel (merge_kernel.cuh) for a validated MergeProblem.
#pragma once

#include <cuda_runtime.h>

#include "kernels/merge/merge_problem.h"

namespace hfa::merge {

// Launches the merge on `stream`: one CTA per output row, all head dims (64, 128, 256) and
// dtypes (parts fp32/bf16/fp16, out fp32/bf16/fp16) whatever the build's HFA_HEAD_DIMS.
// as_dependent: launched as the previous kernel's programmatic dependent (sm90 and newer; the
// caller checks the architecture), as flash decode's split kernel allows.
cudaError_t launch(const MergeProblem& p, cudaStream_t stream, bool as_dependent = false);

}  // namespace hfa::merge
