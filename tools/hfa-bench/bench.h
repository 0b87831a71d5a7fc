// hfa-bench internals: run one configuration (check + time), the sweep, table and JSON output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check/check.h"

namespace hfa::bench {

struct Options {
  bool check = false;
  int64_t check_rows = 2048;  // random (batch, head, row) subset checked against the reference
  int warmup = 5;
  int iters = 30;
  uint64_t seed = 0;  // 0: a fresh seed per run (printed, so a failure can be replayed)
  bool backward = false;  // time (and check) the backward pass; TFLOPS = 2.5 x forward FLOPs
  int check_groups = 2;   // backward --check: random (batch, KV head) groups compared
  bool pages_in_order = false;  // --decode --page-order in-order: paged caches' pages unshuffled
  check::Values values = check::Values::kNormal;  // --values: what the inputs are drawn from
};

// One line of results, in the DESIGN.md JSON schema.
struct Row {
  std::string impl;  // kernel name
  std::string kind = "fwd";
  check::Config config;
  double ms = 0, tflops = 0;
  double gbps = 0;    // decode: bytes of K and V read per second / 1e9
  int page_size = 0;  // decode: 0 contiguous cache, else the paged cache's page size
  int num_splits = 0; // decode: the plan's split count
  DType kv_dtype = DType::kBF16;  // decode: the cache's dtype (q's, or e4m3)
  double host_us = 0; // decode: host time of one planned decode() call (validation + launches),
                      // median over rounds of calls issued to an idle GPU
  std::optional<bool> check_pass;  // unset: not checked
  double max_abs_err = 0, rel_rms = 0;
  std::string check_detail;  // the forward check's summary: errors, tolerances, FP8 allowances
  std::string error;  // set when the kernel did not run (unsupported, out of memory, ...)
};

// The seeds' sweep: s in {512, ..., 16384}, batch = 16384 / s, heads = 2048 / d,
// d in head_dims, causal in {0, 1}.
std::vector<check::Config> sweep_configs(DType dtype, const std::vector<int>& head_dims);

// Checks (if asked) and times `config` with config.kernel. Never throws; errors go to row.error.
Row run_config(const check::Config& config, const Options& options, uint64_t seed);

// Flash decode (hfa::decode): one new token (seqlen_q) per sequence against full caches of
// seqlen_k keys. The sweep: batch {1, 8, 32, 64, 128} x KV length {2k, 8k, 16k, 64k}, 32 query /
// 8 KV heads, d = 128; then MHA 32/32 and d = 64 / 256 at a few points. Each config is run for
// every page size in `page_sizes` (0 = contiguous).
std::vector<check::Config> decode_sweep_configs(DType dtype);
// Checks (on a smaller batch where the cache is too large to check on the host) and times one
// decode configuration; row.impl is "decode" or "decode_paged", with "_e4m3" for an e4m3 cache.
// num_splits: DecodeArgs::num_splits (0 = the heuristic's choice).
Row run_decode_config(const check::Config& config, int page_size, int num_splits, bool fp8_cache,
                      const Options& options, uint64_t seed);

std::string format_row(const Row& row);  // one table line
std::string table_header();

struct RunInfo {
  std::string gpu, date, commit, command;
};
RunInfo collect_run_info(int argc, char** argv);
bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                std::string* error);

}  // namespace hfa::bench
