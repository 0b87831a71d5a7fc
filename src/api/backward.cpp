// The public backward entry point: its rules (normalize_backward, declared in validate.h), the
// kernel's choice, the launch.
#include "api/tensor_rules.h"
#include "api/validate.h"
#include "common/status_util.h"
#include "kernels/common/sink_grad.h"

namespace hfa {
namespace {
constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
}  // namespace

Status normalize_backward(const BackwardArgs& args, BwdProblem* bp) {
  if (args.lse.data == nullptr && args.q.numel() > 0)
    return make_error(kInvalid, "lse: data pointer is null; the backward needs the forward's LSE "
                                "(fp32, (batch, heads_q, seqlen_q))");
  if (args.q.dtype == DType::kE4M3)
    return make_error(StatusCode::kUnsupported, "q: dtype e4m3; the backward takes bf16 or fp16 "
                      "(FP8 attention is forward-only)");
  ForwardArgs fwd;
  fwd.q = args.q; fwd.k = args.k; fwd.v = args.v; fwd.out = args.out; fwd.lse = args.lse;
  fwd.softmax_scale = args.softmax_scale;
  fwd.causal = args.causal;
  fwd.window_left = args.window_left;
  fwd.window_right = args.window_right;
  fwd.softcap = args.softcap;
  fwd.sinks = args.sinks;
  fwd.cu_seqlens_q = args.cu_seqlens_q;
  fwd.cu_seqlens_k = args.cu_seqlens_k;
  fwd.max_seqlen_q = args.max_seqlen_q;
  fwd.max_seqlen_k = args.max_seqlen_k;
  fwd.seqused_k = args.seqused_k;
  BwdProblem r;
  HFA_RETURN_IF_ERROR(normalize_forward(fwd, &r.fwd));
  if (given(args.dsinks)) {
    if (!given(args.sinks))
      return make_error(kInvalid, "dsinks: given without sinks; the sinks' gradient needs the sinks");
    HFA_RETURN_IF_ERROR(check_tensor(args.dsinks, "dsinks", 1, "(heads_q)"));
    if (args.dsinks.dtype != DType::kFP32)
      return make_error(kInvalid, "dsinks: dtype %s; dsinks must be fp32", to_string(args.dsinks.dtype));
    if (args.dsinks.shape[0] != r.fwd.heads_q)
      return make_error(kInvalid, "dsinks: shape %s; expected (heads_q) = (%d)",
                        shape_string(args.dsinks).c_str(), r.fwd.heads_q);
    r.dsinks = static_cast<float*>(args.dsinks.data);
    r.dsinks_stride = args.dsinks.stride[0];
  }
  const DType dtype = args.q.dtype;
  // dq, dk, dv: q's dtype, or all three fp32 (dq's dtype decides which the others must have).
  r.grads_fp32 = args.dq.dtype == DType::kFP32;
  const DType grad_dtype = r.grad_dtype();
  struct Grad { const TensorView& t; const char* name; const TensorView& like; const char* like_name; DType dtype; };
  const Grad grads[] = {{args.dout, "dout", args.out, "out", dtype}, {args.dq, "dq", args.q, "q", grad_dtype},
                        {args.dk, "dk", args.k, "k", grad_dtype}, {args.dv, "dv", args.v, "v", grad_dtype}};
  const bool varlen = r.fwd.varlen();
  for (const Grad& g : grads) {
    if (varlen && g.t.rank != 3)
      return make_error(kInvalid, "%s: expected rank 3 (total, heads, head_dim) like %s with "
                        "cu_seqlens (a variable-length batch), got rank %d", g.name, g.like_name, g.t.rank);
    const TensorView t = varlen ? as_one_batch(g.t) : g.t;
    if (&g != &grads[0] && t.dtype != g.dtype)  // dq, dk, dv
      return make_error(kInvalid, "%s: dtype %s; dq, dk and dv must all have q's dtype %s or all be "
                        "fp32 (dq is %s)", g.name, to_string(t.dtype), to_string(dtype),
                        to_string(args.dq.dtype));
    HFA_RETURN_IF_ERROR(check_attention_tensor(t, g.name, g.dtype));
    for (int d = 0; d < 4; ++d)
      HFA_RETURN_IF_ERROR(check_same_dim(t, g.name, d, varlen ? as_one_batch(g.like) : g.like,
                                         g.like_name, d, "shape"));
  }
  r.dout = args.dout.data; r.dq = args.dq.data; r.dk = args.dk.data; r.dv = args.dv.data;
  r.do_batch_stride = args.dout.stride[0]; r.do_row_stride = args.dout.stride[1]; r.do_head_stride = args.dout.stride[2];
  r.dq_batch_stride = args.dq.stride[0]; r.dq_row_stride = args.dq.stride[1]; r.dq_head_stride = args.dq.stride[2];
  r.dk_batch_stride = args.dk.stride[0]; r.dk_row_stride = args.dk.stride[1]; r.dk_head_stride = args.dk.stride[2];
  r.dv_batch_stride = args.dv.stride[0]; r.dv_row_stride = args.dv.stride[1]; r.dv_head_stride = args.dv.stride[2];
  if (varlen) {  // packed (total, heads, head_dim): no batch dimension
    r.do_batch_stride = r.dq_batch_stride = r.dk_batch_stride = r.dv_batch_stride = 0;
    r.do_row_stride = args.dout.stride[0]; r.do_head_stride = args.dout.stride[1];
    r.dq_row_stride = args.dq.stride[0]; r.dq_head_stride = args.dq.stride[1];
    r.dk_row_stride = args.dk.stride[0]; r.dk_head_stride = args.dk.stride[1];
    r.dv_row_stride = args.dv.stride[0]; r.dv_head_stride = args.dv.stride[1];
  }
  r.deterministic = args.deterministic;
  *bp = r;
  return Status::Ok();
}

bool is_empty(const BwdProblem& p) {
  return p.fwd.batch == 0 || (p.fwd.seqlen_q == 0 && p.fwd.seqlen_k == 0);
}


Status backward(const BackwardArgs& args, cudaStream_t stream) {
  BwdProblem problem;
  HFA_RETURN_IF_ERROR(normalize_backward(args, &problem));
  DeviceInfo device;
  const BackwardKernelEntry* kernel = nullptr;
  if (args.kernel != "auto" && !find_backward_kernel(args.kernel))
    return select_backward_kernel_for(args.kernel, problem, device, &kernel);  // unknown name
  if (is_empty(problem)) {  // no gradient but the sinks' (0: no rows)
    if (!problem.dsinks) return Status::Ok();
    return cuda_status(launch_backward_sink_grad(problem, stream), "launching the sinks' gradient");
  }
  HFA_RETURN_IF_ERROR(query_device(&device));
  HFA_RETURN_IF_ERROR(select_backward_kernel_for(args.kernel, problem, device, &kernel));
  return kernel->launch(problem, device, stream);
}

Status select_backward_kernel(const BackwardArgs& args, std::string* kernel_name) {
  BwdProblem problem;
  HFA_RETURN_IF_ERROR(normalize_backward(args, &problem));
  DeviceInfo device;
  const BackwardKernelEntry* kernel = nullptr;
  if (args.kernel == "auto" || find_backward_kernel(args.kernel)) HFA_RETURN_IF_ERROR(query_device(&device));
  HFA_RETURN_IF_ERROR(select_backward_kernel_for(args.kernel, problem, device, &kernel));
  if (kernel_name) *kernel_name = kernel->name;
  return Status::Ok();
}

}  // namespace hfa
