// From a problem's runtime dtype and head_dim to a kernel family's compiled instantiation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"
#include "common/status_util.h"
#include "hfa_build_config.h"
#include "registry.h"

namespace hfa {

// Returns Launcher::run<T, D>(problem, stream) for `dtype` (bf16/fp16) and `head_dim` among the
// head dims this build instantiated (cudaErrorInvalidValue for any other: the kernel's check has
// rejected it before). Problem is FwdProblem or BwdProblem.
template <class Launcher, class Problem>
cudaError_t dispatch_dtype_head_dim(const Problem& problem, DType dtype, int head_dim,
                                    cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  const bool bf16 = dtype == DType::kBF16;
#define HFA_DISPATCH_CASE(D)                                                      \
  if (head_dim == D)                                                              \
    err = bf16 ? Launcher::template run<__nv_bfloat16, D>(problem, stream)        \
               : Launcher::template run<__half, D>(problem, stream);
  HFA_FOR_EACH_HEAD_DIM(HFA_DISPATCH_CASE)
#undef HFA_DISPATCH_CASE
  return err;
}

// T is the output's element type: the inputs' too, except for e4m3 inputs (k7), whose kernels
// know their input type.
template <class Launcher>
cudaError_t dispatch_dtype_head_dim(const FwdProblem& p, cudaStream_t stream) {
  return dispatch_dtype_head_dim<Launcher>(p, p.out_dtype, p.head_dim, stream);
}

// The registry entry of a kernel family. Family provides what differs between kernels:
//   static constexpr const char* kName;
//   static Status check(const FwdProblem&, const DeviceInfo&);        // support rules
//   template <typename T, int D> static cudaError_t run(const FwdProblem&, cudaStream_t);
// and the launch is the same for all: dispatch on (dtype, head_dim), report CUDA errors by name.
template <class Family>
KernelEntry make_entry(const char* description, const char* supports, int auto_priority,
                       bool fp8 = false, bool fp8_block_scales = false) {
  KernelEntry e;
  e.fp8 = fp8;
  e.fp8_block_scales = fp8_block_scales;
  e.name = Family::kName;
  e.description = description;
  e.supports = supports;
  e.auto_priority = auto_priority;
  e.check = Family::check;
  e.launch = [](const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
    const std::string what = std::string("launching ") + Family::kName;
    return cuda_status(dispatch_dtype_head_dim<Family>(p, stream), what.c_str());
  };
  return e;
}

}  // namespace hfa
