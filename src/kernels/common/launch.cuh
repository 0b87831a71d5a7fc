// Launching a kernel with a large dynamic shared-memory allocation: above 48 KB the kernel's limit
// must be raised first, then the launch's own error checked.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace hfa {

template <class... Params, class... Args>
cudaError_t launch_with_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                             cudaStream_t stream, Args&&... args) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes));
  if (err != cudaSuccess) return err;
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

}  // namespace hfa
