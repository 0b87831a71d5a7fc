// Host-side views of device tensors for the checkers: copy back, read 2-byte elements as doubles,
// gather any strides into contiguous (batch, seqlen, heads, head_dim) order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "check/check.h"
#include "common/status_util.h"

namespace hfa::check {

inline double element_to_double(DType dtype, const uint16_t bits) {
  if (dtype == DType::kFP16) {
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
  }
  __nv_bfloat16 b;
  std::memcpy(&b, &bits, 2);
  return __bfloat162float(b);
}

template <typename E>
inline Status copy_to_host(const DeviceBuffers::Tensor& t, std::vector<E>* host) {
  host->resize(t.alloc_elems);
  if (t.alloc_elems == 0) return Status::Ok();
  return cuda_status(cudaMemcpy(host->data(), t.data, t.alloc_elems * sizeof(E), cudaMemcpyDeviceToHost),
                     "copying a tensor to the host");
}

inline int64_t offset4(const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3];
}

// Device tensor (any strides) -> contiguous doubles in (batch, seqlen, heads, head_dim) order.
inline std::vector<double> to_contiguous(const TensorView& t, const std::vector<uint16_t>& raw) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  size_t n = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d)
          out[n++] = element_to_double(t.dtype, raw[offset4(t, a, b, c, d)]);
  return out;
}

}  // namespace hfa::check
