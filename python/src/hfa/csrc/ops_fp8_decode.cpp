// The FP8 quantization and decode ops (schemas in ops_library.cpp): hfa::quantize_fp8,
// hfa::attention_with_kvcache (flash decode against a KV cache, in place when new keys are
// appended) and hfa::plan_decode (host only: the split count and workspace size).
#include <torch/library.h>

#include "torch_views.h"

#include <tuple>

namespace hfa_torch {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

void check_rank4(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 4, name, ": expected rank 4 (batch, seqlen, heads, head_dim), got rank ",
                    t.dim());
}

// bf16/fp16 q, k, v -> e4m3 tensors and fp32 descales (per (batch, KV head), or with block per
// 128 rows of each head of q and k; v's always per (batch, KV head)).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> quantize_fp8(
    const Tensor& q, const Tensor& k, const Tensor& v, bool block, bool hadamard,
    int64_t hadamard_seed, bool subtract_mean_key) {
  check_rank4(q, "q");
  check_rank4(k, "k");
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  const auto e4m3 = q.options().dtype(at::kFloat8_e4m3fn);
  const auto fp32 = q.options().dtype(at::kFloat);
  Tensor q8 = at::empty(q.sizes(), e4m3), k8 = at::empty(k.sizes(), e4m3), v8 = at::empty(v.sizes(), e4m3);
  const int64_t batch = q.size(0), heads_q = q.size(2), heads_kv = k.size(2);
  const auto blocks = [](int64_t rows) { return (rows + hfa::kFp8ScaleBlock - 1) / hfa::kFp8ScaleBlock; };
  Tensor qs = block ? at::empty({batch, heads_q, blocks(q.size(1))}, fp32) : at::empty({batch, heads_kv}, fp32);
  Tensor ks = block ? at::empty({batch, heads_kv, blocks(k.size(1))}, fp32) : at::empty({batch, heads_kv}, fp32);
  Tensor vs = at::empty({batch, heads_kv}, fp32);
  hfa::QuantizeFp8Args args;
  args.q = to_view(q, "q", device);
  args.k = to_view(k, "k", device);
  args.v = to_view(v, "v", device);
  args.q_out = to_view(q8, "q_out", device);
  args.k_out = to_view(k8, "k_out", device);
  args.v_out = to_view(v8, "v_out", device);
  args.q_descale = to_view(qs, "q_descale", device);
  args.k_descale = to_view(ks, "k_descale", device);
  args.v_descale = to_view(vs, "v_descale", device);
  args.block = block;
  args.hadamard = hadamard;
  args.hadamard_seed = static_cast<uint64_t>(hadamard_seed);
  args.subtract_mean_key = subtract_mean_key;
  throw_if_error(hfa::quantize_fp8(args, current_stream(device)));
  return {q8, k8, v8, qs, ks, vs};
}

// hfa::decode's arguments from the op's tensors.
hfa::DecodeArgs decode_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const OptTensor& k, const OptTensor& v, const Tensor& cache_seqlens,
                            const OptTensor& page_table, const OptTensor& cache_batch_idx,
                            const Tensor& out, const OptTensor& lse, bool causal,
                            std::optional<double> softmax_scale, int64_t num_splits,
                            const OptTensor& k_descale, const OptTensor& v_descale,
                            const at::Device& device, int64_t window_left = -1,
                            int64_t window_right = -1, double softcap = 0.0,
                            const OptTensor& sinks = std::nullopt) {
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
  TORCH_CHECK_VALUE(num_splits >= 0 && num_splits <= INT32_MAX, "num_splits: ", num_splits,
                    "; must be in [0, 2^31)");
  args.num_splits = static_cast<int>(num_splits);
  // (The library names a bad window; here only what does not fit its int.)
  for (const auto& [w, name] : {std::pair{window_left, "window_left"}, {window_right, "window_right"}})
    TORCH_CHECK_VALUE(w >= INT32_MIN && w <= INT32_MAX, name, ": ", w, "; must fit in 32 bits");
  args.window_left = static_cast<int>(window_left);
  args.window_right = static_cast<int>(window_right);
  args.softcap = static_cast<float>(softcap);
  if (sinks) args.sinks = to_view(*sinks, "sinks", device);
  return args;
}

// The plan for these shapes: (num_splits, workspace bytes). Host only.
std::tuple<int64_t, int64_t> plan_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                         const OptTensor& k, const OptTensor& v,
                                         const Tensor& cache_seqlens, const OptTensor& page_table,
                                         const OptTensor& cache_batch_idx, bool causal,
                                         int64_t num_splits, const OptTensor& k_descale,
                                         const OptTensor& v_descale, int64_t window_left,
                                         int64_t window_right) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  const Tensor out = at::empty_like(q);
  hfa::DecodePlan plan;
  throw_if_error(hfa::plan_decode(decode_args(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                              cache_batch_idx, out, std::nullopt, causal,
                                              std::nullopt, num_splits, k_descale, v_descale, device,
                                              window_left, window_right),
                                  &plan));
  return {plan.num_splits, static_cast<int64_t>(plan.workspace_bytes)};
}

// hfa::decode into new out and lse; workspace: uint8, at least the plan's bytes (allocated by the
// caller through torch's caching allocator, so graphs can capture it). num_splits is the plan's.
std::tuple<Tensor, Tensor> attention_with_kvcache(
    const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const OptTensor& k,
    const OptTensor& v, const Tensor& cache_seqlens, const OptTensor& page_table,
    const OptTensor& cache_batch_idx, bool causal, std::optional<double> softmax_scale,
    int64_t num_splits, const Tensor& workspace, const OptTensor& k_descale, const OptTensor& v_descale,
    int64_t window_left, int64_t window_right, double softcap, const OptTensor& sinks) {
  check_rank4(q, "q");
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  Tensor out = new_cuda_tensor(q.sizes(), q.scalar_type(), device);
  Tensor lse = new_cuda_tensor({q.size(0), q.size(2), q.size(1)}, at::kFloat, device);
  const hfa::DecodeArgs args = decode_args(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                           cache_batch_idx, out, lse, causal, softmax_scale,
                                           num_splits, k_descale, v_descale, device, window_left,
                                           window_right, softcap, sinks);
  // The plan is rebuilt from the shapes (host only); what the caller planned fixed num_splits.
  hfa::DecodePlan plan;
  throw_if_error(hfa::plan_decode(args, &plan));
  throw_if_error(hfa::decode(args, plan, workspace.numel() ? workspace.data_ptr() : nullptr,
                             static_cast<size_t>(workspace.numel()), current_stream(device)));
  return {out, lse};
}

}  // namespace
}  // namespace hfa_torch

TORCH_LIBRARY_IMPL(hfa, CUDA, m) {
  m.impl("quantize_fp8", &hfa_torch::quantize_fp8);
  m.impl("attention_with_kvcache", &hfa_torch::attention_with_kvcache);
  m.impl("plan_decode", &hfa_torch::plan_decode);
}

TORCH_LIBRARY_IMPL(hfa, CPU, m) {  // for the error naming the argument
  m.impl("quantize_fp8", &hfa_torch::quantize_fp8);
  m.impl("attention_with_kvcache", &hfa_torch::attention_with_kvcache);
  m.impl("plan_decode", &hfa_torch::plan_decode);
}
