// The public entry point quantize_fp8(): its rules (normalize_quantize, declared in validate.h),
// then the passes' launch.
#include "api/tensor_rules.h"
#include "api/validate.h"
#include "common/status_util.h"
#include "kernels/quantize_fp8/quantize_fp8.h"

namespace hfa {
namespace {
constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
}  // namespace

Status normalize_quantize(const QuantizeFp8Args& a, QuantizeProblem* p) {
  const TensorView &q = a.q, &k = a.k, &v = a.v;
  if (q.dtype != DType::kBF16 && q.dtype != DType::kFP16)
    return make_error(kInvalid, "q: dtype %s; quantize_fp8 takes bf16 or fp16", to_string(q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(q, "q", q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(k, "k", q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(v, "v", q.dtype));
  HFA_RETURN_IF_ERROR(check_same_dim(k, "k", 0, q, "q", 0, "batch"));
  HFA_RETURN_IF_ERROR(check_same_dim(k, "k", 3, q, "q", 3, "head_dim"));
  for (int d = 0; d < 4; ++d) HFA_RETURN_IF_ERROR(check_same_dim(v, "v", d, k, "k", d, "shape"));
  const int64_t batch = q.shape[0], heads_q = q.shape[2], heads_kv = k.shape[2], head_dim = q.shape[3];
  if (heads_q < 1 || heads_kv < 1)
    return make_error(kInvalid, "%s: heads is 0; must be at least 1", heads_q < 1 ? "q" : "k");
  if (heads_q % heads_kv != 0)
    return make_error(kInvalid, "k: heads_q (%lld) must be a multiple of heads_kv (%lld) for GQA/MQA",
                      (long long)heads_q, (long long)heads_kv);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return make_error(kInvalid, "q: head_dim is %lld; quantize_fp8 takes 64, 128 or 256",
                      (long long)head_dim);
  struct Out { const TensorView& t; const char* name; const TensorView& like; const char* like_name; };
  for (const Out& o : {Out{a.q_out, "q_out", q, "q"}, Out{a.k_out, "k_out", k, "k"}, Out{a.v_out, "v_out", v, "v"}}) {
    HFA_RETURN_IF_ERROR(check_attention_tensor(o.t, o.name, DType::kE4M3));
    for (int d = 0; d < 4; ++d) HFA_RETURN_IF_ERROR(check_same_dim(o.t, o.name, d, o.like, o.like_name, d, "shape"));
  }
  auto blocks = [](int64_t seqlen) { return (seqlen + kFp8ScaleBlock - 1) / kFp8ScaleBlock; };
  if (a.block) {
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.q_descale, "q_descale", "(batch, heads_q, ceil(seqlen_q / 128))",
                                             {batch, heads_q, blocks(q.shape[1])}));
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.k_descale, "k_descale", "(batch, heads_kv, ceil(seqlen_k / 128))",
                                             {batch, heads_kv, blocks(k.shape[1])}));
  } else {
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.q_descale, "q_descale", "(batch, heads_kv)", {batch, heads_kv}));
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.k_descale, "k_descale", "(batch, heads_kv)", {batch, heads_kv}));
  }
  HFA_RETURN_IF_ERROR(check_descale_tensor(a.v_descale, "v_descale", "(batch, heads_kv)", {batch, heads_kv}));

  QuantizeProblem r;
  auto fill = [](QuantizeProblem::Tensor* t, const TensorView& in, const TensorView& out,
                 const TensorView& descale, bool block) {
    t->in = in.data;
    t->out = out.data;
    t->in_batch_stride = in.stride[0]; t->in_row_stride = in.stride[1]; t->in_head_stride = in.stride[2];
    t->out_batch_stride = out.stride[0]; t->out_row_stride = out.stride[1]; t->out_head_stride = out.stride[2];
    t->seqlen = static_cast<int>(in.shape[1]);
    t->heads = static_cast<int>(in.shape[2]);
    t->descale = static_cast<float*>(descale.data);
    t->descale_batch_stride = descale.stride[0];
    t->descale_head_stride = descale.stride[1];
    t->descale_block_stride = block ? descale.stride[2] : 0;
    t->block = block;
  };
  fill(&r.q, q, a.q_out, a.q_descale, a.block);
  fill(&r.k, k, a.k_out, a.k_descale, a.block);
  fill(&r.v, v, a.v_out, a.v_descale, false);
  r.q.hadamard = r.k.hadamard = a.hadamard;
  r.k.minus_mean = a.subtract_mean_key;
  r.dtype = q.dtype;
  r.batch = static_cast<int>(batch);
  r.heads_q = static_cast<int>(heads_q);
  r.heads_kv = static_cast<int>(heads_kv);
  r.head_dim = static_cast<int>(head_dim);
  r.hadamard_seed = a.hadamard_seed;
  *p = r;
  return Status::Ok();
}


Status quantize_fp8(const QuantizeFp8Args& args, cudaStream_t stream) {
  QuantizeProblem problem;
  HFA_RETURN_IF_ERROR(normalize_quantize(args, &problem));
  if (problem.batch == 0) return Status::Ok();
  DeviceInfo device;
  HFA_RETURN_IF_ERROR(query_device(&device));
  return launch_quantize_fp8(problem, stream);
}

}  // namespace hfa
