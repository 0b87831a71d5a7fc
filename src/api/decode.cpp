// The public entry points of flash decode: plan_decode() and decode(). Validation of DecodeArgs
// lives here too (normalize_decode: every rule names the argument it checks); the kernels are in
// src/kernels/decode/.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "api/decode_validate.h"
#include "api/tensor_rules.h"
#include "api/validate.h"
#include "common/status_util.h"
#include "common/workspace_pool.h"
#include "hfa_build_config.h"
#include "kernels/decode/decode.h"
#include "kernels/decode/decode_shape.h"

namespace hfa {
namespace {

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;

// An int32 index tensor of decode (cache_seqlens, cache_batch_idx, page_table).
Status check_index_tensor(const TensorView& t, const char* name, int rank, const char* dims,
                          std::initializer_list<int64_t> expect) {
  HFA_RETURN_IF_ERROR(check_tensor(t, name, rank, dims));
  if (t.dtype != DType::kI32)
    return make_error(kInvalid, "%s: dtype %s; must be int32", name, to_string(t.dtype));
  int i = 0;
  for (int64_t e : expect) {
    if (e >= 0 && t.shape[i] != e)
      return make_error(kInvalid, "%s: shape %s; expected %s with dimension %d = %lld", name,
                        shape_string(t).c_str(), dims, i, static_cast<long long>(e));
    ++i;
  }
  return Status::Ok();
}

// The kernels copy 16-byte chunks of every row: the pointer and every row's start must be
// 16-byte aligned.
Status check_16B_rows(const TensorView& t, const char* name) {
  const int64_t esize = size_of(t.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return make_error(StatusCode::kUnsupported, "%s: data pointer is not 16-byte aligned; decode "
                      "copies 16-byte chunks", name);
  for (int i = 0; i < 3; ++i)
    if (t.shape[i] > 1 && (t.stride[i] * esize) % 16 != 0)
      return make_error(StatusCode::kUnsupported, "%s: stride %lld of dimension %d is not a "
                        "multiple of 16 bytes; decode copies 16-byte chunks", name,
                        static_cast<long long>(t.stride[i]), i);
  return Status::Ok();
}

bool is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// The score variants (DecodeArgs::window_left/right, softcap, sinks): the forward's rules
// (validate.cpp's check_variants), normalized into p (decode_problem.h). p->causal is set.
Status check_decode_variants(const DecodeArgs& a, int64_t heads_q, DecodeProblem* p) {
  HFA_RETURN_IF_ERROR(check_window_args(a.window_left, a.window_right, a.causal));
  const int left = a.window_left, right = a.causal ? 0 : a.window_right;
  if (left == -1 && right == 0) {
    p->causal = true;  // the causal mask itself
  } else if (left != -1 || right != -1) {
    p->local = true;
    p->causal = false;
    p->window_left = left;
    p->window_right = right;
  }
  HFA_RETURN_IF_ERROR(check_softcap_arg(a.softcap));
  p->softcap = a.softcap;
  if (given(a.sinks)) {
    HFA_RETURN_IF_ERROR(check_sinks_tensor(a.sinks, heads_q));
    p->sinks = static_cast<const float*>(a.sinks.data);
    p->sinks_stride = a.sinks.stride[0];
  }
  return Status::Ok();
}

}  // namespace

Status normalize_decode(const DecodeArgs& a, DecodeProblem* p) {
  *p = DecodeProblem{};
  const TensorView& q = a.q;
  HFA_RETURN_IF_ERROR(check_tensor(q, "q", 4, "(batch, seqlen_q, heads_q, head_dim)"));
  if (q.dtype == DType::kE4M3)
    return make_error(StatusCode::kUnsupported,
                      "q: e4m3 queries are not supported by decode; pass q in bf16 or fp16 (the "
                      "cache may be e4m3, with k_descale and v_descale)");
  if (q.dtype != DType::kBF16 && q.dtype != DType::kFP16)
    return make_error(kInvalid, "q: dtype %s; decode takes bf16 or fp16", to_string(q.dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(q, "q", q.dtype));
  // The cache: q's dtype, or e4m3 (converted to q's dtype in the kernel, with descales).
  const DType cache_dtype = a.k_cache.dtype;
  if (cache_dtype != q.dtype && cache_dtype != DType::kE4M3)
    return make_error(kInvalid, "k_cache: dtype %s; must be q's dtype (%s) or e4m3",
                      to_string(cache_dtype), to_string(q.dtype));
  if (a.v_cache.dtype != cache_dtype)
    return make_error(kInvalid, "v_cache: dtype %s; must be k_cache's dtype %s",
                      to_string(a.v_cache.dtype), to_string(cache_dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(a.k_cache, "k_cache", cache_dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(a.v_cache, "v_cache", cache_dtype));
  HFA_RETURN_IF_ERROR(check_attention_tensor(a.out, "out", q.dtype));
  const int64_t batch = q.shape[0], seqlen_q = q.shape[1], heads_q = q.shape[2], d = q.shape[3];
  for (int i = 0; i < 4; ++i)
    if (a.out.shape[i] != q.shape[i])
      return make_error(kInvalid, "out: shape %s; must be q's shape %s", shape_string(a.out).c_str(),
                        shape_string(q).c_str());
  for (int i = 0; i < 4; ++i)
    if (a.v_cache.shape[i] != a.k_cache.shape[i])
      return make_error(kInvalid, "v_cache: shape %s; must be k_cache's shape %s",
                        shape_string(a.v_cache).c_str(), shape_string(a.k_cache).c_str());
  HFA_RETURN_IF_ERROR(check_same_dim(a.k_cache, "k_cache", 3, q, "q", 3, "head_dim"));
  if (d != 64 && d != 128 && d != 256)
    return make_error(StatusCode::kUnsupported, "q: head_dim %lld; decode supports 64, 128, 256",
                      static_cast<long long>(d));
  if (flash_decode::smem_bytes(static_cast<int>(d), false) == 0)
    return make_error(StatusCode::kUnsupported, "q: head_dim %lld is not in this build (HFA_HEAD_DIMS = %s)",
                      static_cast<long long>(d), HFA_HEAD_DIMS_STRING);
  const int64_t heads_kv = a.k_cache.shape[2];
  if (heads_kv == 0 || heads_q % heads_kv != 0)
    return make_error(kInvalid, "k_cache: heads_kv = %lld; heads_q (%lld) must be a multiple of it",
                      static_cast<long long>(heads_kv), static_cast<long long>(heads_q));
  if (batch > 65535 || heads_kv > 65535)
    return make_error(StatusCode::kUnsupported, "q: batch %lld and heads_kv %lld must be at most 65535",
                      static_cast<long long>(batch), static_cast<long long>(heads_kv));

  if (!given(a.cache_seqlens))
    return make_error(kInvalid, "cache_seqlens: required (int32, (batch)); not given");
  HFA_RETURN_IF_ERROR(check_index_tensor(a.cache_seqlens, "cache_seqlens", 1, "(batch)", {batch}));
  const bool paged = given(a.page_table);
  int64_t capacity = 0;
  if (paged) {
    HFA_RETURN_IF_ERROR(check_index_tensor(a.page_table, "page_table", 2, "(batch, max_pages_per_seq)",
                                           {batch, -1}));
    if (given(a.cache_batch_idx))
      return make_error(kInvalid, "cache_batch_idx: not allowed with a paged cache (page_table "
                        "already maps each sequence to its pages)");
    const int64_t page_size = a.k_cache.shape[1];
    if (!is_power_of_two(page_size))
      return make_error(kInvalid, "k_cache: page_size (dimension 1 of a paged cache) is %lld; must "
                        "be a power of two", static_cast<long long>(page_size));
    if (a.k_cache.shape[0] == 0 && a.page_table.shape[1] > 0)
      return make_error(kInvalid, "k_cache: a paged cache with 0 pages but a page table of width %lld",
                        static_cast<long long>(a.page_table.shape[1]));
    capacity = a.page_table.shape[1] * page_size;
    int log2 = 0;
    while ((int64_t{1} << log2) < page_size) ++log2;
    p->page_size_log2 = log2;
    p->page_table = static_cast<const int*>(a.page_table.data);
    p->page_table_batch_stride = a.page_table.stride[0];
    p->page_table_page_stride = a.page_table.stride[1];
  } else {
    capacity = a.k_cache.shape[1];
    if (given(a.cache_batch_idx)) {
      HFA_RETURN_IF_ERROR(check_index_tensor(a.cache_batch_idx, "cache_batch_idx", 1, "(batch)", {batch}));
      if (a.k_cache.shape[0] == 0 && batch > 0)
        return make_error(kInvalid, "k_cache: batch_cache is 0; cache_batch_idx has nothing to index");
      p->cache_batch_idx = static_cast<const int*>(a.cache_batch_idx.data);
      p->cache_batch_idx_stride = a.cache_batch_idx.stride[0];
    } else if (a.k_cache.shape[0] < batch) {
      return make_error(kInvalid, "k_cache: batch_cache %lld is less than q's batch %lld (without "
                        "cache_batch_idx, sequence b is cache row b)",
                        static_cast<long long>(a.k_cache.shape[0]), static_cast<long long>(batch));
    }
  }
  if (capacity > INT_MAX)
    return make_error(kInvalid, "page_table: capacity (width x page_size) %lld exceeds 2^31 - 1 keys",
                      static_cast<long long>(capacity));

  if (given(a.k_new) != given(a.v_new))
    return make_error(kInvalid, "%s: k_new and v_new must be given together", given(a.k_new) ? "v_new" : "k_new");
  if (given(a.k_new)) {
    for (const auto& [t, name] : {std::pair{&a.k_new, "k_new"}, {&a.v_new, "v_new"}})
      if (t->dtype != cache_dtype)  // appended as they are: no conversion
        return make_error(kInvalid, "%s: dtype %s; must be the cache's dtype %s", name,
                          to_string(t->dtype), to_string(cache_dtype));
    HFA_RETURN_IF_ERROR(check_attention_tensor(a.k_new, "k_new", cache_dtype));
    HFA_RETURN_IF_ERROR(check_attention_tensor(a.v_new, "v_new", cache_dtype));
    for (int i = 0; i < 4; ++i) {
      const int64_t want = i == 0 ? batch : i == 1 ? a.k_new.shape[1] : i == 2 ? heads_kv : d;
      if (a.k_new.shape[i] != want || a.v_new.shape[i] != a.k_new.shape[i])
        return make_error(kInvalid, "k_new/v_new: shapes %s and %s; both must be (batch %lld, "
                          "seqlen_new, heads_kv %lld, head_dim %lld)", shape_string(a.k_new).c_str(),
                          shape_string(a.v_new).c_str(), static_cast<long long>(batch),
                          static_cast<long long>(heads_kv), static_cast<long long>(d));
    }
    if (a.k_new.shape[1] > capacity)
      return make_error(kInvalid, "k_new: seqlen_new %lld exceeds the cache's capacity %lld",
                        static_cast<long long>(a.k_new.shape[1]), static_cast<long long>(capacity));
    p->seqlen_new = static_cast<int>(a.k_new.shape[1]);
  }
  if (given(a.lse)) {
    HFA_RETURN_IF_ERROR(check_tensor(a.lse, "lse", 3, "(batch, heads_q, seqlen_q)"));
    if (a.lse.dtype != DType::kFP32)
      return make_error(kInvalid, "lse: dtype %s; must be fp32", to_string(a.lse.dtype));
    if (a.lse.shape[0] != batch || a.lse.shape[1] != heads_q || a.lse.shape[2] != seqlen_q)
      return make_error(kInvalid, "lse: shape %s; expected (batch, heads_q, seqlen_q) = (%lld, %lld, %lld)",
                        shape_string(a.lse).c_str(), static_cast<long long>(batch),
                        static_cast<long long>(heads_q), static_cast<long long>(seqlen_q));
  }
  if (cache_dtype == DType::kE4M3) {
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.k_descale, "k_descale", "(batch, heads_kv)", {batch, heads_kv}));
    HFA_RETURN_IF_ERROR(check_descale_tensor(a.v_descale, "v_descale", "(batch, heads_kv)", {batch, heads_kv}));
    p->k_descale = static_cast<const float*>(a.k_descale.data);
    p->v_descale = static_cast<const float*>(a.v_descale.data);
    p->k_descale_batch_stride = a.k_descale.stride[0], p->k_descale_head_stride = a.k_descale.stride[1];
    p->v_descale_batch_stride = a.v_descale.stride[0], p->v_descale_head_stride = a.v_descale.stride[1];
  } else {
    for (const auto& [t, name] : {std::pair{&a.k_descale, "k_descale"}, {&a.v_descale, "v_descale"}})
      if (given(*t))
        return make_error(kInvalid, "%s: only e4m3 caches take descale factors; the cache is %s",
                          name, to_string(cache_dtype));
  }
  const float scale = a.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  if (!std::isfinite(scale))
    return make_error(kInvalid, "softmax_scale: %g; must be finite", static_cast<double>(scale));
  if (a.num_splits < 0 || a.num_splits > flash_decode::kDecodeMaxSplits)
    return make_error(kInvalid, "num_splits: %d; must be 0 (chosen by plan_decode) or 1 .. %d",
                      a.num_splits, flash_decode::kDecodeMaxSplits);
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&a.out, "out"}, {&a.k_cache, "k_cache"},
                                {&a.v_cache, "v_cache"}, {&a.k_new, "k_new"}, {&a.v_new, "v_new"}})
    if (t->numel() > 0) HFA_RETURN_IF_ERROR(check_16B_rows(*t, name));

  p->q = q.data;
  p->o = a.out.data;
  p->lse = static_cast<float*>(a.lse.data);
  p->k_cache = a.k_cache.data;
  p->v_cache = a.v_cache.data;
  p->cache_seqlens = static_cast<const int*>(a.cache_seqlens.data);
  p->cache_seqlens_stride = a.cache_seqlens.stride[0];
  p->k_new = a.k_new.data;
  p->v_new = a.v_new.data;
  p->dtype = q.dtype;
  p->cache_dtype = cache_dtype;
  p->batch = static_cast<int>(batch);
  p->seqlen_q = static_cast<int>(seqlen_q);
  p->heads_q = static_cast<int>(heads_q);
  p->heads_kv = static_cast<int>(heads_kv);
  p->head_dim = static_cast<int>(d);
  p->capacity = static_cast<int>(capacity);
  auto strides3 = [](const TensorView& t, int64_t* s0, int64_t* s1, int64_t* s2) {
    *s0 = t.stride[0], *s1 = t.stride[1], *s2 = t.stride[2];
  };
  strides3(q, &p->q_batch_stride, &p->q_row_stride, &p->q_head_stride);
  strides3(a.out, &p->o_batch_stride, &p->o_row_stride, &p->o_head_stride);
  strides3(a.k_cache, &p->k_outer_stride, &p->k_row_stride, &p->k_head_stride);
  strides3(a.v_cache, &p->v_outer_stride, &p->v_row_stride, &p->v_head_stride);
  if (p->k_new) {
    strides3(a.k_new, &p->k_new_batch_stride, &p->k_new_row_stride, &p->k_new_head_stride);
    strides3(a.v_new, &p->v_new_batch_stride, &p->v_new_row_stride, &p->v_new_head_stride);
  }
  if (p->lse) strides3(a.lse, &p->lse_batch_stride, &p->lse_head_stride, &p->lse_row_stride);
  p->softmax_scale = scale;
  p->causal = a.causal;
  HFA_RETURN_IF_ERROR(check_decode_variants(a, heads_q, p));
  p->num_splits = a.num_splits;
  return Status::Ok();
}

Status check_decode_device(const DeviceInfo& device, int head_dim, bool fp8_cache) {
  if (device.cc() < 80)
    return make_error(StatusCode::kUnsupported, "decode: needs compute capability 8.0 or newer; "
                      "this GPU is %d.%d", device.cc_major, device.cc_minor);
  const size_t smem = flash_decode::smem_bytes(head_dim, fp8_cache);
  if (static_cast<int64_t>(smem) > device.max_smem_per_block_optin)
    return make_error(StatusCode::kUnsupported, "decode: head_dim %d needs %zu bytes of shared "
                      "memory per block; this GPU allows %lld", head_dim, smem,
                      static_cast<long long>(device.max_smem_per_block_optin));
  return Status::Ok();
}

Status plan_decode_for(const DecodeProblem& p, const DeviceInfo& device, DecodePlan* plan) {
  HFA_RETURN_IF_ERROR(check_decode_device(device, p.head_dim, p.fp8_cache()));
  DecodeProblem sized = p;
  sized.num_splits = p.num_splits > 0 ? p.num_splits : flash_decode::choose_num_splits(p, device.sm_count);
  *plan = DecodePlan{};
  plan->num_splits = sized.num_splits;
  plan->workspace_bytes = flash_decode::workspace_bytes(sized);
  plan->batch = p.batch, plan->seqlen_q = p.seqlen_q, plan->heads_q = p.heads_q;
  plan->heads_kv = p.heads_kv, plan->head_dim = p.head_dim, plan->seqlen_new = p.seqlen_new;
  plan->capacity = p.capacity;
  plan->paged = p.paged();
  plan->dtype = p.dtype;
  plan->cache_dtype = p.cache_dtype;
  plan->device = device.device;
  plan->cc = device.cc();
  return Status::Ok();
}

Status check_plan_matches(const DecodeProblem& p, const DecodePlan& plan, int device) {
  if (plan.num_splits < 1)
    return make_error(kInvalid, "plan: not made by plan_decode() (num_splits %d)", plan.num_splits);
  struct Field { const char* name; long long planned, now; };
  const Field fields[] = {{"batch", plan.batch, p.batch}, {"seqlen_q", plan.seqlen_q, p.seqlen_q},
                          {"heads_q", plan.heads_q, p.heads_q}, {"heads_kv", plan.heads_kv, p.heads_kv},
                          {"head_dim", plan.head_dim, p.head_dim}, {"seqlen_new", plan.seqlen_new, p.seqlen_new},
                          {"capacity", plan.capacity, p.capacity}, {"paged", plan.paged, p.paged()},
                          {"dtype", static_cast<long long>(plan.dtype), static_cast<long long>(p.dtype)},
                          {"cache_dtype", static_cast<long long>(plan.cache_dtype),
                           static_cast<long long>(p.cache_dtype)},
                          {"device", plan.device, device}};
  for (const Field& f : fields)
    if (f.planned != f.now)
      return make_error(kInvalid, "plan: made for %s = %lld, but the arguments have %lld; plan "
                        "again for these shapes", f.name, f.planned, f.now);
  return Status::Ok();
}

Status plan_decode(const DecodeArgs& args, DecodePlan* plan) {
  if (plan == nullptr) return make_error(kInvalid, "plan: null pointer");
  DecodeProblem p;
  HFA_RETURN_IF_ERROR(normalize_decode(args, &p));
  DeviceInfo device;
  HFA_RETURN_IF_ERROR(query_device(&device));
  return plan_decode_for(p, device, plan);
}

Status decode(const DecodeArgs& args, const DecodePlan& plan, void* workspace,
              size_t workspace_size, cudaStream_t stream) {
  DecodeProblem p;
  HFA_RETURN_IF_ERROR(normalize_decode(args, &p));
  int device = 0;
  HFA_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "decode: cudaGetDevice"));
  HFA_RETURN_IF_ERROR(check_plan_matches(p, plan, device));
  if (workspace_size < plan.workspace_bytes || (plan.workspace_bytes > 0 && workspace == nullptr))
    return make_error(kInvalid, "workspace: %zu bytes at %p; the plan needs %zu", workspace_size,
                      workspace, plan.workspace_bytes);
  if (plan.workspace_bytes > 0 && reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    return make_error(kInvalid, "workspace: must be 16-byte aligned");
  if (p.batch == 0 || (p.seqlen_q == 0 && p.seqlen_new == 0)) return Status::Ok();
  p.num_splits = plan.num_splits;
  if (p.num_splits > 1) {
    p.o_partial = static_cast<float*>(workspace);
    p.lse_partial = p.o_partial + static_cast<size_t>(p.num_splits) * p.batch * p.seqlen_q *
                                      p.heads_q * p.head_dim;
  }
  return flash_decode::launch(p, stream);
}

Status decode(const DecodeArgs& args, cudaStream_t stream) {
  DecodePlan plan;
  HFA_RETURN_IF_ERROR(plan_decode(args, &plan));
  void* workspace = nullptr;
  if (plan.workspace_bytes > 0)
    HFA_RETURN_IF_ERROR(cuda_status(workspace_alloc(&workspace, plan.workspace_bytes, stream),
                                    "decode: allocating the split workspace"));
  const Status st = decode(args, plan, workspace, plan.workspace_bytes, stream);
  if (workspace) {
    const Status freed = cuda_status(workspace_free(workspace, stream), "decode: freeing the workspace");
    if (st.ok()) return freed;
  }
  return st;
}

}  // namespace hfa
