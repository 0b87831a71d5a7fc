// hfa-bench --decode: flash decode's sweep, check and timing (bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench.h"
#include "check/check_decode.h"
#include "common/status_util.h"

namespace hfa::bench {

std::vector<check::Config> decode_sweep_configs(DType dtype) {
  std::vector<check::Config> out;
  auto add = [&](int batch, int seqlen_k, int heads_q, int heads_kv, int d) {
    check::Config c;
    c.dtype = dtype, c.batch = batch, c.seqlen_q = 1, c.seqlen_k = seqlen_k;
    c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = d;
    out.push_back(c);
  };
  for (int batch : {1, 8, 32, 64, 128})
    for (int sk : {2048, 8192, 16384, 65536}) add(batch, sk, 32, 8, 128);
  for (auto [batch, sk] : {std::pair{1, 65536}, {8, 8192}, {64, 16384}}) {
    add(batch, sk, 32, 32, 128);  // MHA
    add(batch, sk, 32, 8, 64);
    add(batch, sk, 32, 8, 256);
  }
  return out;
}

namespace {

check::DecodeConfig to_decode(const check::Config& c, int page_size, bool fp8_cache) {
  check::DecodeConfig d;
  d.fp8_cache = fp8_cache;
  d.dtype = c.dtype, d.batch = c.batch, d.seqlen_q = c.seqlen_q, d.heads_q = c.heads_q;
  d.heads_kv = c.heads_kv, d.head_dim = c.head_dim, d.capacity = c.seqlen_k, d.page_size = page_size;
  d.causal = c.causal, d.full = true;
  d.window_left = c.window_left, d.window_right = c.window_right;
  d.softcap = c.softcap, d.sinks = c.sinks;
  return d;
}

// K and V bytes of one sequence's cache, both tensors.
int64_t cache_bytes_per_sequence(const check::DecodeConfig& d) {
  return int64_t{2} * d.capacity * d.heads_kv * d.head_dim * size_of(d.cache_dtype());
}

}  // namespace

Row run_decode_config(const check::Config& config, int page_size, int num_splits, bool fp8_cache,
                      const Options& options, uint64_t seed) {
  Row row;
  row.impl = std::string(page_size ? "decode_paged" : "decode") + (fp8_cache ? "_e4m3" : "");
  row.kind = "decode";
  row.config = config;
  row.page_size = page_size;
  check::DecodeConfig dc = to_decode(config, page_size, fp8_cache);
  dc.shuffled_pages = !options.pages_in_order;
  dc.values = options.values;
  if (page_size && options.pages_in_order) row.impl += "_pages_in_order";
  row.kv_dtype = dc.cache_dtype();
  Status st;
  if (options.check) {
    // The host checker reads whole caches: check as many sequences as fit in 512 MB.
    check::DecodeConfig small = dc;
    small.batch = static_cast<int>(std::clamp<int64_t>((int64_t{512} << 20) / cache_bytes_per_sequence(dc), 1, dc.batch));
    small.full = false;  // random lengths for the check
    check::DecodeBuffers buf;
    small.num_splits = num_splits;
    st = buf.allocate(small, seed);
    check::DecodeCheckResult result;
    if (st.ok()) st = check::run_decode_check(buf, options.check_rows, &result);
    if (st.ok()) {
      row.check_pass = result.pass;
      row.max_abs_err = result.max_abs_err;
      if (!result.pass) row.error = result.message;
    }
  }
  check::DecodeBuffers buf;
  if (st.ok()) st = buf.allocate(dc, seed + 1);
  DecodePlan plan;
  DecodeArgs args = buf.args();
  args.num_splits = num_splits;
  if (st.ok()) st = plan_decode(args, &plan);
  void* workspace = nullptr;
  if (st.ok() && plan.workspace_bytes > 0)
    st = cuda_status(cudaMalloc(&workspace, plan.workspace_bytes), "allocating the decode workspace");
  if (st.ok()) {
    row.num_splits = plan.num_splits;
    st = check::time_launches([&] { return decode(args, plan, workspace, plan.workspace_bytes); },
                              options.warmup, options.iters, &row.ms);
  }
  if (st.ok()) row.gbps = dc.kv_bytes(buf.seqlens) / (row.ms * 1e-3) / 1e9;
  if (st.ok()) {
    // The host's cost of a planned call (validation and the launches): rounds of kCalls calls
    // issued to an idle GPU (a synchronize before each round), so that no call waits for room in
    // the launch queue; the median round's time per call.
    constexpr int kCalls = 16, kRounds = 15;
    std::vector<double> per_call;
    for (int round = 0; round < kRounds && st.ok(); ++round) {
      st = cuda_status(cudaDeviceSynchronize(), "decode host-cost calls");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls && st.ok(); ++i) st = decode(args, plan, workspace, plan.workspace_bytes);
      const auto t1 = std::chrono::steady_clock::now();
      per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
    }
    if (st.ok()) st = cuda_status(cudaDeviceSynchronize(), "decode host-cost calls");
    if (st.ok()) {
      std::sort(per_call.begin(), per_call.end());
      row.host_us = per_call[per_call.size() / 2];
    }
  }
  cudaFree(workspace);
  if (!st.ok()) row.error = std::string(to_string(st.code)) + ": " + st.message;
  cudaGetLastError();
  return row;
}

}  // namespace hfa::bench
