// The torch binding: torch tensors -> hfa::TensorView, then the C++ API. Nothing else lives here:
// validation is the library's (its messages become Python exceptions), dispatch too.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <hfa/hfa.h>

#include <climits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace {

// hfa's dtypes; anything else is rejected here with the argument's name, since hfa::DType cannot
// even express it.
hfa::DType to_hfa_dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return hfa::DType::kBF16;
    case at::kHalf: return hfa::DType::kFP16;
    case at::kFloat: return hfa::DType::kFP32;
    case at::kFloat8_e4m3fn: return hfa::DType::kE4M3;
    case at::kInt: return hfa::DType::kI32;
    default:
      throw std::invalid_argument(std::string(name) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
                                  " is not supported; use bfloat16, float16 or float8_e4m3fn (int32 for decode's indices)");
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
    if (w < INT32_MIN || w > INT32_MAX)
      throw std::invalid_argument("window_size: " + std::to_string(w) + " does not fit int32");
  args->window_left = static_cast<int>(window_left);
  args->window_right = static_cast<int>(window_right);
  args->softcap = static_cast<float>(softcap);
  if (sinks) args->sinks = to_view(*sinks, "sinks", device);
}

// A variable-length batch's arguments (ForwardArgs / BackwardArgs::cu_seqlens_q ...), as the
// *_varlen entry points take them; the dense ones pass none.
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
    if (value < 0 || value > INT32_MAX)
      throw std::invalid_argument(std::string(name) + ": " + std::to_string(value) + "; must be in [0, 2^31)");
  args->max_seqlen_q = static_cast<int>(varlen->max_seqlen_q);
  args->max_seqlen_k = static_cast<int>(varlen->max_seqlen_k);
  if (varlen->seqused_k) args->seqused_k = to_view(*varlen->seqused_k, "seqused_k", device);
}

// The forward of every op: out (and lse, if given) written in place, a variable-length batch's
// arguments when given.
void run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                 const std::optional<at::Tensor>& lse, bool causal, std::optional<double> softmax_scale,
                 const std::string& kernel, const std::optional<at::Tensor>& q_descale,
                 const std::optional<at::Tensor>& k_descale, const std::optional<at::Tensor>& v_descale,
                 const std::optional<at::Tensor>& q_block_descale,
                 const std::optional<at::Tensor>& k_block_descale, int64_t window_left,
                 int64_t window_right, double softcap, const std::optional<at::Tensor>& sinks,
                 const VarlenTensors* varlen) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::ForwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, softmax_scale, kernel, window_left, window_right,
                     softcap, sinks, device);
  if (lse) args.lse = to_view(*lse, "lse", device);
  if (q_descale) args.q_descale = to_view(*q_descale, "q_descale", device);
  if (k_descale) args.k_descale = to_view(*k_descale, "k_descale", device);
  if (v_descale) args.v_descale = to_view(*v_descale, "v_descale", device);
  if (q_block_descale) args.q_block_descale = to_view(*q_block_descale, "q_block_descale", device);
  if (k_block_descale) args.k_block_descale = to_view(*k_block_descale, "k_block_descale", device);
  set_varlen_args(&args, varlen, device);
  throw_if_error(hfa::forward(args, c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

// Writes out (and lse, if given) in place; the Python custom op allocates them. The descales:
// fp32 (batch, heads_kv), or the block descales (ForwardArgs), with float8_e4m3fn q/k/v only.
void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
             std::optional<at::Tensor> lse, bool causal, std::optional<double> softmax_scale,
             const std::string& kernel, std::optional<at::Tensor> q_descale,
             std::optional<at::Tensor> k_descale, std::optional<at::Tensor> v_descale,
             std::optional<at::Tensor> q_block_descale, std::optional<at::Tensor> k_block_descale,
             int64_t window_left, int64_t window_right, double softcap,
             std::optional<at::Tensor> sinks) {
  run_forward(q, k, v, out, lse, causal, softmax_scale, kernel, q_descale, k_descale, v_descale,
              q_block_descale, k_block_descale, window_left, window_right, softcap, sinks, nullptr);
}

// A variable-length batch's forward (ForwardArgs::cu_seqlens_q ...): packed (total, heads,
// head_dim) q, k, v, out and lse (heads_q, total_q), written in place like forward().
void forward_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                    std::optional<at::Tensor> lse, const at::Tensor& cu_seqlens_q,
                    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                    std::optional<at::Tensor> seqused_k, bool causal,
                    std::optional<double> softmax_scale, const std::string& kernel,
                    int64_t window_left, int64_t window_right, double softcap,
                    std::optional<at::Tensor> sinks) {
  const VarlenTensors varlen{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k};
  run_forward(q, k, v, out, lse, causal, softmax_scale, kernel, std::nullopt, std::nullopt,
              std::nullopt, std::nullopt, std::nullopt, window_left, window_right, softcap, sinks,
              &varlen);
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

// The backward of every op: dq, dk, dv (and dsinks, if given) written in place, a
// variable-length batch's arguments when given.
void run_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                  const at::Tensor& dout, const at::Tensor& lse, at::Tensor& dq, at::Tensor& dk,
                  at::Tensor& dv, bool causal, std::optional<double> softmax_scale,
                  const std::string& kernel, bool deterministic, int64_t window_left,
                  int64_t window_right, double softcap, const std::optional<at::Tensor>& sinks,
                  const std::optional<at::Tensor>& dsinks, const VarlenTensors* varlen) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::BackwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, softmax_scale, kernel, window_left, window_right,
                     softcap, sinks, device);
  if (dsinks) args.dsinks = to_view(*dsinks, "dsinks", device);
  args.dout = to_view(dout, "dout", device);
  args.lse = to_view(lse, "lse", device);
  args.dq = to_view(dq, "dq", device);
  args.dk = to_view(dk, "dk", device);
  args.dv = to_view(dv, "dv", device);
  args.deterministic = deterministic;
  set_varlen_args(&args, varlen, device);
  throw_if_error(hfa::backward(args, c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

// Writes dq, dk, dv (and dsinks, if given) in place; the Python custom op allocates them.
void backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
              const at::Tensor& dout, const at::Tensor& lse, at::Tensor& dq, at::Tensor& dk,
              at::Tensor& dv, bool causal, std::optional<double> softmax_scale,
              const std::string& kernel, bool deterministic, int64_t window_left,
              int64_t window_right, double softcap, std::optional<at::Tensor> sinks,
              std::optional<at::Tensor> dsinks) {
  run_backward(q, k, v, out, dout, lse, dq, dk, dv, causal, softmax_scale, kernel, deterministic,
               window_left, window_right, softcap, sinks, dsinks, nullptr);
}

// A variable-length batch's backward: packed tensors (forward_varlen), gradients in place.
void backward_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& out, const at::Tensor& dout, const at::Tensor& lse,
                     at::Tensor& dq, at::Tensor& dk, at::Tensor& dv, const at::Tensor& cu_seqlens_q,
                     const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                     std::optional<at::Tensor> seqused_k, bool causal,
                     std::optional<double> softmax_scale, const std::string& kernel,
                     bool deterministic, int64_t window_left, int64_t window_right, double softcap,
                     std::optional<at::Tensor> sinks, std::optional<at::Tensor> dsinks) {
  const VarlenTensors varlen{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k};
  run_backward(q, k, v, out, dout, lse, dq, dk, dv, causal, softmax_scale, kernel, deterministic,
               window_left, window_right, softcap, sinks, dsinks, &varlen);
}

// hfa::decode's arguments from the Python op's tensors.
hfa::DecodeArgs decode_args(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const std::optional<at::Tensor>& k, const std::optional<at::Tensor>& v,
                            const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& page_table,
                            const std::optional<at::Tensor>& cache_batch_idx, const at::Tensor& out,
                            const std::optional<at::Tensor>& lse, bool causal,
                            std::optional<double> softmax_scale, int64_t num_splits,
                            const std::optional<at::Tensor>& k_descale,
                            const std::optional<at::Tensor>& v_descale, const at::Device& device) {
  hfa::DecodeArgs args;
  args.q = to_view(q, "q", device);
  args.k_cache = to_view(k_cache, "k_cache", device);
  args.v_cache = to_view(v_cache, "v_cache", device);
  if (k) args.k_new = to_view(*k, "k", device);
  if (v) args.v_new = to_view(*v, "v", device);
  args.cache_seqlens = to_view(cache_seqlens, "cache_seqlens", device);
  if (page_table) args.page_table = to_view(*page_table, "page_table", device);
  if (cache_batch_idx) args.cache_batch_idx = to_view(*cache_batch_idx, "cache_batch_idx", device);
  args.out = to_view(out, "out", device);
  if (lse) args.lse = to_view(*lse, "lse", device);
  if (k_descale) args.k_descale = to_view(*k_descale, "k_descale", device);
  if (v_descale) args.v_descale = to_view(*v_descale, "v_descale", device);
  args.causal = causal;
  if (softmax_scale) args.softmax_scale = static_cast<float>(*softmax_scale);
  args.num_splits = static_cast<int>(num_splits);
  return args;
}

// The plan for these shapes: (num_splits, workspace bytes).
std::tuple<int64_t, int64_t> plan_decode(const at::Tensor& q, const at::Tensor& k_cache,
                                         const at::Tensor& v_cache, std::optional<at::Tensor> k,
                                         std::optional<at::Tensor> v, const at::Tensor& cache_seqlens,
                                         std::optional<at::Tensor> page_table,
                                         std::optional<at::Tensor> cache_batch_idx, bool causal,
                                         int64_t num_splits, std::optional<at::Tensor> k_descale,
                                         std::optional<at::Tensor> v_descale) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  const at::Tensor out = at::empty_like(q);
  hfa::DecodePlan plan;
  throw_if_error(hfa::plan_decode(decode_args(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                              cache_batch_idx, out, std::nullopt, causal,
                                              std::nullopt, num_splits, k_descale, v_descale, device),
                                  &plan));
  return {plan.num_splits, static_cast<int64_t>(plan.workspace_bytes)};
}

// hfa::decode into preallocated out and lse (the Python op allocates them, and the workspace:
// uint8, at least the plan's bytes, through torch's caching allocator so graphs can capture it).
// num_splits is the plan's (>= 1).
void decode(const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache,
            std::optional<at::Tensor> k, std::optional<at::Tensor> v, const at::Tensor& cache_seqlens,
            std::optional<at::Tensor> page_table, std::optional<at::Tensor> cache_batch_idx,
            at::Tensor& out, at::Tensor& lse, bool causal, std::optional<double> softmax_scale,
            int64_t num_splits, at::Tensor& workspace, std::optional<at::Tensor> k_descale,
            std::optional<at::Tensor> v_descale) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  const hfa::DecodeArgs args = decode_args(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                           cache_batch_idx, out, lse, causal, softmax_scale,
                                           num_splits, k_descale, v_descale, device);
  // The plan is rebuilt from the shapes (host only); what the caller planned fixed num_splits.
  hfa::DecodePlan plan;
  throw_if_error(hfa::plan_decode(args, &plan));
  throw_if_error(hfa::decode(args, plan, workspace.numel() ? workspace.data_ptr() : nullptr,
                             static_cast<size_t>(workspace.numel()),
                             c10::cuda::getCurrentCUDAStream(device.index()).stream()));
}

std::string select_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          at::Tensor& out, bool causal) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  hfa::ForwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, std::nullopt, "auto", -1, -1, 0.0, std::nullopt,
                     device);
  std::string name;
  throw_if_error(hfa::select_kernel(args, &name));
  return name;
}

pybind11::list kernel_list(const std::vector<hfa::KernelInfo>& kernels) {
  pybind11::list out;
  for (const hfa::KernelInfo& k : kernels) {
    pybind11::dict d;
    d["name"] = k.name;
    d["description"] = k.description;
    d["supports"] = k.supports;
    d["fp8"] = k.fp8;
    d["fp8_block_scales"] = k.fp8_block_scales;
    d["window"] = k.window;
    d["softcap"] = k.softcap;
    d["sinks"] = k.sinks;
    d["varlen"] = k.varlen;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "hfa: exact attention for NVIDIA GPUs (the C++ library's thin torch binding)";
  m.def("forward", &forward, "attention forward into preallocated out (and lse)");
  m.def("forward_varlen", &forward_varlen, "variable-length batch forward into preallocated out (and lse)");
  m.def("backward", &backward, "attention backward into preallocated dq, dk, dv");
  m.def("backward_varlen", &backward_varlen, "variable-length batch backward into preallocated dq, dk, dv");
  m.def("quantize_fp8", &quantize_fp8, "bf16/fp16 q, k, v -> e4m3 and descales, in place");
  m.def("plan_decode", &plan_decode, "decode's (num_splits, workspace bytes) for these shapes");
  m.def("decode", &decode, "flash decode against a KV cache into preallocated out and lse");
  m.def("select_kernel", &select_kernel, "the kernel 'auto' runs for these arguments");
  m.def("list_kernels", [] { return kernel_list(hfa::list_kernels()); }, "every kernel of the library");
  m.def("list_backward_kernels", [] { return kernel_list(hfa::list_backward_kernels()); },
        "every backward kernel of the library");
}
