// From a problem's runtime dtype and head_dim to a kernel family's compiled instantiation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/problem.h"
#include "hfa_build_config.h"

namespace hfa {

// Returns Launcher::run<T, D>(p, stream) for the problem's dtype (bf16/fp16) and head_dim among
// the head dims this build instantiated (cudaErrorInvalidValue for any other: the kernel's check
// has rejected it before).
template <class Launcher>
cudaError_t dispatch_dtype_head_dim(const FwdProblem& p, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
#define HFA_DISPATCH_CASE(D)                                                      \
  if (p.head_dim == D)                                                            \
    err = bf16 ? Launcher::template run<__nv_bfloat16, D>(p, stream)              \
               : Launcher::template run<__half, D>(p, stream);
  HFA_FOR_EACH_HEAD_DIM(HFA_DISPATCH_CASE)
#undef HFA_DISPATCH_CASE
  return err;
}

}  // namespace hfa
