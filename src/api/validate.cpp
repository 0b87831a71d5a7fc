#include "api/validate.h"
#include "api/tensor_rules.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>

#include "common/status_util.h"

namespace hfa {
namespace {
constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
}  // namespace

// ---- The tensor rules (api/tensor_rules.h) --------------------------------------------------------

std::string shape_string(const TensorView& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + ")";
}

TensorView as_one_batch(const TensorView& t) {
  TensorView r = t;
  r.rank = 4;
  for (int i = 3; i >= 1; --i) r.shape[i] = t.shape[i - 1], r.stride[i] = t.stride[i - 1];
  r.shape[0] = 1;
  r.stride[0] = 0;
  return r;
}

// Rules every tensor argument follows: its rank, sane sizes and strides, a pointer when non-empty.
Status check_tensor(const TensorView& t, const char* name, int rank, const char* dims) {
  if (t.rank != rank)
    return make_error(kInvalid, "%s: expected rank %d %s, got rank %d", name, rank, dims, t.rank);
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0 || t.shape[i] > INT_MAX)
      return make_error(kInvalid, "%s: dimension %d has size %lld; sizes must be in [0, 2^31)",
                        name, i, static_cast<long long>(t.shape[i]));
    if (t.stride[i] < 0)
      return make_error(kInvalid, "%s: dimension %d has stride %lld; strides must be non-negative",
                        name, i, static_cast<long long>(t.stride[i]));
  }
  if (t.data == nullptr && t.numel() > 0)
    return make_error(kInvalid, "%s: data pointer is null but the tensor has %lld elements", name,
                      static_cast<long long>(t.numel()));
  return Status::Ok();
}

Status check_attention_tensor(const TensorView& t, const char* name, DType dtype) {
  HFA_RETURN_IF_ERROR(check_tensor(t, name, 4, "(batch, seqlen, heads, head_dim)"));
  if (t.dtype != dtype)
    return make_error(kInvalid, "%s: dtype %s does not match q's dtype %s", name,
                      to_string(t.dtype), to_string(dtype));
  if (t.stride[3] != 1)
    return make_error(kInvalid, "%s: head_dim stride is %lld; head_dim must be contiguous (stride 1)",
                      name, static_cast<long long>(t.stride[3]));
  return Status::Ok();
}

Status check_same_dim(const TensorView& a, const char* a_name, int a_dim, const TensorView& b,
                      const char* b_name, int b_dim, const char* what) {
  if (a.shape[a_dim] == b.shape[b_dim]) return Status::Ok();
  return make_error(kInvalid, "%s: %s is %lld but %s's is %lld (shape %s vs %s)", a_name, what,
                    static_cast<long long>(a.shape[a_dim]), b_name,
                    static_cast<long long>(b.shape[b_dim]), shape_string(a).c_str(),
                    shape_string(b).c_str());
}

// Whether an optional tensor argument was given (a data pointer, or a shape for empty tensors).
bool given(const TensorView& t) { return t.data != nullptr || t.rank != 0; }

Status check_window_args(int window_left, int window_right, bool causal) {
  for (const auto& [value, name] : {std::pair{window_left, "window_left"},
                                    std::pair{window_right, "window_right"}})
    if (value < -1)
      return make_error(kInvalid, "%s: %d; must be -1 (unbounded) or >= 0", name, value);
  if (causal && window_right > 0)
    return make_error(kInvalid, "window_right: %d with causal; causal attention is window_right = 0 "
                      "(give -1 or 0, or causal = false)", window_right);
  return Status::Ok();
}

Status check_softcap_arg(float softcap) {
  if (!std::isfinite(softcap) || softcap < 0.f)
    return make_error(kInvalid, "softcap: %g; must be finite and >= 0 (0: off)",
                      static_cast<double>(softcap));
  return Status::Ok();
}

Status check_sinks_tensor(const TensorView& sinks, int64_t heads_q) {
  HFA_RETURN_IF_ERROR(check_tensor(sinks, "sinks", 1, "(heads_q)"));
  if (sinks.dtype != DType::kFP32)
    return make_error(kInvalid, "sinks: dtype %s; sinks must be fp32", to_string(sinks.dtype));
  if (sinks.shape[0] != heads_q)
    return make_error(kInvalid, "sinks: shape %s; expected (heads_q) = (%lld)",
                      shape_string(sinks).c_str(), static_cast<long long>(heads_q));
  return Status::Ok();
}

Status check_descale_tensor(const TensorView& t, const char* name, const char* dims,
                            std::initializer_list<int64_t> expect) {
  const int rank = static_cast<int>(expect.size());
  if (t.data == nullptr && t.rank == 0)  // absent (a null pointer with a shape is checked below)
    return make_error(kInvalid, "%s: e4m3 inputs need fp32 %s descale factors; data pointer is null",
                      name, dims);
  HFA_RETURN_IF_ERROR(check_tensor(t, name, rank, dims));
  if (t.dtype != DType::kFP32)
    return make_error(kInvalid, "%s: dtype %s; descale factors must be fp32", name, to_string(t.dtype));
  int i = 0;
  for (int64_t e : expect) {
    if (t.shape[i] != e) {
      std::string want = "(";
      int j = 0;
      for (int64_t x : expect) want += (j++ ? ", " : "") + std::to_string(x);
      return make_error(kInvalid, "%s: shape %s; expected %s = %s", name, shape_string(t).c_str(),
                        dims, (want + ")").c_str());
    }
    ++i;
  }
  return Status::Ok();
}

namespace {

// The descales of the e4m3 forward (ForwardArgs::q_descale ... k_block_descale): which are
// required, which must be absent, their shapes. Fills r's descales.
Status check_descales(const ForwardArgs& a, int64_t heads_kv, FwdProblem* r) {
  const TensorView& q = a.q;
  struct Named { const TensorView& t; const char* name; };
  const Named all[] = {{a.q_descale, "q_descale"}, {a.k_descale, "k_descale"}, {a.v_descale, "v_descale"},
                       {a.q_block_descale, "q_block_descale"}, {a.k_block_descale, "k_block_descale"}};
  if (q.dtype != DType::kE4M3) {
    for (const Named& n : all)
      if (given(n.t))
        return make_error(kInvalid, "%s: only e4m3 inputs take descale factors; q is %s", n.name,
                          to_string(q.dtype));
    return Status::Ok();
  }
  const bool block = given(a.q_block_descale) || given(a.k_block_descale);
  const int64_t batch = q.shape[0], heads_q = q.shape[2];
  auto blocks = [](int64_t seqlen) { return (seqlen + kFp8ScaleBlock - 1) / kFp8ScaleBlock; };
  if (block) {
    if (given(a.q_descale))
      return make_error(kInvalid, "q_descale: give q_descale or q_block_descale, not both");
    if (given(a.k_descale))
      return make_error(kInvalid, "k_descale: give k_descale or k_block_descale, not both");
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.q_block_descale, "q_block_descale",
                                             "(batch, heads_q, ceil(seqlen_q / 128))",
                                             {batch, heads_q, blocks(q.shape[1])}));
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.k_block_descale, "k_block_descale",
                                             "(batch, heads_kv, ceil(seqlen_k / 128))",
                                             {batch, heads_kv, blocks(a.k.shape[1])}));
    // k8 reads a KV tile's descales at 32-bit offsets (block x block_stride) from its row.
    if (a.k_block_descale.stride[2] * (blocks(a.k.shape[1]) - 1) > INT32_MAX)
      return make_error(kInvalid,
                        "k_block_descale: block stride %lld over %lld blocks; the last block's offset "
                        "(stride x (blocks - 1)) must stay below 2^31 elements",
                        static_cast<long long>(a.k_block_descale.stride[2]),
                        static_cast<long long>(blocks(a.k.shape[1])));
    auto take = [](const TensorView& t, FwdProblem::BlockDescale* out) {
      out->data = static_cast<const float*>(t.data);
      out->batch_stride = t.stride[0];
      out->head_stride = t.stride[1];
      out->block_stride = t.stride[2];
    };
    take(a.q_block_descale, &r->q_block_descale);
    take(a.k_block_descale, &r->k_block_descale);
    r->fp8_block_scales = true;
  }
  struct PerHead { const TensorView& t; const char* name; FwdProblem::Descale* out; };
  for (const PerHead& d : {PerHead{a.q_descale, "q_descale", &r->q_descale},
                           PerHead{a.k_descale, "k_descale", &r->k_descale},
                           PerHead{a.v_descale, "v_descale", &r->v_descale}}) {
    if (block && d.out != &r->v_descale) continue;  // q and k came as block descales
    HFA_RETURN_IF_ERROR(check_descale_tensor(d.t, d.name, "(batch, heads_kv)", {batch, heads_kv}));
    d.out->data = static_cast<const float*>(d.t.data);
    d.out->batch_stride = d.t.stride[0];
    d.out->head_stride = d.t.stride[1];
  }
  return Status::Ok();
}

// The score variants (ForwardArgs::window_left/right, softcap, sinks): their rules, and their
// normalized form in r (problem.h). Needs r's sizes.
Status check_variants(const ForwardArgs& a, FwdProblem* r) {
  HFA_RETURN_IF_ERROR(check_window_args(a.window_left, a.window_right, a.causal));
  int left = a.window_left, right = a.causal ? 0 : a.window_right;
  r->causal = a.causal;
  if (left == -1 && right == 0) {
    r->causal = true;  // the causal mask itself
  } else if (left != -1 || right != -1) {
    if (static_cast<int64_t>(r->seqlen_q) + r->seqlen_k >= FwdProblem::kUnboundedWindow)
      return make_error(kInvalid, "window_left: seqlen_q + seqlen_k is %lld; a sliding window needs "
                        "it below 2^30", static_cast<long long>(r->seqlen_q) + r->seqlen_k);
    auto bound = [](int w) { return w == -1 ? FwdProblem::kUnboundedWindow : std::min(w, FwdProblem::kUnboundedWindow); };
    r->local = true;
    r->causal = false;
    r->window_left = bound(left);
    r->window_right = bound(right);
  }
  HFA_RETURN_IF_ERROR(check_softcap_arg(a.softcap));
  r->softcap = a.softcap;
  if (given(a.sinks)) {
    HFA_RETURN_IF_ERROR(check_sinks_tensor(a.sinks, r->heads_q));
    r->sinks = static_cast<const float*>(a.sinks.data);
    r->sinks_stride = a.sinks.stride[0];
  }
  return Status::Ok();
}

}  // namespace

bool is_empty(const FwdProblem& p) { return p.batch == 0 || p.seqlen_q == 0; }

namespace {
Status normalize_dense(const ForwardArgs& args, FwdProblem* p);

// A variable-length batch's int32 vector argument (cu_seqlens_q/k, seqused_k): rank 1, `size`
// entries, contiguous.
Status check_int_vector(const TensorView& t, const char* name, const char* dims, int64_t size) {
  HFA_RETURN_IF_ERROR(check_tensor(t, name, 1, dims));
  if (t.dtype != DType::kI32)
    return make_error(kInvalid, "%s: dtype %s; must be int32", name, to_string(t.dtype));
  if (t.shape[0] != size)
    return make_error(kInvalid, "%s: shape %s; expected %s = (%lld)", name, shape_string(t).c_str(),
                      dims, static_cast<long long>(size));
  if (t.shape[0] > 1 && t.stride[0] != 1)
    return make_error(kInvalid, "%s: stride %lld; must be contiguous (stride 1)", name,
                      static_cast<long long>(t.stride[0]));
  if (t.data == nullptr && size > 0)
    return make_error(kInvalid, "%s: data pointer is null", name);
  return Status::Ok();
}
}  // namespace

// Variable-length batches (ForwardArgs::cu_seqlens_q ...): their own rules and ranks, then the
// dense rules on the packed tensors as one batch entry, then the problem's varlen form.
Status normalize_forward(const ForwardArgs& args, FwdProblem* p) {
  const bool varlen = given(args.cu_seqlens_q) || given(args.cu_seqlens_k);
  if (!varlen) {
    if (given(args.seqused_k))
      return make_error(kInvalid, "seqused_k: given without cu_seqlens_q and cu_seqlens_k; it "
                        "belongs to variable-length batches");
    return normalize_dense(args, p);
  }
  if (!given(args.cu_seqlens_q) || !given(args.cu_seqlens_k))
    return make_error(kInvalid, "%s: variable-length batches need both cu_seqlens_q and cu_seqlens_k",
                      given(args.cu_seqlens_q) ? "cu_seqlens_k" : "cu_seqlens_q");
  if (args.q.dtype == DType::kE4M3)
    return make_error(StatusCode::kUnsupported, "cu_seqlens_q: e4m3 inputs take no variable-length "
                      "batches yet (no FP8 kernel supports them)");
  struct Packed { const TensorView& t; const char* name; const char* dims; };
  for (const Packed& t : {Packed{args.q, "q", "(total_q, heads_q, head_dim)"},
                          Packed{args.k, "k", "(total_k, heads_kv, head_dim)"},
                          Packed{args.v, "v", "(total_k, heads_kv, head_dim)"},
                          Packed{args.out, "out", "(total_q, heads_q, head_dim)"}})
    if (t.t.rank != 3)
      return make_error(kInvalid, "%s: expected rank 3 %s with cu_seqlens (a variable-length "
                        "batch), got rank %d", t.name, t.dims, t.t.rank);
  HFA_RETURN_IF_ERROR(check_tensor(args.cu_seqlens_q, "cu_seqlens_q", 1, "(batch + 1)"));
  const int64_t entries = args.cu_seqlens_q.shape[0];
  if (entries < 1)
    return make_error(kInvalid, "cu_seqlens_q: shape %s; needs batch + 1 >= 1 entries",
                      shape_string(args.cu_seqlens_q).c_str());
  HFA_RETURN_IF_ERROR(check_int_vector(args.cu_seqlens_q, "cu_seqlens_q", "(batch + 1)", entries));
  HFA_RETURN_IF_ERROR(check_int_vector(args.cu_seqlens_k, "cu_seqlens_k", "(batch + 1)", entries));
  if (given(args.seqused_k))
    HFA_RETURN_IF_ERROR(check_int_vector(args.seqused_k, "seqused_k", "(batch)", entries - 1));
  for (const auto& [value, name] : {std::pair{args.max_seqlen_q, "max_seqlen_q"},
                                    std::pair{args.max_seqlen_k, "max_seqlen_k"}})
    if (value < 0) return make_error(kInvalid, "%s: %d; must be >= 0", name, value);
  if (args.lse.data != nullptr) {
    HFA_RETURN_IF_ERROR(check_tensor(args.lse, "lse", 2, "(heads_q, total_q) with cu_seqlens"));
    if (args.lse.shape[0] != args.q.shape[1] || args.lse.shape[1] != args.q.shape[0])
      return make_error(kInvalid, "lse: shape %s; expected (heads_q, total_q) = (%lld, %lld) with "
                        "cu_seqlens", shape_string(args.lse).c_str(),
                        static_cast<long long>(args.q.shape[1]), static_cast<long long>(args.q.shape[0]));
  }

  ForwardArgs dense = args;
  dense.q = as_one_batch(args.q);
  dense.k = as_one_batch(args.k);
  dense.v = as_one_batch(args.v);
  dense.out = as_one_batch(args.out);
  if (args.lse.data != nullptr) {  // (heads_q, total_q) as (1, heads_q, total_q)
    dense.lse.rank = 3;
    dense.lse.shape = {1, args.lse.shape[0], args.lse.shape[1], 0};
    dense.lse.stride = {0, args.lse.stride[0], args.lse.stride[1], 0};
  }
  FwdProblem r;
  HFA_RETURN_IF_ERROR(normalize_dense(dense, &r));
  r.cu_seqlens_q = static_cast<const int*>(args.cu_seqlens_q.data);
  r.cu_seqlens_k = static_cast<const int*>(args.cu_seqlens_k.data);
  r.seqused_k = given(args.seqused_k) ? static_cast<const int*>(args.seqused_k.data) : nullptr;
  r.total_q = r.seqlen_q;
  r.total_k = r.seqlen_k;
  r.batch = static_cast<int>(entries - 1);
  r.seqlen_q = args.max_seqlen_q;
  r.seqlen_k = args.max_seqlen_k;
  *p = r;
  return Status::Ok();
}

namespace {
Status normalize_dense(const ForwardArgs& args, FwdProblem* p) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &o = args.out;
  if (q.dtype != DType::kBF16 && q.dtype != DType::kFP16 && q.dtype != DType::kE4M3)
    return make_error(kInvalid, "q: dtype %s is not supported; use bf16, fp16 or e4m3",
                      to_string(q.dtype));
  const bool fp8 = q.dtype == DType::kE4M3;
  if (fp8 && o.dtype != DType::kBF16 && o.dtype != DType::kFP16)
    return make_error(kInvalid, "out: dtype %s; with e4m3 inputs out must be bf16 or fp16",
                      to_string(o.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(q, "q", q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(k, "k", q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(v, "v", q.dtype));
  if (fp8) HFA_RETURN_IF_ERROR(check_tensor(o, "out", 4, "(batch, seqlen, heads, head_dim)"));
  if (fp8 && o.stride[3] != 1)
    return make_error(kInvalid, "out: head_dim stride is %lld; head_dim must be contiguous (stride 1)",
                      static_cast<long long>(o.stride[3]));
  if (!fp8) HFA_RETURN_IF_ERROR(check_attention_tensor(o, "out", q.dtype));

  HFA_RETURN_IF_ERROR(check_same_dim(k, "k", 0, q, "q", 0, "batch"));
  HFA_RETURN_IF_ERROR(check_same_dim(k, "k", 3, q, "q", 3, "head_dim"));
  for (int d = 0; d < 4; ++d)
    HFA_RETURN_IF_ERROR(check_same_dim(v, "v", d, k, "k", d, "shape"));
  for (int d = 0; d < 4; ++d)
    HFA_RETURN_IF_ERROR(check_same_dim(o, "out", d, q, "q", d, "shape"));

  const int64_t heads_q = q.shape[2], heads_kv = k.shape[2], head_dim = q.shape[3];
  if (heads_q < 1) return make_error(kInvalid, "q: heads_q is %lld; must be at least 1", (long long)heads_q);
  if (heads_kv < 1) return make_error(kInvalid, "k: heads_kv is %lld; must be at least 1", (long long)heads_kv);
  if (head_dim < 1) return make_error(kInvalid, "q: head_dim is %lld; must be at least 1", (long long)head_dim);
  if (heads_q % heads_kv != 0)
    return make_error(kInvalid, "k: heads_q (%lld) must be a multiple of heads_kv (%lld) for GQA/MQA",
                      (long long)heads_q, (long long)heads_kv);

  if (args.lse.data != nullptr) {
    const TensorView& lse = args.lse;
    HFA_RETURN_IF_ERROR(check_tensor(lse, "lse", 3, "(batch, heads_q, seqlen_q)"));
    if (lse.dtype != DType::kFP32)
      return make_error(kInvalid, "lse: dtype %s; lse must be fp32", to_string(lse.dtype));
    if (lse.shape[0] != q.shape[0] || lse.shape[1] != heads_q || lse.shape[2] != q.shape[1])
      return make_error(kInvalid, "lse: shape %s; expected (batch, heads_q, seqlen_q) = (%lld, %lld, %lld)",
                        shape_string(lse).c_str(), (long long)q.shape[0], (long long)heads_q,
                        (long long)q.shape[1]);
  }

  FwdProblem r;
  HFA_RETURN_IF_ERROR(check_descales(args, heads_kv, &r));

  float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (args.softmax_scale.has_value()) {
    scale = *args.softmax_scale;
    if (!std::isfinite(scale))
      return make_error(kInvalid, "softmax_scale: %g is not finite", static_cast<double>(scale));
  }

  r.q = q.data; r.k = k.data; r.v = v.data; r.o = o.data;
  r.lse = static_cast<float*>(args.lse.data);
  r.dtype = q.dtype;
  r.out_dtype = o.dtype;
  r.batch = static_cast<int>(q.shape[0]);
  r.seqlen_q = static_cast<int>(q.shape[1]);
  r.seqlen_k = static_cast<int>(k.shape[1]);
  r.heads_q = static_cast<int>(heads_q);
  r.heads_kv = static_cast<int>(heads_kv);
  r.head_dim = static_cast<int>(head_dim);
  r.q_batch_stride = q.stride[0]; r.q_row_stride = q.stride[1]; r.q_head_stride = q.stride[2];
  r.k_batch_stride = k.stride[0]; r.k_row_stride = k.stride[1]; r.k_head_stride = k.stride[2];
  r.v_batch_stride = v.stride[0]; r.v_row_stride = v.stride[1]; r.v_head_stride = v.stride[2];
  r.o_batch_stride = o.stride[0]; r.o_row_stride = o.stride[1]; r.o_head_stride = o.stride[2];
  if (r.lse) {
    r.lse_batch_stride = args.lse.stride[0];
    r.lse_head_stride = args.lse.stride[1];
    r.lse_row_stride = args.lse.stride[2];
  }
  r.softmax_scale = scale;
  HFA_RETURN_IF_ERROR(check_variants(args, &r));
  *p = r;
  return Status::Ok();
}
}  // namespace

namespace {

// A forward kernel takes either bf16/fp16 inputs or e4m3 ones (KernelEntry::fp8), never both.
Status check_input_dtype(const KernelEntry& e, const FwdProblem& p) {
  const bool fp8 = p.dtype == DType::kE4M3;
  if (fp8 == e.fp8) return Status::Ok();
  if (fp8) {
    std::string fp8_kernels;
    for (const KernelEntry& k : registry())
      if (k.fp8) fp8_kernels += (fp8_kernels.empty() ? "" : ", ") + k.name;
    return make_error(StatusCode::kUnsupported,
                      "q: kernel \"%s\" takes bf16/fp16 inputs, not e4m3 (e4m3 kernels: %s)",
                      e.name.c_str(), fp8_kernels.empty() ? "none in this build" : fp8_kernels.c_str());
  }
  return make_error(StatusCode::kUnsupported, "q: kernel \"%s\" takes e4m3 inputs only; q is %s",
                    e.name.c_str(), to_string(p.dtype));
}

// An e4m3 kernel takes per-(batch, KV head) descales (k7) or block descales (k8), not both.
Status check_fp8_scales(const KernelEntry& e, const FwdProblem& p) {
  if (p.dtype != DType::kE4M3 || p.fp8_block_scales == e.fp8_block_scales) return Status::Ok();
  std::string others;
  for (const KernelEntry& k : registry())
    if (k.fp8 && k.fp8_block_scales == p.fp8_block_scales)
      others += (others.empty() ? "" : ", ") + k.name;
  if (others.empty()) others = "none in this build";
  if (p.fp8_block_scales)
    return make_error(StatusCode::kUnsupported,
                      "q_block_descale: kernel \"%s\" takes per-(batch, heads_kv) q_descale and "
                      "k_descale, not block descales (kernels that do: %s)", e.name.c_str(), others.c_str());
  return make_error(StatusCode::kUnsupported,
                    "q_descale: kernel \"%s\" takes block descales (q_block_descale, k_block_descale), "
                    "not per-(batch, heads_kv) q_descale and k_descale (kernels that do: %s)",
                    e.name.c_str(), others.c_str());
}
Status check_input_dtype(const BackwardKernelEntry&, const BwdProblem&) { return Status::Ok(); }
Status check_fp8_scales(const BackwardKernelEntry&, const BwdProblem&) { return Status::Ok(); }

// The priority "auto" gives a kernel for a problem.
int auto_priority_of(const KernelEntry& e, const FwdProblem&) { return e.auto_priority; }
int auto_priority_of(const BackwardKernelEntry& e, const BwdProblem& p) {
  return e.auto_priority_for ? e.auto_priority_for(p) : e.auto_priority;
}

const FwdProblem& forward_of(const FwdProblem& p) { return p; }
const FwdProblem& forward_of(const BwdProblem& p) { return p.fwd; }

// A kernel takes the score variants it declares (KernelEntry::variants) and refuses the others
// by the argument's name, listing the kernels that take it.
template <class Entry>
Status check_variants_supported(const Entry& e, const FwdProblem& p,
                                const std::vector<Entry>& entries) {
  struct Variant { bool used; bool VariantSupport::*supported; const char* arg; const char* what; };
  const Variant variants[] = {
      {p.local, &VariantSupport::window, "window_left", "sliding windows"},
      {p.softcap > 0.f, &VariantSupport::softcap, "softcap", "softcap"},
      {p.sinks != nullptr, &VariantSupport::sinks, "sinks", "attention sinks"},
      {p.varlen(), &VariantSupport::varlen, "cu_seqlens_q", "variable-length batches"}};
  for (const Variant& v : variants) {
    if (!v.used || e.variants.*v.supported) continue;
    std::string others;
    for (const Entry& k : entries)
      if (k.variants.*v.supported) others += (others.empty() ? "" : ", ") + k.name;
    return make_error(StatusCode::kUnsupported, "%s: kernel \"%s\" does not support %s (kernels that "
                      "do: %s)", v.arg, e.name.c_str(), v.what,
                      others.empty() ? "none in this build" : others.c_str());
  }
  return Status::Ok();
}
const std::vector<KernelEntry>& entries_of(const KernelEntry&) { return registry(); }
const std::vector<BackwardKernelEntry>& entries_of(const BackwardKernelEntry&) { return backward_registry(); }

template <class Entry, class Problem>
Status check_entry(const Entry& e, const Problem& problem, const DeviceInfo& device) {
  HFA_RETURN_IF_ERROR(check_input_dtype(e, problem));
  HFA_RETURN_IF_ERROR(check_fp8_scales(e, problem));
  HFA_RETURN_IF_ERROR(check_variants_supported(e, forward_of(problem), entries_of(e)));
  return e.check(problem, device);
}

// "auto" or a name, among `entries` (forward or backward kernels).
template <class Entry, class Problem>
Status select_from(const std::vector<Entry>& entries, const char* what, const std::string& name,
                   const Problem& problem, const DeviceInfo& device, const Entry** kernel) {
  if (name == "auto") {
    const Entry* best = nullptr;
    int best_priority = 0;
    std::string reasons;
    for (const Entry& e : entries) {
      const int priority = auto_priority_of(e, problem);
      if (priority <= 0) continue;
      Status st = check_entry(e, problem, device);
      if (!st.ok()) {
        reasons += "\n  " + st.message;
        continue;
      }
      if (!best || priority > best_priority) best = &e, best_priority = priority;
    }
    if (!best)
      return make_error(StatusCode::kUnsupported,
                        "kernel: \"auto\" found no %s kernel for these arguments:%s", what,
                        reasons.c_str());
    *kernel = best;
    return Status::Ok();
  }
  const Entry* e = nullptr;
  for (const Entry& k : entries)
    if (k.name == name) e = &k;
  if (!e) {
    std::string names;
    for (const Entry& k : entries) names += k.name + ", ";
    return make_error(kInvalid, "kernel: unknown %s kernel \"%s\"; available: %sauto", what,
                      name.c_str(), names.c_str());
  }
  HFA_RETURN_IF_ERROR(check_entry(*e, problem, device));
  *kernel = e;
  return Status::Ok();
}

}  // namespace

Status select_kernel_for(const std::string& name, const FwdProblem& problem,
                         const DeviceInfo& device, const KernelEntry** kernel) {
  return select_from(registry(), "forward", name, problem, device, kernel);
}

Status select_backward_kernel_for(const std::string& name, const BwdProblem& problem,
                                  const DeviceInfo& device, const BackwardKernelEntry** kernel) {
  return select_from(backward_registry(), "backward", name, problem, device, kernel);
}

Status query_device(DeviceInfo* info) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    int count = 0;
    err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // do not leave the error sticky for the caller
    return make_error(StatusCode::kNoDevice, "no usable CUDA device: %s", cudaGetErrorString(err));
  }
  DeviceInfo d;
  d.device = device;
  int smem_optin = 0;
  size_t free_bytes = 0, total_bytes = 0;
  if ((err = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device)) ||
      (err = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device)) ||
      (err = cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device)) ||
      (err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) ||
      (err = cudaMemGetInfo(&free_bytes, &total_bytes)))
    return cuda_status(err, "querying the current device");
  d.max_smem_per_block_optin = smem_optin;
  d.free_memory = static_cast<int64_t>(free_bytes);
  *info = d;
  return Status::Ok();
}

}  // namespace hfa
