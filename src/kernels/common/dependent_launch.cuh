// Programmatic dependent launch (sm90 and newer; no-ops before): a kernel lets its stream's next
// kernel (launched with cudaLaunchAttributeProgrammaticStreamSerialization) become resident before
// it finishes, and that dependent waits for the whole prerequisite grid and its memory before
// reading what it wrote. This hides the dependent's launch latency (flash decode's split kernel
// and the merge of its partial results: at batch 1 a noticeable part of a 10-30 us step).
#pragma once

namespace hfa {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Returns at once in a kernel that was not launched as a dependent.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace hfa
