// The gradient of the attention sinks (BackwardArgs::dsinks), shared by every backward kernel.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"

namespace hfa {

// dsinks[h] = -sum over (batch, row) of exp(sinks[h] - LSE) * D, from the pre-pass's (LSE2, D)
// pairs in bp.row_stats (dL/dsink = -sum_i P_sink,i (dO_i . O_i): the sink takes P_sink =
// exp(sink - LSE) of each row's probability mass and leaves O the average of the rest). Summed
// in a fixed order (deterministic). With batch == 0 or seqlen_q == 0 it reads no statistics and
// writes 0. Launched on `stream` when bp.dsinks is set.
cudaError_t launch_backward_sink_grad(const BwdProblem& bp, cudaStream_t stream);

}  // namespace hfa
