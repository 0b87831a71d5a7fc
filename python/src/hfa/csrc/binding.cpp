// The torch binding: torch tensors -> hfa::TensorView, then the C++ API. Nothing else lives here:
// validation is the library's (its messages become Python exceptions), dispatch too.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <hfa/hfa.h>

#include <optional>
#include <stdexcept>
#include <string>

namespace {

// hfa's dtypes; anything else is rejected here with the argument's name, since hfa::DType cannot
// even express it.
hfa::DType to_hfa_dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return hfa::DType::kBF16;
    case at::kHalf: return hfa::DType::kFP16;
    case at::kFloat: return hfa::DType::kFP32;
    case at::kFloat8_e4m3fn: return hfa::DType::kE4M3;
    default:
      throw std::invalid_argument(std::string(name) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
                                  " is not supported; use bfloat16, float16 or float8_e4m3fn");
  }
}

hfa::TensorView to_view(const at::Tensor& t, const char* name, const at::Device& device) {
  if (!t.is_cuda() || t.device() != device)
    throw std::invalid_argument(std::string(name) + ": tensor is on " + t.device().str() +
                                "; hfa needs CUDA tensors, all on q's device (" + device.str() + ")");
  if (t.dim() > hfa::kMaxRank)
    throw std::invalid_argument(std::string(name) + ": expected at most 4 dimensions, got " +
                                std::to_string(t.dim()));
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

void throw_if_error(const hfa::Status& st) {
  if (st.ok()) return;
  if (st.code == hfa::StatusCode::kInvalidArgument || st.code == hfa::StatusCode::kUnsupported)
    throw std::invalid_argument(st.message);  // ValueError in Python
  throw std::runtime_error(std::string(hfa::to_string(st.code)) + ": " + st.message);
}

// q's device, which every tensor must be on; the caller holds a CUDAGuard for it.
at::Device cuda_device_of(const at::Tensor& q) {
  if (!q.is_cuda())
    throw std::invalid_argument("q: tensor is on " + q.device().str() + "; hfa needs CUDA tensors");
  return q.device();
}

// What ForwardArgs and BackwardArgs share: q, k, v, out, the mask, the scale and the kernel.
template <class Args>
void set_common_args(Args* args, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& out, bool causal, std::optional<double> softmax_scale,
                     const std::string& kernel, const at::Device& device) {
  args->q = to_view(q, "q", device);
  args->k = to_view(k, "k", device);
  args->v = to_view(v, "v", device);
  args->out = to_view(out, "out", device);
  args->causal = causal;
  if (softmax_scale) args->softmax_scale = static_cast<float>(*softmax_scale);
  args->kernel = kernel;
}

// Writes out (and lse, if given) in place; the Python custom op allocates them. The descales:
// fp32 (batch, heads_kv), or the block descales (ForwardArgs), with float8_e4m3fn q/k/v only.
void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
             std::optional<at::Tensor> lse, bool causal, std::optional<double> softmax_scale,
             const std::string& kernel, std::optional<at::Tensor> q_descale,
             std::optional<at::Tensor> k_descale, std::optional<at::Tensor> v_descale,
             std::optional<at::Tensor> q_block_descale, std::optional<at::Tensor> k_block_descale) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::ForwardArgs args;
  set_common_args(&args, q, k, v, out, causal, softmax_scale, kernel, device);
  if (lse) args.lse = to_view(*lse, "lse", device);
  if (q_descale) args.q_descale = to_view(*q_descale, "q_descale", device);
  if (k_descale) args.k_descale = to_view(*k_descale, "k_descale", device);
  if (v_descale) args.v_descale = to_view(*v_descale, "v_descale", device);
  if (q_block_descale) args.q_block_descale = to_view(*q_block_descale, "q_block_descale", device);
  if (k_block_descale) args.k_block_descale = to_view(*k_block_descale, "k_block_descale", device);
  throw_if_error(hfa::forward(args, c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

// hfa::quantize_fp8 into preallocated e4m3 tensors and fp32 descales (the Python op allocates).
void quantize_fp8(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& q_out,
                  at::Tensor& k_out, at::Tensor& v_out, at::Tensor& q_descale, at::Tensor& k_descale,
                  at::Tensor& v_descale, bool block, bool hadamard, int64_t hadamard_seed,
                  bool subtract_mean_key) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::QuantizeFp8Args args;
  args.q = to_view(q, "q", device);
  args.k = to_view(k, "k", device);
  args.v = to_view(v, "v", device);
  args.q_out = to_view(q_out, "q_out", device);
  args.k_out = to_view(k_out, "k_out", device);
  args.v_out = to_view(v_out, "v_out", device);
  args.q_descale = to_view(q_descale, "q_descale", device);
  args.k_descale = to_view(k_descale, "k_descale", device);
  args.v_descale = to_view(v_descale, "v_descale", device);
  args.block = block;
  args.hadamard = hadamard;
  args.hadamard_seed = static_cast<uint64_t>(hadamard_seed);
  args.subtract_mean_key = subtract_mean_key;
  throw_if_error(hfa::quantize_fp8(args, c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

// Writes dq, dk, dv in place; the Python custom op allocates them.
void backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
              const at::Tensor& dout, const at::Tensor& lse, at::Tensor& dq, at::Tensor& dk,
              at::Tensor& dv, bool causal, std::optional<double> softmax_scale,
              const std::string& kernel) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::BackwardArgs args;
  set_common_args(&args, q, k, v, out, causal, softmax_scale, kernel, device);
  args.dout = to_view(dout, "dout", device);
  args.lse = to_view(lse, "lse", device);
  args.dq = to_view(dq, "dq", device);
  args.dk = to_view(dk, "dk", device);
  args.dv = to_view(dv, "dv", device);
  throw_if_error(hfa::backward(args, c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

std::string select_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          at::Tensor& out, bool causal) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::ForwardArgs args;
  set_common_args(&args, q, k, v, out, causal, std::nullopt, "auto", device);
  std::string name;
  throw_if_error(hfa::select_kernel(args, &name));
  return name;
}

pybind11::list list_kernels() {
  pybind11::list out;
  for (const hfa::KernelInfo& k : hfa::list_kernels()) {
    pybind11::dict d;
    d["name"] = k.name;
    d["description"] = k.description;
    d["supports"] = k.supports;
    d["fp8"] = k.fp8;
    d["fp8_block_scales"] = k.fp8_block_scales;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "hfa: exact attention for NVIDIA GPUs (the C++ library's thin torch binding)";
  m.def("forward", &forward, "attention forward into preallocated out (and lse)");
  m.def("backward", &backward, "attention backward into preallocated dq, dk, dv");
  m.def("quantize_fp8", &quantize_fp8, "bf16/fp16 q, k, v -> e4m3 and descales, in place");
  m.def("select_kernel", &select_kernel, "the kernel 'auto' runs for these arguments");
  m.def("list_kernels", &list_kernels, "every kernel of the library");
}
