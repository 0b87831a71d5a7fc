// Stream-ordered device memory for the kernels' workspaces (the backward's fp32 dQ accumulator,
// k6's tile counter, the varlen tile plan, quantize_fp8's and decode's scratch), from a memory
// pool of hfa's own per device whose freed memory stays reserved for the next call. (k1, the
// naive kernel, keeps the default pool for its O(seqlen^2) S: a pool would hold gigabytes after it.)
//
// Why not cudaMallocAsync's default pool: its release threshold is 0, so every synchronization
// (a training loop's loss.item()) hands the freed memory back to the driver and the next call maps
// its workspace afresh. Measured on the H100 (2026-11-26, WORKLOG "Workspace memory"): a training
// step's attention (forward + backward, then a synchronize) at d = 128, s = 512 took 1.53 ms with
// the default pool and 0.84 ms with its memory kept (cuDNN 0.96 ms). Changing the default pool's
// threshold would change it for everything else in the process; a pool of our own does not.
// What it holds: at most what the calls in flight at once needed (hfa::workspace_memory_reserved),
// given back on request (hfa::release_workspace_memory).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace hfa {

// cudaMallocAsync / cudaFreeAsync on hfa's pool of the current device (created on first use).
cudaError_t workspace_alloc(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t workspace_free(void* ptr, cudaStream_t stream);

template <typename T>
cudaError_t workspace_alloc(T** ptr, size_t bytes, cudaStream_t stream) {
  return workspace_alloc(reinterpret_cast<void**>(ptr), bytes, stream);
}

}  // namespace hfa
