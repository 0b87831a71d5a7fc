// hfa-bench: run any kernel of the ladder by name, check it against the fp64 reference, report
// TFLOPS. The worklog's `CHECK=1 SEQLEN=512 HEADDIM=64 CAUSAL=0 python bench.py k4` is
// `CHECK=1 SEQLEN=512 HEADDIM=64 CAUSAL=0 hfa-bench k4`, or with flags
// `hfa-bench k4 --seqlen 512 --headdim 64 --check`.
//
// Exit status: 0 all ran (and passed, with --check); 1 a check failed; 2 bad usage, no GPU, or a
// kernel that could not run.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "hfa/hfa.h"
#include "kernels/decode/decode.h"

namespace {

void print_kernel_list() {
  std::printf("%-8s %s\n", "kernel", "description / supports");
  for (const hfa::KernelInfo& k : hfa::list_kernels())
    std::printf("%-8s %s\n%-8s   supports: %s\n", k.name.c_str(), k.description.c_str(), "",
                k.supports.c_str());
  std::printf("%-8s %s\n", "auto", "the fastest kernel that supports the arguments (what hfa::forward uses by default)");
  std::printf("\nbackward kernels (--bwd):\n");
  for (const hfa::KernelInfo& k : hfa::list_backward_kernels())
    std::printf("%-8s %s\n%-8s   supports: %s\n", k.name.c_str(), k.description.c_str(), "",
                k.supports.c_str());
}

bool have_gpu(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    *why = err != cudaSuccess ? cudaGetErrorString(err) : "no devices";
    return false;
  }
  return true;
}

struct DecodeOptions {
  bool sweep;
  int seqlen, seqlen_k, head_dim, batch, heads, heads_kv;
  bool causal;
  std::string dtype_name, kv_dtype_name, json_path;
  std::vector<int> page_sizes;
  std::vector<int> num_splits;  // 0 = the heuristic's choice
  std::vector<int> window;      // the variants (--window, --softcap, --sinks), for every config
  float softcap;
  bool sinks;
};

// hfa-bench --decode: the decode sweep or one configuration, for every page size.
int run_decode(const CLI::App& app, hfa::bench::Options opt, const DecodeOptions& o, int argc, char** argv) {
  if (opt.seed == 0)
    opt.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::fprintf(stderr, "hfa-bench: seed %llu\n", static_cast<unsigned long long>(opt.seed));
  const hfa::DType dtype = o.dtype_name == "fp16" ? hfa::DType::kFP16 : hfa::DType::kBF16;
  if (o.dtype_name == "e4m3") {
    std::fprintf(stderr, "hfa-bench: --decode takes a bf16 or fp16 q (--dtype); an e4m3 cache is "
                 "--kv-dtype e4m3\n");
    return 2;
  }
  if (!o.kv_dtype_name.empty() && o.kv_dtype_name != "e4m3" && o.kv_dtype_name != o.dtype_name) {
    std::fprintf(stderr, "hfa-bench: --kv-dtype %s; the cache is q's dtype (%s) or e4m3\n",
                 o.kv_dtype_name.c_str(), o.dtype_name.c_str());
    return 2;
  }
  const bool fp8_cache = o.kv_dtype_name == "e4m3";
  std::vector<hfa::check::Config> configs;
  if (o.sweep) {
    configs = hfa::bench::decode_sweep_configs(dtype);
  } else {
    hfa::check::Config c;
    c.dtype = dtype;
    c.seqlen_q = app.count("--seqlen") ? o.seqlen : 1;
    c.seqlen_k = app.count("--seqlen-k") ? o.seqlen_k : 8192;
    c.head_dim = app.count("--headdim") ? o.head_dim : 128;
    c.batch = o.batch > 0 ? o.batch : 1;
    c.heads_q = o.heads > 0 ? o.heads : 32;
    c.heads_kv = o.heads_kv > 0 ? o.heads_kv : 8;
    c.causal = o.causal;
    configs.push_back(c);
  }
  for (hfa::check::Config& c : configs) {
    if (!o.window.empty()) c.window_left = o.window[0], c.window_right = o.window[1];
    c.softcap = o.softcap;
    c.sinks = o.sinks;
  }
  std::vector<hfa::bench::Row> rows;
  int failures = 0, not_run = 0, n = 0;
  const int total = static_cast<int>(configs.size() * o.page_sizes.size() * o.num_splits.size());
  for (const hfa::check::Config& c : configs)
    for (int page : o.page_sizes)
      for (int splits : o.num_splits) {
        hfa::bench::Row row = hfa::bench::run_decode_config(c, page, splits, fp8_cache, opt, opt.seed + 7919 * n);
        ++n;
        if (row.check_pass && !*row.check_pass) ++failures;
        if (row.ms <= 0) ++not_run;
        std::fprintf(stderr, "[%d/%d] %s\n", n, total, hfa::bench::format_row(row).c_str());
        rows.push_back(row);
      }
  for (const hfa::bench::Row& r : rows) std::printf("%s\n", hfa::bench::format_row(r).c_str());
  if (!o.json_path.empty()) {
    std::string err;
    if (!hfa::bench::write_json(o.json_path, hfa::bench::collect_run_info(argc, argv), rows, &err)) {
      std::fprintf(stderr, "hfa-bench: %s\n", err.c_str());
      return 2;
    }
    std::fprintf(stderr, "hfa-bench: wrote %s\n", o.json_path.c_str());
  }
  if (failures) std::fprintf(stderr, "hfa-bench: %d check(s) FAILED\n", failures);
  if (not_run) std::fprintf(stderr, "hfa-bench: %d configuration(s) did not run\n", not_run);
  return failures ? 1 : (not_run && !o.sweep ? 2 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hfa-bench: run, check and time hfa attention kernels"};
  std::vector<std::string> kernels;
  bool list = false, sweep = false, causal = false;
  int seqlen = 512, seqlen_k = 0, head_dim = 64, batch = 0, heads = 0, heads_kv = 0;
  std::string dtype_name = "bf16", json_path;
  std::vector<int> sweep_dims = {64, 128, 256};
  hfa::bench::Options opt;

  app.add_option("kernels", kernels, "kernel names (see --list); default: auto");
  app.add_flag("--list", list, "list the kernels and what each supports, then exit");
  app.add_option("--seqlen", seqlen, "query sequence length")->envname("SEQLEN")->check(CLI::NonNegativeNumber);
  app.add_option("--seqlen-k", seqlen_k, "key/value sequence length (default: --seqlen)")->check(CLI::NonNegativeNumber);
  app.add_option("--headdim", head_dim, "head dimension")->envname("HEADDIM")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch (default: 16384 / seqlen, at least 1)")->envname("BATCH")->check(CLI::NonNegativeNumber);
  app.add_option("--heads", heads, "query heads (default: 2048 / headdim)")->envname("HEADS")->check(CLI::PositiveNumber);
  app.add_option("--heads-kv", heads_kv, "key/value heads, GQA/MQA (default: --heads)")->check(CLI::PositiveNumber);
  app.add_flag("--causal", causal, "causal mask (bottom-right aligned)")->envname("CAUSAL");
  app.add_option("--dtype", dtype_name, "bf16, fp16 or e4m3 (default: e4m3 for FP8 kernels such as k7, else bf16)")
      ->envname("DTYPE")->check(CLI::IsMember({"bf16", "fp16", "e4m3"}));
  std::string out_dtype_name = "bf16";
  app.add_option("--out-dtype", out_dtype_name, "output dtype with e4m3 inputs: bf16 or fp16")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_flag("--check", opt.check, "check against the fp64 CPU reference; exit 1 on FAIL")->envname("CHECK");
  app.add_option("--check-rows", opt.check_rows, "rows checked per configuration (random subset when more)");
  app.add_flag("--bwd", opt.backward, "the backward pass (backward kernels: see --list); TFLOPS = 2.5 x forward FLOPs");
  bool deterministic = false;
  app.add_flag("--deterministic", deterministic,
               "--bwd: BackwardArgs::deterministic (bit-identical gradients); rows named <kernel>_deterministic");
  app.add_option("--check-groups", opt.check_groups, "--bwd --check: (batch, KV head) groups checked (random subset; 0 = all)")->check(CLI::NonNegativeNumber);
  std::vector<int> window;
  app.add_option("--window", window, "sliding window LEFT,RIGHT (-1 = unbounded; ForwardArgs::window_left/right)")
      ->delimiter(',')->expected(2);
  float softcap = 0.f;
  app.add_option("--softcap", softcap, "softcap (scores become softcap * tanh(scores / softcap); 0 = off)");
  bool sinks = false;
  app.add_flag("--sinks", sinks, "attention sinks: a random fp32 logit per query head in [-1, 4)");
  int varlen_total = 0;
  std::vector<int> varlen_range = {100, 4000};
  app.add_option("--varlen", varlen_total,
                 "a variable-length batch (cu_seqlens) of this many tokens, in sequences of random "
                 "lengths (--varlen-range; from --seed), keys = queries; --batch and --seqlen unused")
      ->check(CLI::PositiveNumber);
  app.add_option("--varlen-range", varlen_range, "--varlen: MIN,MAX sequence length (default 100,4000)")
      ->delimiter(',')->expected(2);
  std::string values_name = "normal";
  app.add_option("--values", values_name,
                 "what Q, K, V (and decode's caches) are drawn from: normal (default), wide, uniform, "
                 "outliers, ramp or positive-v (check/check.h: Values)")
      ->check(CLI::IsMember({"normal", "wide", "uniform", "outliers", "ramp", "positive-v"}));
  app.add_flag("--sweep", sweep, "run the seeds' sweep: s=512..16384, batch=16384/s, heads=2048/d, causal 0/1");
  app.add_option("--sweep-headdims", sweep_dims, "head dims of the sweep")->delimiter(',');
  app.add_option("--json", json_path, "write the results as JSON (DESIGN.md schema)");
  app.add_option("--iters", opt.iters, "timed iterations (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed warm-up iterations")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", opt.seed, "random seed (default: fresh each run)");
  bool decode = false;
  std::vector<int> page_sizes = {0};
  app.add_flag("--decode", decode,
               "flash decode (hfa::decode): --seqlen new tokens (default 1) against full caches of "
               "--seqlen-k keys (default 8192), --batch (default 1), 32/8 heads, d 128 unless given; "
               "with --sweep, the decode sweep. Reports GB/s of K and V read");
  std::string kv_dtype_name;
  app.add_option("--kv-dtype", kv_dtype_name, "--decode: the cache's dtype, q's (default) or e4m3 "
                 "(with per-(batch, KV head) descales)");
  app.add_option("--page-size", page_sizes, "--decode: page sizes to run, 0 = contiguous cache (default 0)")
      ->delimiter(',');
  std::vector<int> num_splits = {0};
  app.add_option("--num-splits", num_splits,
                 "--decode: split counts to run (DecodeArgs::num_splits), 0 = the heuristic's (default 0)")
      ->delimiter(',')->check(CLI::Range(0, 256));
  std::string page_order = "shuffled";
  app.add_option("--page-order", page_order,
                 "--decode: a paged cache's pages shuffled (default; rows decode_paged*) or in-order, "
                 "sequence after sequence (rows decode_paged*_pages_in_order)")
      ->check(CLI::IsMember({"shuffled", "in-order"}));
  std::string decode_merge = "grid";
  app.add_option("--decode-merge", decode_merge,
                 "--decode, for A/Bs: where several splits are merged: in the split kernel's grid where "
                 "the device holds all its CTAs (grid, the library's default) or always by the merge "
                 "kernel after it (kernel); the rows keep their names")
      ->check(CLI::IsMember({"grid", "kernel"}));
  CLI11_PARSE(app, argc, argv);
  opt.pages_in_order = page_order == "in-order";
  if (decode_merge == "kernel") hfa::flash_decode::set_merge_in_grid_allowed(false);
  opt.values = hfa::check::parse_values(values_name).value();  // a member: checked by the parser

  if (list) {
    print_kernel_list();
    return 0;
  }
  if (deterministic && !opt.backward) {
    std::fprintf(stderr, "hfa-bench: --deterministic is a backward option: it needs --bwd\n");
    return 2;
  }
  std::string why;
  if (!have_gpu(&why)) {
    std::fprintf(stderr, "hfa-bench: no CUDA GPU available (%s); only --list works without one\n", why.c_str());
    return 2;
  }
  if (!decode && (app.count("--kv-dtype") || app.count("--page-size") || app.count("--num-splits") ||
                  app.count("--page-order"))) {
    std::fprintf(stderr, "hfa-bench: --kv-dtype, --page-size, --num-splits and --page-order are --decode options\n");
    return 2;
  }
  if (decode && varlen_total) {
    std::fprintf(stderr, "hfa-bench: --varlen is not a --decode option\n");
    return 2;
  }
  if (varlen_total && (sweep || varlen_range[0] < 1 || varlen_range[1] < varlen_range[0])) {
    std::fprintf(stderr, "hfa-bench: --varlen takes no --sweep, and --varlen-range needs 1 <= MIN <= MAX\n");
    return 2;
  }
  if (decode) {
    if (!kernels.empty() || opt.backward) {
      std::fprintf(stderr, "hfa-bench: --decode takes no kernel names and no --bwd\n");
      return 2;
    }
    return run_decode(app, opt, DecodeOptions{sweep, seqlen, seqlen_k, head_dim, batch, heads,
                                               heads_kv, causal, dtype_name, kv_dtype_name, json_path, page_sizes,
                                               num_splits, window, softcap, sinks},
                      argc, argv);
  }
  if (kernels.empty()) kernels = {"auto"};
  for (const std::string& k : kernels) {
    bool known = k == "auto";
    for (const hfa::KernelInfo& info : opt.backward ? hfa::list_backward_kernels() : hfa::list_kernels())
      known = known || info.name == k;
    if (!known) {
      std::fprintf(stderr, "hfa-bench: unknown %s kernel \"%s\" (see --list)\n",
                   opt.backward ? "backward" : "forward", k.c_str());
      return 2;
    }
  }
  if (opt.seed == 0)
    opt.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::fprintf(stderr, "hfa-bench: seed %llu\n", static_cast<unsigned long long>(opt.seed));

  const hfa::DType dtype = dtype_name == "fp16"   ? hfa::DType::kFP16
                           : dtype_name == "e4m3" ? hfa::DType::kE4M3
                                                  : hfa::DType::kBF16;
  const bool dtype_given = app.count("--dtype") > 0 || std::getenv("DTYPE") != nullptr;
  std::vector<hfa::check::Config> configs;
  if (sweep) {
    configs = hfa::bench::sweep_configs(dtype, sweep_dims);
  } else {
    hfa::check::Config c;
    c.dtype = dtype;
    c.seqlen_q = seqlen;
    c.seqlen_k = app.count("--seqlen-k") ? seqlen_k : seqlen;
    c.head_dim = head_dim;
    c.batch = batch > 0 ? batch : std::max(1, 16384 / std::max(1, seqlen));
    c.heads_q = heads > 0 ? heads : std::max(1, 2048 / head_dim);
    c.heads_kv = heads_kv > 0 ? heads_kv : c.heads_q;
    c.causal = causal;
    if (varlen_total) {  // random lengths until the total is reached; the last one is cut to fit
      std::mt19937_64 rng(opt.seed);
      std::uniform_int_distribution<int> length(varlen_range[0], varlen_range[1]);
      for (int left = varlen_total; left > 0;) {
        const int n = std::min(left, length(rng));
        c.varlen_q.push_back(n);
        left -= n;
      }
      c.varlen_k = c.varlen_q;
      c.batch = static_cast<int>(c.varlen_q.size());
      c.seqlen_q = c.seqlen_k = *std::max_element(c.varlen_q.begin(), c.varlen_q.end());
    }
    configs.push_back(c);
  }

  // Kernels interleaved per configuration, so clock drift hits all of them alike.
  std::vector<hfa::bench::Row> rows;
  int failures = 0, not_run = 0, n = 0;
  const int total = static_cast<int>(configs.size() * kernels.size());
  for (hfa::check::Config c : configs)
    for (const std::string& k : kernels) {
      c.kernel = k;
      c.dtype = dtype;
      c.deterministic = deterministic;
      c.fp8_block_scales = false;
      if (!window.empty()) {
        c.window_left = window[0];
        c.window_right = window[1];
      }
      c.softcap = softcap;
      c.sinks = sinks;
      c.values = opt.values;
      // An FP8 kernel gets its inputs (e4m3, per-head or block descales) unless --dtype says
      // otherwise (then it refuses by name).
      if ((!dtype_given && !opt.backward) || dtype == hfa::DType::kE4M3)
        hfa::check::use_kernel_inputs(&c, k);
      c.fp8_out_dtype = out_dtype_name == "fp16" ? hfa::DType::kFP16 : hfa::DType::kBF16;
      hfa::bench::Row row = hfa::bench::run_config(c, opt, opt.seed + 7919 * n);
      ++n;
      if (row.check_pass && !*row.check_pass) ++failures;
      if (row.ms <= 0) ++not_run;
      std::fprintf(stderr, "[%d/%d] %s\n", n, total, hfa::bench::format_row(row).c_str());
      rows.push_back(row);
    }

  std::printf("%s\n", hfa::bench::table_header().c_str());
  for (const hfa::bench::Row& r : rows) std::printf("%s\n", hfa::bench::format_row(r).c_str());
  if (!json_path.empty()) {
    std::string err;
    if (!hfa::bench::write_json(json_path, hfa::bench::collect_run_info(argc, argv), rows, &err)) {
      std::fprintf(stderr, "hfa-bench: %s\n", err.c_str());
      return 2;
    }
    std::fprintf(stderr, "hfa-bench: wrote %s\n", json_path.c_str());
  }
  if (failures) std::fprintf(stderr, "hfa-bench: %d check(s) FAILED\n", failures);
  if (not_run) std::fprintf(stderr, "hfa-bench: %d configuration(s) did not run\n", not_run);
  return failures ? 1 : (not_run && !sweep ? 2 : 0);
}
