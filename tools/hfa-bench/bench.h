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
};

// One line of results, in the DESIGN.md JSON schema.
struct Row {
  std::string impl;  // kernel name
  std::string kind = "fwd";
  check::Config config;
  double ms = 0, tflops = 0;
  std::optional<bool> check_pass;  // unset: not checked
  double max_abs_err = 0, rel_rms = 0;
  std::string error;  // set when the kernel did not run (unsupported, out of memory, ...)
};

// The seeds' sweep: s in {512, ..., 16384}, batch = 16384 / s, heads = 2048 / d,
// d in head_dims, causal in {0, 1}.
std::vector<check::Config> sweep_configs(DType dtype, const std::vector<int>& head_dims);

// Checks (if asked) and times `config` with config.kernel. Never throws; errors go to row.error.
Row run_config(const check::Config& config, const Options& options, uint64_t seed);

std::string format_row(const Row& row);  // one table line
std::string table_header();

struct RunInfo {
  std::string gpu, date, commit, command;
};
RunInfo collect_run_info(int argc, char** argv);
bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                std::string* error);

}  // namespace hfa::bench
