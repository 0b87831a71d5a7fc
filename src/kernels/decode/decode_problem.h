// The validated form of DecodeArgs that the decode kernels consume (validate_decode.cpp fills it,
// decode.cu launches), plain data passed to kernels by value. Strides are in elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/problem.h"
#include "hfa/hfa.h"

namespace hfa {

struct DecodeProblem {
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // may be null
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int* cache_seqlens = nullptr;
  const int* page_table = nullptr;       // null: contiguous cache
  const int* cache_batch_idx = nullptr;  // null: sequence b is cache row b
  const void* k_new = nullptr;           // null: nothing appended
  const void* v_new = nullptr;

  DType dtype = DType::kBF16;        // q and out
  DType cache_dtype = DType::kBF16;  // k_cache, v_cache, k_new, v_new: dtype or e4m3
  // e4m3 caches: fp32 (batch, heads_kv) factors of K and V (null otherwise).
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t k_descale_batch_stride = 0, k_descale_head_stride = 0;
  int64_t v_descale_batch_stride = 0, v_descale_head_stride = 0;
  int batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int seqlen_new = 0;  // 0 without k_new / v_new
  int capacity = 0;    // keys one sequence's cache holds
  int page_size_log2 = 0;  // paged caches (page_size is a power of two)

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;
  // The cache's outer stride is a sequence's (contiguous) or a page's (paged); rows are keys.
  int64_t k_outer_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_outer_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t k_new_batch_stride = 0, k_new_row_stride = 0, k_new_head_stride = 0;
  int64_t v_new_batch_stride = 0, v_new_row_stride = 0, v_new_head_stride = 0;
  int64_t cache_seqlens_stride = 0, cache_batch_idx_stride = 0;
  int64_t page_table_batch_stride = 0, page_table_page_stride = 0;

  float softmax_scale = 1.f;
  bool causal = false;

  // Splits of each sequence's keys, and (num_splits > 1) the fp32 partial results they write:
  // O (num_splits, batch, seqlen_q, heads_q, head_dim) normalized by its own row sum, and LSE
  // (num_splits, batch, seqlen_q, heads_q), which the merge (in the split grid or by the merge
  // kernel: merge_in_grid) combines.
  int num_splits = 1;
  float* o_partial = nullptr;
  float* lse_partial = nullptr;

  // The score variants (DecodeArgs::window_left/right, softcap, sinks), normalized by the API
  // (last in the struct: the plain kernels' parameter offsets stay what they were):
  // `local` when a window other than the causal mask is in force (then causal is false, and an
  // unbounded side is -1); (-1, 0) is normalized to causal. Query i of sequence b sees key j iff
  //   diag - window_left <= j <= diag + window_right,  diag = i + n_b - seqlen_q.
  bool local = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;            // > 0: scores softcap * tanh(softmax_scale * q.k / softcap)
  const float* sinks = nullptr;   // fp32 (heads_q) logits added to each row's denominator
  int64_t sinks_stride = 0;

  // Set by the launch, not the API (decode_launch.cuh): num_splits > 1 and the split kernel is
  // launched cooperatively (every CTA resident), so it merges its partial results itself after a
  // grid-wide barrier instead of a second kernel doing it.
  bool merge_in_grid = false;

  HFA_HOST_DEVICE bool fp8_cache() const { return cache_dtype == DType::kE4M3; }
  // Whether the variants' kernel runs (decode_kernel.cuh, kVariants): the plain one takes none.
  HFA_HOST_DEVICE bool variants() const { return local || softcap > 0.f || sinks != nullptr; }
  // The keys of a sequence of n_keys that the window lets any query row see at most: the plan's
  // split heuristic counts these, not the capacity.
  HFA_HOST_DEVICE int64_t window_keys(int64_t n_keys) const {
    // (The rows' windows reach from the first token's diag - window_left to the last key: a
    // window's right side, >= 0, never ends before the last row's diag, the sequence's last key.)
    if (!local || window_left < 0) return n_keys;
    const int64_t span = static_cast<int64_t>(window_left) + seqlen_q;
    return span < n_keys ? span : n_keys;
  }
  HFA_HOST_DEVICE bool paged() const { return page_table != nullptr; }
  HFA_HOST_DEVICE int group_size() const { return heads_q / heads_kv; }
  // Query rows packed into one tile per KV head: seqlen_q tokens x the group's query heads.
  HFA_HOST_DEVICE int packed_rows() const { return seqlen_q * group_size(); }
};

}  // namespace hfa
