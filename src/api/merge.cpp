// The public merge of partial attention results: merge_attention() and its argument rules (the
// kernel: src/kernels/merge/).
#include <cuda_runtime.h>

#include <cstdint>

#include "api/merge_validate.h"
#include "api/tensor_rules.h"
#include "common/status_util.h"
#include "kernels/merge/merge.h"

namespace hfa {
namespace {

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;

bool is_float_dtype(DType d) { return d == DType::kFP32 || d == DType::kBF16 || d == DType::kFP16; }

// The kernel reads and writes 4 consecutive elements of a row at once: the pointer and every
// stride but head_dim's a multiple of 4 elements (head_dim itself is 64, 128 or 256).
Status check_4_element_rows(const TensorView& t, const char* name) {
  const int64_t quad_bytes = 4 * static_cast<int64_t>(size_of(t.dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % quad_bytes != 0)
    return make_error(kInvalid, "%s: data pointer is not %lld-byte aligned; the merge reads 4 "
                      "elements of a row at once", name, static_cast<long long>(quad_bytes));
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.shape[i] > 1 && t.stride[i] % 4 != 0)
      return make_error(kInvalid, "%s: stride %lld of dimension %d is not a multiple of 4 "
                        "elements; the merge reads 4 elements of a row at once", name,
                        static_cast<long long>(t.stride[i]), i);
  return Status::Ok();
}

// Bytes [first, last] that a view's elements span.
struct Span {
  uintptr_t first = 0, last = 0;
  bool empty = true;
};
Span span_of(const TensorView& t) {
  Span s;
  if (t.numel() == 0) return s;
  int64_t extent = 0;
  for (int i = 0; i < t.rank; ++i) extent += (t.shape[i] - 1) * t.stride[i];
  s.first = reinterpret_cast<uintptr_t>(t.data);
  s.last = s.first + (extent + 1) * size_of(t.dtype) - 1;
  s.empty = false;
  return s;
}
bool overlaps(const Span& a, const Span& b) {
  return !a.empty && !b.empty && a.first <= b.last && b.first <= a.last;
}

// out (rank `rank`) is exactly part i of `parts` (rank + 1): same dtype, pointer and strides.
bool is_one_part(const TensorView& out, const TensorView& parts) {
  if (out.dtype != parts.dtype || parts.stride[0] == 0) return false;
  for (int i = 0; i < out.rank; ++i)
    if (out.stride[i] != parts.stride[i + 1]) return false;
  const auto base = reinterpret_cast<uintptr_t>(parts.data), at = reinterpret_cast<uintptr_t>(out.data);
  if (at < base) return false;
  const uintptr_t part_bytes = static_cast<uintptr_t>(parts.stride[0]) * size_of(parts.dtype);
  return (at - base) % part_bytes == 0 && static_cast<int64_t>((at - base) / part_bytes) < parts.shape[0];
}

// Written `out` may be one of the parts, or apart from all of them.
Status check_output_placement(const TensorView& out, const char* name, const TensorView& parts,
                              const char* parts_name) {
  if (is_one_part(out, parts) || !overlaps(span_of(out), span_of(parts))) return Status::Ok();
  return make_error(kInvalid, "%s: overlaps %s without being one of its parts (the same pointer "
                    "and strides as %s[i]); the merge would read what it has written", name,
                    parts_name, parts_name);
}

}  // namespace

Status normalize_merge(const MergeArgs& a, MergeProblem* p) {
  *p = MergeProblem{};
  const TensorView& o = a.o_parts;
  HFA_RETURN_IF_ERROR(check_tensor(o, "o_parts", 5, "(num_parts, batch, seqlen, heads, head_dim)"));
  if (!is_float_dtype(o.dtype))
    return make_error(kInvalid, "o_parts: dtype %s; must be fp32, bf16 or fp16", to_string(o.dtype));
  if (o.shape[0] < 1 || o.shape[0] > kMaxMergeParts)
    return make_error(kInvalid, "o_parts: %lld parts; a merge takes 1 to %d",
                      static_cast<long long>(o.shape[0]), kMaxMergeParts);
  const int64_t d = o.shape[4];
  if (d != 64 && d != 128 && d != 256)
    return make_error(kInvalid, "o_parts: head_dim %lld; the merge takes 64, 128 or 256",
                      static_cast<long long>(d));
  if (o.stride[4] != 1)
    return make_error(kInvalid, "o_parts: head_dim stride is %lld; head_dim must be contiguous (stride 1)",
                      static_cast<long long>(o.stride[4]));
  HFA_RETURN_IF_ERROR(check_4_element_rows(o, "o_parts"));

  const TensorView& l = a.lse_parts;
  HFA_RETURN_IF_ERROR(check_tensor(l, "lse_parts", 4, "(num_parts, batch, heads, seqlen)"));
  if (l.dtype != DType::kFP32)
    return make_error(kInvalid, "lse_parts: dtype %s; must be fp32", to_string(l.dtype));
  // lse_parts (num_parts, batch, heads, seqlen) against o_parts (num_parts, batch, seqlen, heads, d)
  HFA_RETURN_IF_ERROR(check_same_dim(l, "lse_parts", 0, o, "o_parts", 0, "num_parts"));
  HFA_RETURN_IF_ERROR(check_same_dim(l, "lse_parts", 1, o, "o_parts", 1, "batch"));
  HFA_RETURN_IF_ERROR(check_same_dim(l, "lse_parts", 2, o, "o_parts", 3, "heads"));
  HFA_RETURN_IF_ERROR(check_same_dim(l, "lse_parts", 3, o, "o_parts", 2, "seqlen"));

  const TensorView& out = a.out;
  HFA_RETURN_IF_ERROR(check_tensor(out, "out", 4, "(batch, seqlen, heads, head_dim)"));
  if (!is_float_dtype(out.dtype))
    return make_error(kInvalid, "out: dtype %s; must be fp32, bf16 or fp16", to_string(out.dtype));
  for (int i = 0; i < 4; ++i)
    HFA_RETURN_IF_ERROR(check_same_dim(out, "out", i, o, "o_parts", i + 1,
                                       i == 0 ? "batch" : i == 1 ? "seqlen" : i == 2 ? "heads" : "head_dim"));
  if (out.stride[3] != 1)
    return make_error(kInvalid, "out: head_dim stride is %lld; head_dim must be contiguous (stride 1)",
                      static_cast<long long>(out.stride[3]));
  HFA_RETURN_IF_ERROR(check_4_element_rows(out, "out"));
  HFA_RETURN_IF_ERROR(check_output_placement(out, "out", o, "o_parts"));
  if (overlaps(span_of(out), span_of(l))) return make_error(kInvalid, "out: overlaps lse_parts");

  if (given(a.lse)) {
    const TensorView& lse = a.lse;
    HFA_RETURN_IF_ERROR(check_tensor(lse, "lse", 3, "(batch, heads, seqlen)"));
    if (lse.dtype != DType::kFP32)
      return make_error(kInvalid, "lse: dtype %s; must be fp32", to_string(lse.dtype));
    for (int i = 0; i < 3; ++i)
      HFA_RETURN_IF_ERROR(check_same_dim(lse, "lse", i, l, "lse_parts", i + 1,
                                         i == 0 ? "batch" : i == 1 ? "heads" : "seqlen"));
    HFA_RETURN_IF_ERROR(check_output_placement(lse, "lse", l, "lse_parts"));
    if (overlaps(span_of(lse), span_of(o))) return make_error(kInvalid, "lse: overlaps o_parts");
    if (overlaps(span_of(lse), span_of(out)))
      return make_error(kInvalid, "lse: overlaps out");
    p->lse = static_cast<float*>(lse.data);
    p->lse_out_batch_stride = lse.stride[0], p->lse_out_head_stride = lse.stride[1];
    p->lse_out_row_stride = lse.stride[2];
  }

  p->num_parts = static_cast<int>(o.shape[0]);
  p->batch = static_cast<int>(o.shape[1]), p->seqlen = static_cast<int>(o.shape[2]);
  p->heads = static_cast<int>(o.shape[3]), p->head_dim = static_cast<int>(d);
  p->o_parts = o.data, p->part_dtype = o.dtype;
  p->o_part_stride = o.stride[0], p->o_batch_stride = o.stride[1];
  p->o_row_stride = o.stride[2], p->o_head_stride = o.stride[3];
  p->lse_parts = static_cast<const float*>(l.data);
  p->lse_part_stride = l.stride[0], p->lse_batch_stride = l.stride[1];
  p->lse_head_stride = l.stride[2], p->lse_row_stride = l.stride[3];
  p->out = out.data, p->out_dtype = out.dtype;
  p->out_batch_stride = out.stride[0], p->out_row_stride = out.stride[1], p->out_head_stride = out.stride[2];
  return Status::Ok();
}

Status merge_attention(const MergeArgs& args, cudaStream_t stream) {
  MergeProblem p;
  HFA_RETURN_IF_ERROR(normalize_merge(args, &p));
  if (p.rows() == 0) return Status::Ok();
  if (p.rows() > INT32_MAX)
    return make_error(StatusCode::kUnsupported, "o_parts: %lld rows (batch x seqlen x heads); the "
                      "merge takes at most 2^31 - 1", static_cast<long long>(p.rows()));
  return cuda_status(merge::launch(p, stream), "launching merge_attention");
}

}  // namespace hfa
