// The attention ops (schemas in ops_library.cpp): hfa::attention_fwd / attention_bwd (dense) and
// hfa::attention_varlen_fwd / attention_varlen_bwd (packed variable-length batches).
//
// Each forward has a CUDA kernel (allocates out and lse, calls hfa::forward) and an Autograd
// kernel (a torch::autograd::Function whose backward calls the *_bwd op through the dispatcher,
// so torch.compile traces it as an op). All of it is C++: an eager call pays the dispatcher and
// the library's host work, no Python. CPU tensors reach the same kernels (registered for CPU too)
// and get hfa's error naming the argument, not the dispatcher's "no kernel for CPU".
#include <torch/autograd.h>
#include <torch/library.h>

#include "torch_views.h"

#include <string>
#include <tuple>

namespace hfa_torch {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- The op signatures (as the schemas in ops_library.cpp declare them) ------------------------
using AttentionFwdSig = std::tuple<Tensor, Tensor>(
    const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, const OptTensor& q_descale, const OptTensor& k_descale,
    const OptTensor& v_descale, std::optional<at::ScalarType> out_dtype,
    const OptTensor& q_block_descale, const OptTensor& k_block_descale, bool deterministic,
    c10::string_view backward_kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks);
using AttentionBwdSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
    const Tensor& lse, bool causal, std::optional<double> softmax_scale, bool deterministic,
    c10::string_view backward_kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, std::optional<at::ScalarType> grad_dtype);
using VarlenFwdSig = std::tuple<Tensor, Tensor>(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
    const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const OptTensor& seqused_k, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, bool deterministic, c10::string_view backward_kernel);
using VarlenBwdSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
    const Tensor& lse, const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, const OptTensor& seqused_k, bool causal,
    std::optional<double> softmax_scale, bool deterministic, c10::string_view backward_kernel,
    int64_t window_left, int64_t window_right, double softcap, const OptTensor& sinks,
    std::optional<at::ScalarType> grad_dtype);

template <class Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// ---- The library calls -------------------------------------------------------------------------
// The forward of every op: out and lse written in place, a variable-length batch's arguments when
// given, the fp8 descales when given.
struct Fp8Descales {
  const OptTensor& q_descale;
  const OptTensor& k_descale;
  const OptTensor& v_descale;
  const OptTensor& q_block_descale;
  const OptTensor& k_block_descale;
};

// The caller holds a CUDAGuard for q's device (it allocated out and lse there).
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, bool causal, std::optional<double> softmax_scale,
                 c10::string_view kernel, int64_t window_left, int64_t window_right, double softcap,
                 const OptTensor& sinks, const Fp8Descales* fp8, const VarlenTensors* varlen) {
  const at::Device device = q.device();
  hfa::ForwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, softmax_scale, std::string(kernel), window_left,
                     window_right, softcap, sinks, device);
  args.lse = to_view(lse, "lse", device);
  if (fp8) {
    if (fp8->q_descale) args.q_descale = to_view(*fp8->q_descale, "q_descale", device);
    if (fp8->k_descale) args.k_descale = to_view(*fp8->k_descale, "k_descale", device);
    if (fp8->v_descale) args.v_descale = to_view(*fp8->v_descale, "v_descale", device);
    if (fp8->q_block_descale)
      args.q_block_descale = to_view(*fp8->q_block_descale, "q_block_descale", device);
    if (fp8->k_block_descale)
      args.k_block_descale = to_view(*fp8->k_block_descale, "k_block_descale", device);
  }
  set_varlen_args(&args, varlen, device);
  throw_if_error(hfa::forward(args, current_stream(device)));
}

// The backward of every op: dq, dk, dv (in q's dtype, or float32 if grad_dtype says so: the
// kernels' fp32 sums unrounded) and dsinks allocated and written (dsinks: fp32 like the sinks, or
// an empty tensor without sinks).
std::tuple<Tensor, Tensor, Tensor, Tensor> run_backward(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout_any,
    const Tensor& lse, bool causal, std::optional<double> softmax_scale, c10::string_view kernel,
    bool deterministic, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, std::optional<at::ScalarType> grad_dtype, const VarlenTensors* varlen) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  TORCH_CHECK_VALUE(!grad_dtype || *grad_dtype == q.scalar_type() || *grad_dtype == at::kFloat,
                    "grad_dtype: ", *grad_dtype, "; the gradients are in q's dtype (",
                    q.scalar_type(), ") or float32");
  const at::ScalarType gd = grad_dtype.value_or(q.scalar_type());
  Tensor dq = at::empty_like(q, q.options().dtype(gd)), dk = at::empty_like(k, k.options().dtype(gd)),
         dv = at::empty_like(v, v.options().dtype(gd));
  Tensor dsinks = sinks ? at::empty_like(*sinks, sinks->options().dtype(at::kFloat))
                        : at::empty({0}, q.options().dtype(at::kFloat));
  // Autograd hands dout in any layout (e.g. expanded, stride 0): the kernel needs head_dim
  // contiguous and 16-byte strides, which a contiguous copy always has.
  const Tensor dout = dout_any.contiguous();
  hfa::BackwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, softmax_scale, std::string(kernel), window_left,
                     window_right, softcap, sinks, device);
  if (sinks) args.dsinks = to_view(dsinks, "dsinks", device);
  args.dout = to_view(dout, "dout", device);
  args.lse = to_view(lse, "lse", device);
  args.dq = to_view(dq, "dq", device);
  args.dk = to_view(dk, "dk", device);
  args.dv = to_view(dv, "dv", device);
  args.deterministic = deterministic;
  set_varlen_args(&args, varlen, device);
  throw_if_error(hfa::backward(args, current_stream(device)));
  return {dq, dk, dv, dsinks};
}

// out has q's dtype, except for float8_e4m3fn inputs: bfloat16 unless out_dtype says float16.
at::ScalarType out_dtype_for(const Tensor& q, std::optional<at::ScalarType> out_dtype) {
  if (q.scalar_type() != at::kFloat8_e4m3fn) {
    TORCH_CHECK_VALUE(!out_dtype || *out_dtype == q.scalar_type(), "out_dtype: ", *out_dtype,
                      " differs from q's ", q.scalar_type(), "; only float8 inputs choose their "
                      "output dtype");
    return q.scalar_type();
  }
  TORCH_CHECK_VALUE(!out_dtype || *out_dtype == at::kBFloat16 || *out_dtype == at::kHalf,
                    "out_dtype: ", *out_dtype, "; with float8_e4m3fn inputs out is bfloat16 or float16");
  return out_dtype.value_or(at::kBFloat16);
}

// ---- CUDA (and CPU, for the error) kernels -----------------------------------------------------
std::tuple<Tensor, Tensor> attention_fwd(
    const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, const OptTensor& q_descale, const OptTensor& k_descale,
    const OptTensor& v_descale, std::optional<at::ScalarType> out_dtype,
    const OptTensor& q_block_descale, const OptTensor& k_block_descale, bool /*deterministic*/,
    c10::string_view /*backward_kernel*/, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks) {
  // deterministic and backward_kernel are the backward's (saved by the Autograd kernel); the
  // forward is deterministic anyway.
  TORCH_CHECK_VALUE(q.dim() == 4, "q: expected rank 4 (batch, seqlen, heads, head_dim), got rank ", q.dim());
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  Tensor out = new_cuda_tensor(q.sizes(), out_dtype_for(q, out_dtype), device);
  Tensor lse = new_cuda_tensor({q.size(0), q.size(2), q.size(1)}, at::kFloat, device);
  const Fp8Descales fp8{q_descale, k_descale, v_descale, q_block_descale, k_block_descale};
  run_forward(q, k, v, out, lse, causal, softmax_scale, kernel, window_left, window_right, softcap,
              sinks, &fp8, nullptr);
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> attention_bwd(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
    const Tensor& lse, bool causal, std::optional<double> softmax_scale, bool deterministic,
    c10::string_view backward_kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, std::optional<at::ScalarType> grad_dtype) {
  return run_backward(q, k, v, out, dout, lse, causal, softmax_scale, backward_kernel,
                      deterministic, window_left, window_right, softcap, sinks, grad_dtype, nullptr);
}

std::tuple<Tensor, Tensor> attention_varlen_fwd(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
    const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const OptTensor& seqused_k, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, bool /*deterministic*/, c10::string_view /*backward_kernel*/) {
  TORCH_CHECK_VALUE(q.dim() == 3, "q: expected rank 3 (total_q, heads_q, head_dim), got rank ", q.dim());
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  Tensor out = new_cuda_tensor(q.sizes(), q.scalar_type(), device);
  Tensor lse = new_cuda_tensor({q.size(1), q.size(0)}, at::kFloat, device);
  const VarlenTensors varlen{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k};
  run_forward(q, k, v, out, lse, causal, softmax_scale, kernel, window_left, window_right, softcap,
              sinks, nullptr, &varlen);
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> attention_varlen_bwd(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
    const Tensor& lse, const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, const OptTensor& seqused_k, bool causal,
    std::optional<double> softmax_scale, bool deterministic, c10::string_view backward_kernel,
    int64_t window_left, int64_t window_right, double softcap, const OptTensor& sinks,
    std::optional<at::ScalarType> grad_dtype) {
  const VarlenTensors varlen{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k};
  return run_backward(q, k, v, out, dout, lse, causal, softmax_scale, backward_kernel,
                      deterministic, window_left, window_right, softcap, sinks, grad_dtype, &varlen);
}

// ---- Autograd ----------------------------------------------------------------------------------
// Gradients flow to q, k, v and sinks; a gradient reaching the returned lse is an error (the
// backward does not take one), not silently dropped.
void refuse_lse_gradient(const variable_list& grads, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(!grads[1].defined(), op, ": gradients through the returned lse are "
                              "not supported; use lse only outside the differentiated graph");
}

bool needs_grad(std::initializer_list<const Tensor*> tensors, const OptTensor& sinks) {
  if (!at::GradMode::is_enabled()) return false;
  for (const Tensor* t : tensors)
    if (t->requires_grad()) return true;
  return sinks && sinks->requires_grad();
}

std::optional<double> optional_double(const at::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<double>(v.toDouble());
}

// What both backward functions save besides tensors.
void save_variant_args(AutogradContext* ctx, bool causal, std::optional<double> softmax_scale,
                       bool deterministic, c10::string_view backward_kernel, int64_t window_left,
                       int64_t window_right, double softcap, bool has_sinks) {
  ctx->saved_data["causal"] = causal;
  ctx->saved_data["softmax_scale"] = softmax_scale;
  ctx->saved_data["deterministic"] = deterministic;
  ctx->saved_data["backward_kernel"] = std::string(backward_kernel);
  ctx->saved_data["window_left"] = window_left;
  ctx->saved_data["window_right"] = window_right;
  ctx->saved_data["softcap"] = softcap;
  ctx->saved_data["has_sinks"] = has_sinks;
  ctx->set_materialize_grads(false);  // an unused lse gets no gradient tensor at all
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static variable_list forward(
      AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
      std::optional<double> softmax_scale, c10::string_view kernel, const OptTensor& q_descale,
      const OptTensor& k_descale, const OptTensor& v_descale, std::optional<at::ScalarType> out_dtype,
      const OptTensor& q_block_descale, const OptTensor& k_block_descale, bool deterministic,
      c10::string_view backward_kernel, int64_t window_left, int64_t window_right, double softcap,
      const OptTensor& sinks) {
    static const auto op = op_handle<AttentionFwdSig>("hfa::attention_fwd");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = op.call(q, k, v, causal, softmax_scale, kernel, q_descale, k_descale, v_descale,
                              out_dtype, q_block_descale, k_block_descale, deterministic,
                              backward_kernel, window_left, window_right, softcap, sinks);
    ctx->save_for_backward({q, k, v, out, lse, sinks.value_or(Tensor())});
    save_variant_args(ctx, causal, softmax_scale, deterministic, backward_kernel, window_left,
                      window_right, softcap, sinks.has_value());
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_lse_gradient(grads, "hfa.attention");
    constexpr size_t kInputs = 18;  // attention_fwd's arguments; sinks is the last
    variable_list result(kInputs);
    if (!grads[0].defined()) return result;
    static const auto op = op_handle<AttentionBwdSig>("hfa::attention_bwd");
    const variable_list saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    const bool has_sinks = d.at("has_sinks").toBool();
    const OptTensor sinks = has_sinks ? OptTensor(saved[5]) : std::nullopt;
    auto [dq, dk, dv, dsinks] =
        op.call(saved[0], saved[1], saved[2], saved[3], grads[0], saved[4], d.at("causal").toBool(),
                optional_double(d.at("softmax_scale")), d.at("deterministic").toBool(),
                d.at("backward_kernel").toStringRef(), d.at("window_left").toInt(),
                d.at("window_right").toInt(), d.at("softcap").toDouble(), sinks, std::nullopt);
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    if (has_sinks) result[kInputs - 1] = dsinks;
    return result;
  }
};

class VarlenAttentionFunction : public torch::autograd::Function<VarlenAttentionFunction> {
 public:
  static variable_list forward(
      AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
      const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int64_t max_seqlen_q,
      int64_t max_seqlen_k, const OptTensor& seqused_k, bool causal,
      std::optional<double> softmax_scale, c10::string_view kernel, int64_t window_left,
      int64_t window_right, double softcap, const OptTensor& sinks, bool deterministic,
      c10::string_view backward_kernel) {
    static const auto op = op_handle<VarlenFwdSig>("hfa::attention_varlen_fwd");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              seqused_k, causal, softmax_scale, kernel, window_left, window_right,
                              softcap, sinks, deterministic, backward_kernel);
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                            seqused_k.value_or(Tensor()), sinks.value_or(Tensor())});
    ctx->saved_data["max_seqlen_q"] = max_seqlen_q;
    ctx->saved_data["max_seqlen_k"] = max_seqlen_k;
    ctx->saved_data["has_seqused_k"] = seqused_k.has_value();
    save_variant_args(ctx, causal, softmax_scale, deterministic, backward_kernel, window_left,
                      window_right, softcap, sinks.has_value());
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_lse_gradient(grads, "hfa.attention_varlen");
    constexpr size_t kInputs = 17;  // attention_varlen_fwd's arguments; sinks is the 15th
    variable_list result(kInputs);
    if (!grads[0].defined()) return result;
    static const auto op = op_handle<VarlenBwdSig>("hfa::attention_varlen_bwd");
    const variable_list saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    const bool has_sinks = d.at("has_sinks").toBool();
    const OptTensor seqused_k = d.at("has_seqused_k").toBool() ? OptTensor(saved[7]) : std::nullopt;
    const OptTensor sinks = has_sinks ? OptTensor(saved[8]) : std::nullopt;
    auto [dq, dk, dv, dsinks] = op.call(
        saved[0], saved[1], saved[2], saved[3], grads[0], saved[4], saved[5], saved[6],
        d.at("max_seqlen_q").toInt(), d.at("max_seqlen_k").toInt(), seqused_k,
        d.at("causal").toBool(), optional_double(d.at("softmax_scale")),
        d.at("deterministic").toBool(), d.at("backward_kernel").toStringRef(),
        d.at("window_left").toInt(), d.at("window_right").toInt(), d.at("softcap").toDouble(), sinks,
        std::nullopt);
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    if (has_sinks) result[14] = dsinks;
    return result;
  }
};

// The Autograd kernels: without a gradient to record, straight to the CUDA kernel.
std::tuple<Tensor, Tensor> attention_fwd_autograd(
    const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, const OptTensor& q_descale, const OptTensor& k_descale,
    const OptTensor& v_descale, std::optional<at::ScalarType> out_dtype,
    const OptTensor& q_block_descale, const OptTensor& k_block_descale, bool deterministic,
    c10::string_view backward_kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks) {
  if (!needs_grad({&q, &k, &v}, sinks)) {
    static const auto op = op_handle<AttentionFwdSig>("hfa::attention_fwd");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(q, k, v, causal, softmax_scale, kernel, q_descale, k_descale, v_descale,
                   out_dtype, q_block_descale, k_block_descale, deterministic, backward_kernel,
                   window_left, window_right, softcap, sinks);
  }
  const variable_list r = AttentionFunction::apply(
      q, k, v, causal, softmax_scale, kernel, q_descale, k_descale, v_descale, out_dtype,
      q_block_descale, k_block_descale, deterministic, backward_kernel, window_left, window_right,
      softcap, sinks);
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> attention_varlen_fwd_autograd(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
    const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const OptTensor& seqused_k, bool causal, std::optional<double> softmax_scale,
    c10::string_view kernel, int64_t window_left, int64_t window_right, double softcap,
    const OptTensor& sinks, bool deterministic, c10::string_view backward_kernel) {
  if (!needs_grad({&q, &k, &v}, sinks)) {
    static const auto op = op_handle<VarlenFwdSig>("hfa::attention_varlen_fwd");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                   causal, softmax_scale, kernel, window_left, window_right, softcap, sinks,
                   deterministic, backward_kernel);
  }
  const variable_list r = VarlenAttentionFunction::apply(
      q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, causal,
      softmax_scale, kernel, window_left, window_right, softcap, sinks, deterministic,
      backward_kernel);
  return {r[0], r[1]};
}

}  // namespace
}  // namespace hfa_torch

TORCH_LIBRARY_IMPL(hfa, CUDA, m) {
  m.impl("attention_fwd", &hfa_torch::attention_fwd);
  m.impl("attention_bwd", &hfa_torch::attention_bwd);
  m.impl("attention_varlen_fwd", &hfa_torch::attention_varlen_fwd);
  m.impl("attention_varlen_bwd", &hfa_torch::attention_varlen_bwd);
}

TORCH_LIBRARY_IMPL(hfa, CPU, m) {
  m.impl("attention_fwd", &hfa_torch::attention_fwd);
  m.impl("attention_bwd", &hfa_torch::attention_bwd);
  m.impl("attention_varlen_fwd", &hfa_torch::attention_varlen_fwd);
  m.impl("attention_varlen_bwd", &hfa_torch::attention_varlen_bwd);
}

TORCH_LIBRARY_IMPL(hfa, Autograd, m) {
  m.impl("attention_fwd", &hfa_torch::attention_fwd_autograd);
  m.impl("attention_varlen_fwd", &hfa_torch::attention_varlen_fwd_autograd);
}
