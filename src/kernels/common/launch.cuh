// Launching a kernel with a large dynamic shared-memory allocation: above 48 KB the kernel's limit
// must be raised first, then the launch's own error checked. Optionally in thread-block clusters.
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

// The same in thread-block clusters of `cluster` CTAs (each grid dimension a multiple of the
// cluster's).
template <class... Params, class... Args>
cudaError_t launch_clusters_with_smem(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block,
                                      size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes));
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster.x;
  attribute[0].val.clusterDim.y = cluster.y;
  attribute[0].val.clusterDim.z = cluster.z;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace hfa
