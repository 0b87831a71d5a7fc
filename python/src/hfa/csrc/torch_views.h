// torch tensors -> hfa's C++ API arguments, shared by the op implementations (ops_*.cpp).
// Nothing else lives here: validation is the library's (its messages become Python exceptions,
// ValueError for bad arguments), dispatch too.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <hfa/hfa.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace hfa_torch {

// hfa's dtypes; anything else is rejected here with the argument's name, since hfa::DType cannot
// even express it.
inline hfa::DType to_hfa_dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return hfa::DType::kBF16;
    case at::kHalf: return hfa::DType::kFP16;
    case at::kFloat: return hfa::DType::kFP32;
    case at::kFloat8_e4m3fn: return hfa::DType::kE4M3;
    case at::kInt: return hfa::DType::kI32;
    default:
      TORCH_CHECK_VALUE(false, name, ": dtype ", c10::toString(t.scalar_type()),
                        " is not supported; use bfloat16, float16 or float8_e4m3fn (int32 for "
                        "decode's indices)");
  }
}

inline hfa::TensorView to_view(const at::Tensor& t, const char* name, const at::Device& device) {
  TORCH_CHECK_VALUE(t.is_cuda() && t.device() == device, name, ": tensor is on ", t.device().str(),
                    "; hfa needs CUDA tensors, all on q's device (", device.str(), ")");
  TORCH_CHECK_VALUE(t.dim() <= hfa::kMaxRank, name, ": expected at most ", hfa::kMaxRank, " dimensions, got ", t.dim());
  hfa::TensorView v;
  v.data = t.data_ptr();
  v.dtype = to_hfa_dtype(t, name);
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  return v;
}

// The library's invalid-argument and unsupported statuses are ValueError in Python (c10::ValueError),
// anything else RuntimeError.
inline void throw_if_error(const hfa::Status& st) {
  if (st.ok()) return;
  TORCH_CHECK_VALUE(st.code != hfa::StatusCode::kInvalidArgument && st.code != hfa::StatusCode::kUnsupported,
                    st.message);
  TORCH_CHECK(false, hfa::to_string(st.code), ": ", st.message);
}

// q's device, which every tensor must be on; the caller holds a CUDAGuard for it.
inline at::Device cuda_device_of(const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), "q: tensor is on ", q.device().str(), "; hfa needs CUDA tensors");
  return q.device();
}

// A new contiguous tensor on a CUDA device, straight from the caching allocator: at::empty would
// take a round trip through the dispatcher, host time that every call of an op pays.
inline at::Tensor new_cuda_tensor(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& device) {
  return at::Tensor(at::detail::empty_cuda(sizes, dtype, device, std::nullopt));
}

inline cudaStream_t current_stream(const at::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

// What ForwardArgs and BackwardArgs share: q, k, v, out, the mask, the scale, the kernel and the
// score variants (sliding window, softcap, sinks).
template <class Args>
void set_attention_args(Args* args, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& out, bool causal, std::optional<double> softmax_scale,
                        const std::string& kernel, int64_t window_left, int64_t window_right,
                        double softcap, const std::optional<at::Tensor>& sinks,
                        const at::Device& device) {
  args->q = to_view(q, "q", device);
  args->k = to_view(k, "k", device);
  args->v = to_view(v, "v", device);
  args->out = to_view(out, "out", device);
  args->causal = causal;
  if (softmax_scale) args->softmax_scale = static_cast<float>(*softmax_scale);
  args->kernel = kernel;
  for (int64_t w : {window_left, window_right})
    TORCH_CHECK_VALUE(w >= INT32_MIN && w <= INT32_MAX, "window_size: ", w, " does not fit int32");
  args->window_left = static_cast<int>(window_left);
  args->window_right = static_cast<int>(window_right);
  args->softcap = static_cast<float>(softcap);
  if (sinks) args->sinks = to_view(*sinks, "sinks", device);
}

// A variable-length batch's arguments (ForwardArgs / BackwardArgs::cu_seqlens_q ...); the dense
// ops pass none.
struct VarlenTensors {
  const at::Tensor& cu_seqlens_q;
  const at::Tensor& cu_seqlens_k;
  int64_t max_seqlen_q, max_seqlen_k;
  const std::optional<at::Tensor>& seqused_k;
};

template <class Args>
void set_varlen_args(Args* args, const VarlenTensors* varlen, const at::Device& device) {
  if (!varlen) return;
  args->cu_seqlens_q = to_view(varlen->cu_seqlens_q, "cu_seqlens_q", device);
  args->cu_seqlens_k = to_view(varlen->cu_seqlens_k, "cu_seqlens_k", device);
  for (const auto& [value, name] : {std::pair{varlen->max_seqlen_q, "max_seqlen_q"},
                                    std::pair{varlen->max_seqlen_k, "max_seqlen_k"}})
    TORCH_CHECK_VALUE(value >= 0 && value <= INT32_MAX, name, ": ", value, "; must be in [0, 2^31)");
  args->max_seqlen_q = static_cast<int>(varlen->max_seqlen_q);
  args->max_seqlen_k = static_cast<int>(varlen->max_seqlen_k);
  if (varlen->seqused_k) args->seqused_k = to_view(*varlen->seqused_k, "seqused_k", device);
}

}  // namespace hfa_torch
