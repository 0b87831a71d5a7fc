// Shared by the GPU tests: skip without a GPU, the kernel list, the head dims of this build.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "check/check.h"
#include "hfa/hfa.h"
#include "hfa_build_config.h"

namespace hfa::testing {

inline bool have_gpu() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

#define HFA_SKIP_WITHOUT_GPU() \
  if (!::hfa::testing::have_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine"

inline std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const KernelInfo& k : list_kernels()) names.push_back(k.name);
  return names;
}

inline std::vector<int> compiled_head_dims() { return {HFA_HEAD_DIMS_INIT}; }

// The bytes of device tensors (whole allocations, padding included), one after another: what a
// test compares bit for bit between runs, or with the poison pattern.
inline std::vector<unsigned char> download_bytes(
    std::initializer_list<const check::DeviceBuffers::Tensor*> tensors) {
  std::vector<unsigned char> bytes;
  for (const check::DeviceBuffers::Tensor* t : tensors) {
    const size_t offset = bytes.size();
    bytes.resize(offset + t->alloc_elems * size_of(t->view.dtype));
    EXPECT_EQ(cudaMemcpy(bytes.data() + offset, t->data, bytes.size() - offset,
                         cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return bytes;
}

}  // namespace hfa::testing
