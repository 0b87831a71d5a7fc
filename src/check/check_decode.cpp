#include "check/check_decode.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

#include "check/check.h"
#include "check/host_tensors.h"
#include "common/status_util.h"
#include "reference/reference.h"

namespace hfa::check {
namespace {

// Host checks read whole caches: beyond this, run_decode_check refuses (the benchmark checks a
// smaller batch instead).
constexpr int64_t kMaxCheckedCacheBytes = int64_t{2} << 30;

Status download_view(const TensorView& t, std::vector<uint8_t>* bytes) {
  int64_t extent = 1;  // elements spanned by the view (packed views here: numel)
  for (int i = 0; i < t.rank; ++i) extent += (t.shape[i] - 1) * t.stride[i];
  if (t.numel() == 0) extent = 0;
  bytes->resize(static_cast<size_t>(extent) * size_of(t.dtype));
  if (extent == 0) return Status::Ok();
  return cuda_status(cudaMemcpy(bytes->data(), t.data, bytes->size(), cudaMemcpyDeviceToHost),
                     "copying a decode tensor to the host");
}

}  // namespace

std::string DecodeConfig::describe() const {
  char variants[96] = "";
  if (window_left != -1 || window_right != -1 || softcap > 0.f || sinks)
    std::snprintf(variants, sizeof(variants), "%s%s%s%s%s", window_left != -1 || window_right != -1 ? " window=" : "",
                  window_left != -1 || window_right != -1 ? (std::to_string(window_left) + "," + std::to_string(window_right)).c_str() : "",
                  softcap > 0.f ? " softcap=" : "", softcap > 0.f ? std::to_string(softcap).c_str() : "",
                  sinks ? " sinks" : "");
  char buf[420];
  std::snprintf(buf, sizeof(buf),
                "%s%s%s b=%d sq=%d hq=%d hkv=%d d=%d cap=%d %s%s new=%d%s%s splits=%d%s%s%s", to_string(dtype),
                fp8_cache ? " e4m3-cache" : "", wide_q_range ? " wide-q" : "",
                batch, seqlen_q, heads_q, heads_kv, head_dim, capacity,
                page_size ? "paged " : "contiguous", page_size ? std::to_string(page_size).c_str() : "",
                seqlen_new, causal ? " causal" : "", variants, num_splits, cache_batch_idx ? " batch_idx" : "",
                values == Values::kNormal ? "" : " values=", values == Values::kNormal ? "" : to_string(values));
  return buf;
}

double DecodeConfig::kv_bytes(const std::vector<int>& seqlens) const {
  double keys = 0;  // (a window's keys only: decode reads no others)
  for (int n : seqlens)
    keys += window_left >= 0 ? std::min<int64_t>(n + seqlen_new, int64_t{window_left} + seqlen_q) : n + seqlen_new;
  return 2.0 * keys * heads_kv * head_dim * size_of(cache_dtype());
}

DecodeBuffers::~DecodeBuffers() {
  for (void* p : owned_) cudaFree(p);
}

Status DecodeBuffers::alloc(TensorView* t, DType dtype, std::initializer_list<int64_t> shape) {
  *t = make_tensor(nullptr, dtype, shape);
  const int64_t bytes = std::max<int64_t>(t->numel(), 1) * size_of(dtype);
  HFA_RETURN_IF_ERROR(cuda_status(cudaMalloc(&t->data, bytes), "allocating decode buffers"));
  owned_.push_back(t->data);
  return Status::Ok();
}

Status DecodeBuffers::allocate(const DecodeConfig& c, uint64_t seed) {
  for (void* p : owned_) cudaFree(p);
  owned_.clear();
  config = c;
  if (c.values == Values::kRamp && c.page_size)
    return make_error(StatusCode::kInvalidArgument,
                      "values: ramp needs a contiguous cache (a page's rows are not key positions)");
  std::mt19937_64 rng(seed);
  const int cap_keys = c.page_size ? (c.capacity + c.page_size - 1) / c.page_size * c.page_size : c.capacity;
  const int pages_per_seq = c.page_size ? cap_keys / c.page_size : 0;
  // Sequence lengths.
  seqlens = c.cache_seqlens;
  if (seqlens.empty()) {
    const int most = cap_keys - c.seqlen_new;
    std::uniform_int_distribution<int> len(0, std::max(most, 0));
    for (int b = 0; b < c.batch; ++b)
      seqlens.push_back(c.full ? most : b == 0 ? most : b == 1 ? 0 : b == 2 ? std::min(1, most) : len(rng));
  }
  const DType dt = c.dtype, ct = c.cache_dtype();
  HFA_RETURN_IF_ERROR(alloc(&q, dt, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}));
  HFA_RETURN_IF_ERROR(alloc(&out, dt, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}));
  if (c.with_lse) HFA_RETURN_IF_ERROR(alloc(&lse, DType::kFP32, {c.batch, c.heads_q, c.seqlen_q}));
  int cache_rows = c.batch;
  if (c.page_size) {
    num_pages = c.batch * pages_per_seq + 3;  // spare pages that no sequence uses
    HFA_RETURN_IF_ERROR(alloc(&k_cache, ct, {num_pages, c.page_size, c.heads_kv, c.head_dim}));
    HFA_RETURN_IF_ERROR(alloc(&v_cache, ct, {num_pages, c.page_size, c.heads_kv, c.head_dim}));
    // (batch, pages_per_seq) with a padded row stride, from a shuffled list of the pages (or in order).
    std::vector<int> pages(num_pages), table(static_cast<size_t>(c.batch) * (pages_per_seq + 1), -1);
    for (int i = 0; i < num_pages; ++i) pages[i] = i;
    if (c.shuffled_pages) std::shuffle(pages.begin(), pages.end(), rng);
    for (int b = 0; b < c.batch; ++b)
      for (int i = 0; i < pages_per_seq; ++i) table[b * (pages_per_seq + 1) + i] = pages[b * pages_per_seq + i];
    if (c.evict_pages_before_window && c.window_left >= 0)
      for (int b = 0; b < c.batch; ++b) {
        // The first query's window starts at n - seqlen_q - window_left (n = the keys after the
        // append); the appended slots (from seqlens[b]) stay in pages that are kept.
        const int64_t n = int64_t{seqlens[b]} + c.seqlen_new;
        const int64_t first = std::min<int64_t>(n - c.seqlen_q - c.window_left, seqlens[b]);
        for (int i = 0; i < pages_per_seq && int64_t{i + 1} * c.page_size <= first; ++i)
          table[b * (pages_per_seq + 1) + i] = -1;
      }
    HFA_RETURN_IF_ERROR(alloc(&page_table, DType::kI32, {c.batch, pages_per_seq + 1}));
    page_table.shape[1] = pages_per_seq;
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(page_table.data, table.data(), table.size() * 4,
                                               cudaMemcpyHostToDevice), "uploading the page table"));
  } else {
    if (c.cache_batch_idx) cache_rows = c.batch + 2;
    HFA_RETURN_IF_ERROR(alloc(&k_cache, ct, {cache_rows, c.capacity, c.heads_kv, c.head_dim}));
    HFA_RETURN_IF_ERROR(alloc(&v_cache, ct, {cache_rows, c.capacity, c.heads_kv, c.head_dim}));
    if (c.cache_batch_idx) {
      std::vector<int> rows(cache_rows);
      for (int i = 0; i < cache_rows; ++i) rows[i] = i;
      std::shuffle(rows.begin(), rows.end(), rng);
      HFA_RETURN_IF_ERROR(alloc(&cache_batch_idx, DType::kI32, {c.batch}));
      HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(cache_batch_idx.data, rows.data(), c.batch * 4,
                                                 cudaMemcpyHostToDevice), "uploading cache_batch_idx"));
    }
  }
  HFA_RETURN_IF_ERROR(alloc(&cache_seqlens, DType::kI32, {c.batch}));
  HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(cache_seqlens.data, seqlens.data(), c.batch * 4,
                                             cudaMemcpyHostToDevice), "uploading cache_seqlens"));
  if (c.seqlen_new > 0) {
    HFA_RETURN_IF_ERROR(alloc(&k_new, ct, {c.batch, c.seqlen_new, c.heads_kv, c.head_dim}));
    HFA_RETURN_IF_ERROR(alloc(&v_new, ct, {c.batch, c.seqlen_new, c.heads_kv, c.head_dim}));
  }
  k_descale = v_descale = TensorView{};
  k_descale_host.clear(), v_descale_host.clear();
  if (c.fp8_cache) {  // (batch, heads_kv) with a padded batch stride: any strides are allowed
    std::uniform_real_distribution<float> factor(0.75f, 1.25f);
    for (auto [t, host, role] : {std::tuple{&k_descale, &k_descale_host, InputRole::kKey},
                                 {&v_descale, &v_descale_host, InputRole::kValue}}) {
      HFA_RETURN_IF_ERROR(alloc(t, DType::kFP32, {c.batch, c.heads_kv + 1}));
      t->shape[1] = c.heads_kv;
      host->resize(static_cast<size_t>(c.batch) * (c.heads_kv + 1));
      const float peak = fp8_fill_peak(c.values, role, c.head_dim);
      for (float& x : *host) x = factor(rng) * peak / kFp8FillScale;
      HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(t->data, host->data(), host->size() * 4,
                                                 cudaMemcpyHostToDevice), "uploading descales"));
    }
  }
  sinks = TensorView{};
  sinks_host.clear();
  if (c.sinks) {  // (heads_q) with a stride of 2: any stride is allowed
    std::uniform_real_distribution<float> logit(-1.f, 4.f);
    sinks_host.resize(static_cast<size_t>(c.heads_q) * 2);
    for (float& x : sinks_host) x = logit(rng);
    HFA_RETURN_IF_ERROR(alloc(&sinks, DType::kFP32, {c.heads_q * 2}));
    sinks.shape[0] = c.heads_q;
    sinks.stride[0] = 2;
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(sinks.data, sinks_host.data(), sinks_host.size() * 4,
                                               cudaMemcpyHostToDevice), "uploading sinks"));
  }
  uint64_t salt = seed * 0x100000001B3ull;
  for (auto [t, role] : {std::pair{&q, InputRole::kQuery}, {&k_cache, InputRole::kKey},
                         {&v_cache, InputRole::kValue}, {&k_new, InputRole::kKey}, {&v_new, InputRole::kValue}})
    if (t->data) HFA_RETURN_IF_ERROR(fill_values(*t, t->numel(), c.values, role, ++salt));
  if (c.wide_q_range) HFA_RETURN_IF_ERROR(widen_q_range());
  return poison_outputs();
}

Status DecodeBuffers::widen_q_range() {
  if (q.dtype != DType::kBF16)
    return make_error(StatusCode::kInvalidArgument, "wide_q_range: a bf16 q (fp16 cannot hold it)");
  std::vector<uint8_t> bytes;
  HFA_RETURN_IF_ERROR(download_view(q, &bytes));
  auto* e = reinterpret_cast<__nv_bfloat16*>(bytes.data());
  const int64_t rows = q.numel() / config.head_dim;  // (batch, seqlen_q, heads_q) rows, packed
  for (int64_t r = 0; r < rows; ++r) {
    const float factor = std::ldexp(1.f, static_cast<int>(r % 5) * 8 - 16);  // exact in bf16
    for (int i = 0; i < config.head_dim; ++i) {
      __nv_bfloat16& x = e[r * config.head_dim + i];
      x = __float2bfloat16(__bfloat162float(x) * factor);
    }
  }
  return cuda_status(cudaMemcpy(q.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                     "uploading the widened q");
}

Status DecodeBuffers::poison_outputs() {
  for (TensorView* t : {&out, &lse})
    if (t->data)
      HFA_RETURN_IF_ERROR(cuda_status(cudaMemset(t->data, 0xFF, t->numel() * size_of(t->dtype)),
                                      "poisoning decode outputs"));
  return cuda_status(cudaDeviceSynchronize(), "poisoning decode outputs");
}

DecodeArgs DecodeBuffers::args() const {
  DecodeArgs a;
  a.q = q, a.k_cache = k_cache, a.v_cache = v_cache, a.out = out, a.lse = lse;
  a.cache_seqlens = cache_seqlens, a.page_table = page_table, a.cache_batch_idx = cache_batch_idx;
  a.k_new = k_new, a.v_new = v_new;
  a.k_descale = k_descale, a.v_descale = v_descale;
  a.softmax_scale = config.softmax_scale;
  a.causal = config.causal;
  a.num_splits = config.num_splits;
  a.window_left = config.window_left, a.window_right = config.window_right;
  a.softcap = config.softcap;
  a.sinks = sinks;
  return a;
}

std::string DecodeCheckResult::summary() const {
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "max_abs %.3e (tol %.3e = 2 x baseline %.3e + atol) lse_err %.2e (tol %.2e) rows %lld %s",
                max_abs_err, tolerance, baseline_max_abs_err, lse_max_abs_err, lse_tolerance,
                static_cast<long long>(rows_checked), pass ? "PASS" : "FAIL");
  return buf;
}

Status run_decode_check(DecodeBuffers& buf, int64_t max_rows, DecodeCheckResult* result,
                        const std::function<Status(const DecodeArgs&)>& run) {
  *result = DecodeCheckResult{};
  const DecodeConfig& c = buf.config;
  const int64_t cache_bytes = 2 * buf.k_cache.numel() * size_of(c.cache_dtype());
  if (cache_bytes > kMaxCheckedCacheBytes)
    return make_error(StatusCode::kInvalidArgument, "check: a %lld-byte cache is too large to check "
                      "on the host (at most %lld)", static_cast<long long>(cache_bytes),
                      static_cast<long long>(kMaxCheckedCacheBytes));
  std::vector<uint8_t> k_before, v_before, hq, hk_new, hv_new, k_after, v_after, ho;
  HFA_RETURN_IF_ERROR(download_view(buf.k_cache, &k_before));
  HFA_RETURN_IF_ERROR(download_view(buf.v_cache, &v_before));
  HFA_RETURN_IF_ERROR(buf.poison_outputs());
  const DecodeArgs args = buf.args();
  Status st = run ? run(args) : decode(args);
  if (st.ok()) st = cuda_status(cudaDeviceSynchronize(), "running decode");
  if (!st.ok()) {
    result->message = st.message;
    return st;
  }
  for (auto [t, bytes] : {std::pair{&buf.q, &hq}, {&buf.k_new, &hk_new}, {&buf.v_new, &hv_new},
                          {&buf.k_cache, &k_after}, {&buf.v_cache, &v_after}, {&buf.out, &ho}})
    if (t->data) HFA_RETURN_IF_ERROR(download_view(*t, bytes));
  std::vector<float> hlse;
  if (buf.lse.data) {
    hlse.resize(buf.lse.numel());
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(hlse.data(), buf.lse.data, hlse.size() * 4,
                                               cudaMemcpyDeviceToHost), "copying lse"));
  }
  std::vector<int> table, batch_idx;
  if (buf.page_table.data) {
    table.resize(static_cast<size_t>(c.batch) * buf.page_table.stride[0]);
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(table.data(), buf.page_table.data, table.size() * 4,
                                               cudaMemcpyDeviceToHost), "copying the page table"));
  }
  if (buf.cache_batch_idx.data) {
    batch_idx.resize(c.batch);
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(batch_idx.data(), buf.cache_batch_idx.data, c.batch * 4,
                                               cudaMemcpyDeviceToHost), "copying cache_batch_idx"));
  }
  const int64_t d = c.head_dim, hkv = c.heads_kv;
  // Element offset of (sequence b, key j, KV head h, channel 0) in the cache; -1 for a key in an
  // evicted page (DecodeConfig::evict_pages_before_window).
  auto cache_offset = [&](int b, int j, int h) -> int64_t {
    const TensorView& t = buf.k_cache;
    if (!table.empty()) {
      const int page = table[b * buf.page_table.stride[0] + j / c.page_size];
      if (page < 0) return -1;
      return page * t.stride[0] + (j % c.page_size) * t.stride[1] + h * t.stride[2];
    }
    const int row = batch_idx.empty() ? b : batch_idx[b];
    return row * t.stride[0] + static_cast<int64_t>(j) * t.stride[1] + h * t.stride[2];
  };

  // The cache: appended slots hold k_new / v_new, every other element is unchanged.
  const int esize = size_of(c.cache_dtype());
  std::vector<uint8_t> expect_k = k_before, expect_v = v_before;
  for (int b = 0; b < c.batch; ++b)
    for (int t = 0; t < c.seqlen_new; ++t)
      for (int h = 0; h < hkv; ++h) {
        const int64_t dst = cache_offset(b, buf.seqlens[b] + t, h) * esize;
        const int64_t src = ((static_cast<int64_t>(b) * c.seqlen_new + t) * hkv + h) * d * esize;
        std::memcpy(&expect_k[dst], &hk_new[src], d * esize);
        std::memcpy(&expect_v[dst], &hv_new[src], d * esize);
        result->appended_wrong += std::memcmp(&k_after[dst], &hk_new[src], d * esize) != 0;
        result->appended_wrong += std::memcmp(&v_after[dst], &hv_new[src], d * esize) != 0;
      }
  for (size_t i = 0; i < k_after.size(); i += esize) {
    result->cache_clobbered += std::memcmp(&k_after[i], &expect_k[i], esize) != 0;
    result->cache_clobbered += std::memcmp(&v_after[i], &expect_v[i], esize) != 0;
  }

  // Every output element written.
  for (int64_t i = 0; i < buf.out.numel(); ++i)
    result->unwritten += std::isnan(element_at(c.dtype, ho, i));
  for (float x : hlse) result->unwritten += std::isnan(x);

  // Rows to compare with the reference: (b, token, head), all or a random subset.
  const int64_t total = static_cast<int64_t>(c.batch) * c.seqlen_q * c.heads_q;
  std::vector<int64_t> rows(total);
  for (int64_t r = 0; r < total; ++r) rows[r] = r;
  if (max_rows > 0 && total > max_rows) {
    std::mt19937_64 rng(12345);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(max_rows);
  }
  result->rows_checked = static_cast<int64_t>(rows.size());
  const reference::Precision prec =
      c.dtype == DType::kFP16 ? reference::Precision::kFP16 : reference::Precision::kBF16;
  const double scale = c.softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  std::atomic<size_t> next{0};
  struct Err { double o = 0, base = 0, lse = 0, lse_base = 0; int64_t masked = 0; };
  const int n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<Err> errs(n_threads);
  auto worker = [&](int w) {
    Err& e = errs[w];
    std::vector<double> qb, kb, vb, ref(d), base(d);
    for (size_t r; (r = next.fetch_add(1)) < rows.size();) {
      const int64_t row = rows[r];  // (b, token, head) order, as out is laid out
      const int h = static_cast<int>(row % c.heads_q), i = static_cast<int>((row / c.heads_q) % c.seqlen_q);
      const int b = static_cast<int>(row / (static_cast<int64_t>(c.heads_q) * c.seqlen_q));
      const int hk = h / (c.heads_q / c.heads_kv);
      const int n = buf.seqlens[b] + c.seqlen_new;
      // One sequence, one KV head, one query row: the reference's (1, 1, 1, 1, d) problem.
      reference::Shape s;
      s.batch = 1, s.seqlen_q = c.seqlen_q, s.seqlen_k = n, s.heads_q = 1, s.heads_kv = 1;
      s.head_dim = c.head_dim, s.scale = scale, s.causal = c.causal;
      s.window_left = c.window_left, s.window_right = c.window_right;
      s.softcap = c.softcap;
      const double sink = c.sinks ? buf.sinks_host[static_cast<size_t>(h) * 2] : 0.0;
      if (c.sinks) s.sinks = &sink;  // (the one-head problem's head 0)
      qb.assign(static_cast<size_t>(c.seqlen_q) * d, 0.0);
      for (int x = 0; x < d; ++x)
        qb[static_cast<size_t>(i) * d + x] = element_at(c.dtype, hq, offset4(buf.q, b, i, h, x));
      kb.resize(static_cast<size_t>(n) * d);
      vb.resize(static_cast<size_t>(n) * d);
      // An e4m3 cache stands for its values times the (b, hk) descales.
      const DType ct = c.cache_dtype();
      const double k_factor = c.fp8_cache ? buf.k_descale_host[b * buf.k_descale.stride[0] + hk] : 1.0;
      const double v_factor = c.fp8_cache ? buf.v_descale_host[b * buf.v_descale.stride[0] + hk] : 1.0;
      for (int j = 0; j < n; ++j) {
        const int64_t off = cache_offset(b, j, hk);
        if (off < 0) {  // an evicted page: keys no row sees (zeros, for the reference's sake)
          std::fill_n(&kb[static_cast<size_t>(j) * d], d, 0.0);
          std::fill_n(&vb[static_cast<size_t>(j) * d], d, 0.0);
          continue;
        }
        for (int x = 0; x < d; ++x) {
          kb[static_cast<size_t>(j) * d + x] = element_at(ct, k_after, off + x) * k_factor;
          vb[static_cast<size_t>(j) * d + x] = element_at(ct, v_after, off + x) * v_factor;
        }
      }
      double ref_lse, base_lse;
      reference::forward_row(s, qb.data(), kb.data(), vb.data(), 0, 0, i, ref.data(), &ref_lse);
      reference::forward_row_lowp(s, prec, qb.data(), kb.data(), vb.data(), 0, 0, i, base.data(), &base_lse);
      bool masked_ok = true;
      for (int x = 0; x < d; ++x) {
        const double got = element_at(c.dtype, ho, offset4(buf.out, b, i, h, x));
        const double err = std::fabs(got - ref[x]);
        e.o = std::isnan(err) ? INFINITY : std::max(e.o, err);
        e.base = std::max(e.base, std::fabs(base[x] - ref[x]));
        if (std::isinf(ref_lse) && got != 0.0) masked_ok = false;
      }
      if (!hlse.empty()) {
        e.lse = std::max(e.lse, lse_row_error(buf.lse, hlse, b, h, i, ref_lse, &masked_ok));
        if (!std::isinf(ref_lse)) e.lse_base = std::max(e.lse_base, std::fabs(base_lse - ref_lse));
      }
      e.masked += !masked_ok;
    }
  };
  std::vector<std::thread> pool;
  for (int w = 0; w < n_threads; ++w) pool.emplace_back(worker, w);
  for (auto& th : pool) th.join();
  double lse_base = 0;
  for (const Err& e : errs) {
    result->max_abs_err = std::max(result->max_abs_err, e.o);
    result->baseline_max_abs_err = std::max(result->baseline_max_abs_err, e.base);
    result->lse_max_abs_err = std::max(result->lse_max_abs_err, e.lse);
    lse_base = std::max(lse_base, e.lse_base);
    result->masked_row_errors += e.masked;
  }
  result->tolerance = 2 * result->baseline_max_abs_err + output_atol(c.dtype);
  result->lse_tolerance = 2 * lse_base + kLseAtol;

  std::string why;
  if (result->unwritten) why += std::to_string(result->unwritten) + " output elements unwritten or NaN; ";
  if (result->masked_row_errors)
    why += std::to_string(result->masked_row_errors) + " rows with no visible key not O=0/LSE=-inf; ";
  if (result->appended_wrong) why += std::to_string(result->appended_wrong) + " appended rows wrong; ";
  if (result->cache_clobbered)
    why += std::to_string(result->cache_clobbered) + " cache elements differ from the cache before plus the appended rows; ";
  if (!(result->max_abs_err <= result->tolerance)) why += "O error over tolerance; ";
  if (!(result->lse_max_abs_err <= result->lse_tolerance)) why += "LSE error over tolerance; ";
  result->pass = why.empty();
  result->message = why + result->summary();
  return Status::Ok();
}

}  // namespace hfa::check
