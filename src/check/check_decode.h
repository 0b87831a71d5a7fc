// Flash decode on fresh random inputs, checked against the fp64 reference with the same rule as
// the forward (check.h): max|out - ref| <= 2 max|base - ref| + atol, the LSE likewise, every
// output element written, rows that see no key exactly O = 0 / LSE = -inf. Also: the appended
// k_new / v_new are in their slots bit for bit and nothing else in the cache changed.
// Shared by hfa-bench --decode and the GPU tests.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "check/check.h"  // Values
#include "hfa/hfa.h"

namespace hfa::check {

struct DecodeConfig {
  DType dtype = DType::kBF16;  // q and out
  // An e4m3 cache (and k_new / v_new), N(0, 1) x kFp8FillScale quantized, with descales of about
  // its inverse per (batch, KV head); otherwise the cache has q's dtype.
  bool fp8_cache = false;
  int batch = 1, seqlen_q = 1, heads_q = 32, heads_kv = 8, head_dim = 128;
  int capacity = 1024;  // keys per sequence's cache
  int page_size = 0;    // 0: contiguous cache; else a paged one (capacity rounded up to pages)
  // A paged cache's pages in a shuffled order (an engine's cache after a while); false: in order,
  // sequence after sequence (a fresh one).
  bool shuffled_pages = true;
  int seqlen_new = 0;   // k_new / v_new appended before attending
  bool causal = false;
  int num_splits = 0;   // 0: plan_decode's choice
  bool cache_batch_idx = false;  // contiguous caches: sequences use a permutation of cache rows
  bool with_lse = true;
  std::optional<float> softmax_scale;
  // Keys cached per sequence before the call; empty: sequence 0 the full cache, 1 none, 2 one key,
  // the rest random in [0, capacity - seqlen_new] (the full one first, so that a check of one or two
  // sequences -- hfa-bench's at long caches, which fit few in its 512 MB -- still has keys to check).
  std::vector<int> cache_seqlens;
  // All cache slots filled (cache_seqlens = capacity - seqlen_new): the benchmark's shape.
  bool full = false;
  // bf16 q only: each query row (token, head) N(0, 1) times 2^-16, 2^-8, 1, 2^8 or 2^16 in turn, so
  // that q holds values beyond fp16's range (the e4m3 cache's GEMMs run in fp16: decode_kernel.cuh).
  bool wide_q_range = false;
  // What q, the cache and the appended rows are drawn from (check.h: Values; kRamp only with a
  // contiguous cache, whose rows are the key positions).
  Values values = Values::kNormal;
  // Score variants (DecodeArgs::window_left/right, softcap, sinks). sinks: random fp32 (heads_q)
  // logits in [-1, 4), as the forward's check draws them.
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool sinks = false;
  // A paged cache with a window: the page-table entries of each sequence's pages that lie wholly
  // before its first query's window are -1, as an engine that frees them leaves them (decode must
  // not read them; the reference reads zeros there, which no row sees).
  bool evict_pages_before_window = false;

  DType cache_dtype() const { return fp8_cache ? DType::kE4M3 : dtype; }
  std::string describe() const;
  // Bytes of K and V one call reads: what the GB/s figure divides.
  double kv_bytes(const std::vector<int>& seqlens) const;
};

// Device tensors of one configuration. Caches and inputs are N(0, 1); a paged cache's pages are
// shuffled unless DecodeConfig::shuffled_pages says otherwise (and there are spare pages that no
// sequence uses); out and lse poisoned (NaN).
class DecodeBuffers {
 public:
  DecodeBuffers() = default;
  ~DecodeBuffers();
  DecodeBuffers(const DecodeBuffers&) = delete;
  DecodeBuffers& operator=(const DecodeBuffers&) = delete;

  Status allocate(const DecodeConfig& c, uint64_t seed);
  Status poison_outputs();
  DecodeArgs args() const;

  DecodeConfig config;
  std::vector<int> seqlens;  // cache_seqlens as uploaded
  TensorView q, k_cache, v_cache, k_new, v_new, out, lse, cache_seqlens, page_table, cache_batch_idx;
  TensorView k_descale, v_descale;  // e4m3 caches
  std::vector<float> k_descale_host, v_descale_host;
  TensorView sinks;  // config.sinks: (heads_q) with a stride of 2
  std::vector<float> sinks_host;
  int num_pages = 0;

 private:
  std::vector<void*> owned_;
  Status alloc(TensorView* t, DType dtype, std::initializer_list<int64_t> shape);
  Status widen_q_range();  // DecodeConfig::wide_q_range, on q as filled
};

struct DecodeCheckResult {
  bool pass = false;
  double max_abs_err = 0, baseline_max_abs_err = 0, tolerance = 0;
  double lse_max_abs_err = 0, lse_tolerance = 0;
  int64_t rows_checked = 0, unwritten = 0, masked_row_errors = 0;
  int64_t cache_clobbered = 0;   // cache elements not equal to (before, with the appended rows)
  int64_t appended_wrong = 0;    // appended slots not equal to k_new / v_new
  std::string message;
  std::string summary() const;
};

// Runs `run` (default: hfa::decode(buffers.args()) on the default stream) on poisoned outputs,
// then checks. With k_new / v_new the cache changes: allocate again before the next check.
// max_rows > 0 checks a random subset of that many (b, token, head) rows (all are checked written).
Status run_decode_check(DecodeBuffers& buffers, int64_t max_rows, DecodeCheckResult* result,
                        const std::function<Status(const DecodeArgs&)>& run = {});

}  // namespace hfa::check
