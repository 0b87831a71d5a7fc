// Host-side views of device tensors for the checkers: copy back, read 2-byte elements as doubles,
// gather any strides into contiguous (batch, seqlen, heads, head_dim) order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check/check.h"
#include "common/status_util.h"
#include "reference/reference.h"

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

// elem_bytes: bytes per element when E is a byte buffer of another dtype (e4m3, bf16 as bytes).
template <typename E>
inline Status copy_to_host(const DeviceBuffers::Tensor& t, std::vector<E>* host,
                           int elem_bytes = sizeof(E)) {
  host->resize(t.alloc_elems * elem_bytes / sizeof(E));
  if (t.alloc_elems == 0) return Status::Ok();
  return cuda_status(cudaMemcpy(host->data(), t.data, t.alloc_elems * elem_bytes, cudaMemcpyDeviceToHost),
                     "copying a tensor to the host");
}

// A (n)-shaped fp32 device tensor (any stride), e.g. the sinks, as n doubles.
inline Status vector_to_host(const DeviceBuffers::Tensor& t, std::vector<double>* out) {
  std::vector<float> raw;
  HFA_RETURN_IF_ERROR(copy_to_host(t, &raw));
  out->resize(t.view.shape[0]);
  for (int64_t i = 0; i < t.view.shape[0]; ++i) (*out)[i] = raw[i * t.view.stride[0]];
  return Status::Ok();
}

// The reference's description of a configuration; sinks: the sinks' values when c.sinks (they
// must outlive the shape).
inline reference::Shape reference_shape(const Config& c, const std::vector<double>& sinks) {
  reference::Shape s;
  s.batch = c.batch; s.seqlen_q = c.seqlen_q; s.seqlen_k = c.seqlen_k;
  s.heads_q = c.heads_q; s.heads_kv = c.heads_kv; s.head_dim = c.head_dim;
  // The fp32 scale the kernels get (the same expression as the API's default).
  s.scale = c.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  s.causal = c.causal;
  s.window_left = c.window_left;
  s.window_right = c.window_right;
  s.softcap = c.softcap;
  s.sinks = c.sinks ? sinks.data() : nullptr;
  return s;
}

inline int64_t offset4(const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3];
}

// A whole device tensor's bytes, and element i of them as a double (any dtype but fp32).
inline Status download(const DeviceBuffers::Tensor& t, std::vector<uint8_t>* bytes) {
  return copy_to_host(t, bytes, size_of(t.view.dtype));
}
inline double element_at(DType dtype, const std::vector<uint8_t>& bytes, int64_t i) {
  if (dtype == DType::kE4M3) return reference::e4m3_to_double(bytes[i]);
  uint16_t bits;
  std::memcpy(&bits, bytes.data() + 2 * i, 2);
  return element_to_double(dtype, bits);
}

// Device tensor (any strides) -> contiguous doubles in (batch, seqlen, heads, head_dim) order.
inline std::vector<double> to_contiguous(const TensorView& t, const std::vector<uint8_t>& raw) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  size_t n = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d)
          out[n++] = element_at(t.dtype, raw, offset4(t, a, b, c, d));
  return out;
}

// e4m3 inputs: the contiguous (batch, seqlen, heads, head_dim) values times their descale: fp32
// (batch, heads_kv) on the device, `group` query heads sharing a KV head's (1 for K and V); or
// fp32 (batch, heads, ceil(seqlen / 128)) block descales (rank 3; group unused).
inline Status dequantize(std::vector<double>* values, const TensorView& t,
                         const DeviceBuffers::Tensor& descale, int group) {
  std::vector<float> host;
  HFA_RETURN_IF_ERROR(copy_to_host(descale, &host));
  const int64_t seqlen = t.shape[1], heads = t.shape[2], d = t.shape[3];
  const bool block = descale.view.rank == 3;
  const int64_t heads_kv = descale.view.shape[1], blocks = block ? descale.view.shape[2] : 1;
  for (int64_t i = 0; i < static_cast<int64_t>(values->size()); ++i) {
    const int64_t b = i / (seqlen * heads * d), s = (i / (heads * d)) % seqlen, h = (i / d) % heads;
    (*values)[i] *= block ? host[(b * heads + h) * blocks + s / kFp8ScaleBlock]
                          : host[b * heads_kv + h / group];
  }
  return Status::Ok();
}

// The same from 2-byte elements as copy_to_host<uint16_t> gives them.
inline std::vector<double> to_contiguous(const TensorView& t, const std::vector<uint16_t>& raw) {
  std::vector<uint8_t> bytes(raw.size() * 2);
  if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), bytes.size());
  return to_contiguous(t, bytes);
}

}  // namespace hfa::check
