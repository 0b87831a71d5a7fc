#include "bench.h"

#include "common/status_util.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#ifndef HFA_GIT_COMMIT
#define HFA_GIT_COMMIT "unknown"
#endif

namespace hfa::bench {

std::vector<check::Config> sweep_configs(DType dtype, const std::vector<int>& head_dims) {
  std::vector<check::Config> out;
  for (int d : head_dims)
    for (int causal = 0; causal <= 1; ++causal)
      for (int s = 512; s <= 16384; s *= 2) {
        check::Config c;
        c.dtype = dtype;
        c.head_dim = d;
        c.causal = causal;
        c.seqlen_q = c.seqlen_k = s;
        c.batch = 16384 / s;
        c.heads_q = c.heads_kv = 2048 / d;
        out.push_back(c);
      }
  return out;
}

namespace {

// The backward: check (forward then backward, all gradients compared), then time the backward
// alone on the forward's out and lse.
Status run_backward(check::DeviceBuffers& buffers, const Options& options, uint64_t seed, Row* row) {
  if (options.check) {
    check::BackwardCheckResult result;
    HFA_RETURN_IF_ERROR(check::run_check_backward(buffers, seed, options.check_groups, &result));
    row->check_pass = result.pass;
    row->max_abs_err = std::max({result.dq.max_abs_err, result.dk.max_abs_err, result.dv.max_abs_err});
    row->rel_rms = std::max({result.dq.rel_rms, result.dk.rel_rms, result.dv.rel_rms});
    if (!result.pass) row->error = result.message;
  }
  HFA_RETURN_IF_ERROR(buffers.fill_random(seed + 1));
  ForwardArgs fwd = buffers.forward_args();
  fwd.kernel = "auto";  // out and lse for the timed backward: any correct forward
  HFA_RETURN_IF_ERROR(forward(fwd));
  HFA_RETURN_IF_ERROR(check::time_backward(buffers, options.warmup, options.iters, &row->ms));
  row->tflops = 2.5 * check::forward_flops(row->config) / (row->ms * 1e-3) / 1e12;
  return Status::Ok();
}

}  // namespace

Row run_config(const check::Config& config, const Options& options, uint64_t seed) {
  Row row;
  row.impl = config.kernel + (options.backward && config.deterministic ? "_deterministic" : "");
  row.config = config;
  row.config.backward = options.backward;
  row.kind = std::string(options.backward ? "bwd" : "fwd") + (config.varlen() ? "_varlen" : "");
  check::DeviceBuffers buffers;
  Status st = buffers.allocate(row.config);
  if (st.ok() && options.backward) {
    st = run_backward(buffers, options, seed, &row);
  } else {
    if (st.ok() && options.check) {
      check::CheckResult result;
      st = check::run_check(buffers, seed, options.check_rows, &result);
      if (st.ok()) {
        row.check_pass = result.pass;
        row.max_abs_err = result.max_abs_err;
        row.rel_rms = result.rel_rms;
        row.check_detail = result.summary();
        if (!result.pass) row.error = result.message;
      }
    }
    if (st.ok()) {
      st = buffers.fill_random(seed + 1);  // time on fresh random data, never zeros
      if (st.ok()) st = check::time_forward(buffers, options.warmup, options.iters, &row.ms);
      if (st.ok()) row.tflops = check::forward_flops(config) / (row.ms * 1e-3) / 1e12;
    }
  }
  if (!st.ok()) row.error = std::string(to_string(st.code)) + ": " + st.message;
  cudaGetLastError();
  return row;
}

std::string table_header() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-8s %-5s %4s %6s %6s %6s %5s %4s %4s %10s %8s  %-5s %9s %9s",
                "kernel", "dtype", "d", "causal", "sq", "sk", "batch", "hq", "hkv", "ms", "TFLOPS",
                "check", "max_abs", "rel_rms");
  return buf;
}

std::string format_row(const Row& r) {
  const check::Config& c = r.config;
  char buf[512];
  const char* check = !r.check_pass ? "-" : (*r.check_pass ? "PASS" : "FAIL");
  if (r.ms > 0 && r.kind == "decode")
    std::snprintf(buf, sizeof(buf), "%-17s %-5s %4d %3d sq %2d sk %6d b %4d hq %3d hkv %3d %10.4f ms %7.1f GB/s "
                  "splits %3d host %5.2f us  %-5s %9.2e", r.impl.c_str(), to_string(c.dtype), c.head_dim,
                  r.page_size, c.seqlen_q, c.seqlen_k, c.batch, c.heads_q, c.heads_kv, r.ms, r.gbps,
                  r.num_splits, r.host_us, check, r.max_abs_err);
  else if (r.ms > 0)
    std::snprintf(buf, sizeof(buf), "%-8s %-5s %4d %6d %6d %6d %5d %4d %4d %10.4f %8.2f  %-5s %9.2e %9.2e",
                  r.impl.c_str(), to_string(c.dtype), c.head_dim, c.causal, c.seqlen_q, c.seqlen_k,
                  c.batch, c.heads_q, c.heads_kv, r.ms, r.tflops, check, r.max_abs_err, r.rel_rms);
  else
    std::snprintf(buf, sizeof(buf), "%-8s %-5s %4d %6d %6d %6d %5d %4d %4d  not run: %s",
                  r.impl.c_str(), to_string(c.dtype), c.head_dim, c.causal, c.seqlen_q, c.seqlen_k,
                  c.batch, c.heads_q, c.heads_kv, r.error.c_str());
  std::string line = buf;
  if (c.window_left != -1 || c.window_right != -1)
    line += "  window (" + std::to_string(c.window_left) + ", " + std::to_string(c.window_right) + ")";
  if (c.softcap > 0.f) line += "  softcap " + std::to_string(c.softcap);
  if (c.sinks) line += "  sinks";
  if (c.varlen())
    line += "  varlen: " + std::to_string(c.varlen_q.size()) + " sequences, " +
            std::to_string(c.cu_seqlens(false).back()) + " tokens (b = sequences, s = the longest)";
  if (r.check_pass && !*r.check_pass) line += "\n    " + r.error;
  return line;
}

RunInfo collect_run_info(int argc, char** argv) {
  RunInfo info;
  cudaDeviceProp prop{};
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
    info.gpu = prop.name;
  cudaGetLastError();
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  info.date = date;
  const char* commit = std::getenv("HFA_COMMIT");
  info.commit = commit && *commit ? commit : HFA_GIT_COMMIT;
  // The environment variables the worklog form uses, then the command line.
  for (const char* var : {"CHECK", "SEQLEN", "HEADDIM", "CAUSAL", "BATCH", "HEADS", "DTYPE"})
    if (const char* val = std::getenv(var)) info.command += std::string(var) + "=" + val + " ";
  for (int i = 0; i < argc; ++i) info.command += (i ? " " : "") + std::string(argv[i]);
  return info;
}

namespace {
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", ch);
      out += esc;
      continue;
    }
    out += ch;
  }
  return out + "\"";
}
}  // namespace

bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                std::string* error) {
  std::ofstream f(path);
  if (!f) {
    *error = "cannot open " + path + " for writing";
    return false;
  }
  f << "{\n  \"gpu\": " << json_string(info.gpu) << ",\n  \"date\": " << json_string(info.date)
    << ",\n  \"commit\": " << json_string(info.commit) << ",\n  \"command\": "
    << json_string(info.command) << ",\n  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const check::Config& c = r.config;
    char nums[512];
    std::snprintf(nums, sizeof(nums),
                  "\"d\": %d, \"causal\": %s, \"seqlen_q\": %d, \"seqlen_k\": %d, \"batch\": %d, "
                  "\"heads_q\": %d, \"heads_kv\": %d, ", c.head_dim, c.causal ? "true" : "false",
                  c.seqlen_q, c.seqlen_k, c.batch, c.heads_q, c.heads_kv);
    f << (i ? ",\n" : "\n") << "    {\"impl\": " << json_string(r.impl) << ", \"kind\": "
      << json_string(r.kind) << ", \"dtype\": " << json_string(to_string(c.dtype)) << ", " << nums;
    if (c.window_left != -1 || c.window_right != -1 || c.softcap > 0.f || c.sinks) {  // issue 22's variants
      char v[160];
      std::snprintf(v, sizeof(v), "\"window_left\": %d, \"window_right\": %d, \"softcap\": %g, \"sinks\": %s, ",
                    c.window_left, c.window_right, static_cast<double>(c.softcap), c.sinks ? "true" : "false");
      f << v;
    }
    if (c.varlen()) {  // the sequences' lengths (queries = keys)
      f << "\"varlen_lengths\": [";
      for (size_t b = 0; b < c.varlen_q.size(); ++b) f << (b ? ", " : "") << c.varlen_q[b];
      f << "], \"total_q\": " << c.cu_seqlens(false).back() << ", ";
    }
    if (r.ms > 0) {
      char t[128];
      if (r.kind == "decode")
        std::snprintf(t, sizeof(t), "\"ms\": %.6f, \"tflops\": null, \"gbps\": %.1f, \"page_size\": %d, "
                      "\"num_splits\": %d, \"host_us\": %.2f, \"kv_dtype\": \"%s\", ", r.ms, r.gbps,
                      r.page_size, r.num_splits, r.host_us, to_string(r.kv_dtype));
      else
        std::snprintf(t, sizeof(t), "\"ms\": %.6f, \"tflops\": %.3f, \"gbps\": null, ", r.ms, r.tflops);
      f << t;
    } else {
      f << "\"ms\": null, \"tflops\": null, \"gbps\": null, ";
    }
    f << "\"check\": " << (!r.check_pass ? "null" : (*r.check_pass ? "\"pass\"" : "\"fail\""));
    if (r.check_pass) {
      char e[96];
      std::snprintf(e, sizeof(e), ", \"max_abs_err\": %.3e, \"rel_rms\": %.3e", r.max_abs_err, r.rel_rms);
      f << e;
    }
    if (!r.check_detail.empty()) f << ", \"check_detail\": " << json_string(r.check_detail);
    if (!r.error.empty()) f << ", \"error\": " << json_string(r.error);
    f << "}";
  }
  f << "\n  ]\n}\n";
  return static_cast<bool>(f);
}

}  // namespace hfa::bench
