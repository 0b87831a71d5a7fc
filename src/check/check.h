// Running a kernel on fresh random inputs, checking it against the fp64 reference, and timing it.
// Shared by hfa-bench and the GPU tests, so both apply exactly the same rule.
//
// The rule (FlashAttention-3's tests, DESIGN.md): with ref the fp64 reference and base the same
// attention computed straightforwardly in the inputs' precision (reference::forward_row_lowp),
//   max|out - ref| <= 2 * max|base - ref| + atol(dtype)     (and the same for LSE)
// over the checked rows; plus every output element written (outputs are poisoned with NaN before
// the launch), nothing written outside the output's elements (padding stays poisoned), and rows
// that see no key exactly O = 0, LSE = -inf. For e4m3 inputs the baseline is the FP8 yardstick
// (reference::forward_row_fp8_baseline), and each row's error may exceed the tolerance by what
// the FP8 tensor cores' truncated accumulation of Q K^T and P V can do to it (check.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hfa/hfa.h"

namespace hfa::check {

// How Q/K/V/O are laid out in memory. All keep head_dim contiguous.
enum class Layout {
  kPacked,   // (batch, seqlen, heads, head_dim) contiguous
  kPadded,   // same order, with gaps after each head, row and batch (non-packed strides)
  kHeadsMajor,  // memory order (batch, heads, seqlen, head_dim): seqlen stride = head_dim
};
const char* to_string(Layout layout);

// What the random inputs are drawn from (hfa-bench --values). The tolerance follows the
// baseline's error on the same inputs (the rule above), so every distribution is held to it.
enum class Values {
  kNormal,    // Q, K, V N(0, 1): scores of std ~1 at the default scale
  kWide,      // Q and K N(0, 3^2): scores of std ~9, rows close to one-hot, large max jumps
  kUniform,   // Q, K, V U[0, 1): all positive, so the scores share a large mean, P is flat over
              // thousands of keys and O has no cancellation
  kOutliers,  // N(0, 1), every 16th channel of Q and K (c % 16 == 5) x 12: the outlier
              // features of LLM activations (what k8's Hadamard transform is for)
  kRamp,      // N(0, 1), Q's channel 0 + 4 and K's channel 0 + 10 sqrt(d) j / seqlen_k at key j:
              // at the default scale the scores grow by ~40 along the keys, so the running max
              // moves on every KV tile (the online softmax's rescale paths)
  kPositiveV, // Q, K N(0, 1), V U[0, 1): O has a mean of 0.5 and no cancellation, so a loss in the
              // accumulation of P V that always has one sign shows (the FP8 tensor cores': fp8_pv.cuh)
};
inline constexpr Values kAllValues[] = {Values::kNormal, Values::kWide, Values::kUniform,
                                        Values::kOutliers, Values::kRamp, Values::kPositiveV};
const char* to_string(Values values);
std::optional<Values> parse_values(const std::string& name);  // to_string's names

struct Config {
  std::string kernel = "auto";
  DType dtype = DType::kBF16;  // of q, k, v
  // Of out when dtype is e4m3 (bf16 or fp16); otherwise out has dtype.
  DType fp8_out_dtype = DType::kBF16;
  // e4m3 inputs: block descales (q_block_descale, k_block_descale: k8) instead of per-(batch,
  // KV head) q_descale, k_descale (k7).
  bool fp8_block_scales = false;
  int batch = 1, seqlen_q = 128, seqlen_k = 128, heads_q = 1, heads_kv = 1, head_dim = 64;
  bool causal = false;
  // Score variants (ForwardArgs::window_left/right, softcap, sinks). sinks: DeviceBuffers holds
  // random fp32 (heads_q) sinks in [-1, 4) (and dsinks with backward).
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool sinks = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim)
  Layout layout = Layout::kPacked;
  Values values = Values::kNormal;  // of q, k, v (dout stays N(0, 1))
  bool with_lse = true;
  bool backward = false;  // also allocate dout, dq, dk, dv (and always LSE)
  bool deterministic = false;  // backward_args(): BackwardArgs::deterministic

  // A variable-length batch (ForwardArgs::cu_seqlens_q ...) when varlen_q is non-empty: sequence
  // b has varlen_q[b] queries and varlen_k[b] keys (then batch, seqlen_q and seqlen_k are ignored),
  // of which it uses seqused_k[b] when seqused_k is non-empty. The packed tensors hold the
  // sequences back to back and then varlen_tail rows that belong to none (they must stay
  // untouched). The strided layouts apply to the packed (total, heads, head_dim) tensors.
  std::vector<int> varlen_q, varlen_k, seqused_k;
  int varlen_tail = 0;
  bool varlen() const { return !varlen_q.empty(); }
  // The sequences' first rows (cu_seqlens), batch + 1 entries; and the keys each one uses.
  std::vector<int> cu_seqlens(bool keys) const;
  int used_keys(int b) const { return seqused_k.empty() ? varlen_k[b] : seqused_k[b]; }

  std::string describe() const;  // one line, for messages
  DType out_dtype() const { return dtype == DType::kE4M3 ? fp8_out_dtype : dtype; }
};

// 4 * batch * heads_q * seqlen_q * seqlen_k * head_dim, halved when causal (DESIGN.md); with a
// sliding window, 4 * batch * heads_q * head_dim * (the number of visible (query, key) pairs).
// A variable-length batch: the sum over its sequences.
double forward_flops(const Config& c);

// Sets c's input dtype and scales to what forward kernel `kernel` takes when it is an FP8 one
// (KernelInfo::fp8: e4m3 inputs; fp8_block_scales: block descales); other kernels: unchanged.
void use_kernel_inputs(Config* c, const std::string& kernel);

// Device buffers for one configuration: Q, K, V filled with config.values (N(0, 1) by default),
// O and LSE poisoned. e4m3 inputs: Q, K, V hold the values x 64 / fp8_fill_peak rounded to e4m3
// (saturating), and the descales (batch, heads_kv) are (0.75 .. 1.25) x fp8_fill_peak / 64,
// different per (batch, KV head): the dequantized inputs are roughly the distribution with a scale
// of their own per head. With fp8_block_scales, Q's and K's descales are drawn the same way per
// (batch, head, 128-row block).
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  Status allocate(const Config& c);
  Status fill_random(uint64_t seed);  // Q, K, V (and dout)
  Status poison_outputs();            // O, LSE (dq, dk, dv) and their padding: all-ones bits = NaN
  ForwardArgs forward_args() const;   // views of the buffers, kernel from the config
  // The backward of the forward above (config.kernel names the backward kernel). Needs
  // config.backward; run forward first so that out and lse hold its results.
  BackwardArgs backward_args() const;

  struct Tensor {
    void* data = nullptr;
    int64_t alloc_elems = 0;
    TensorView view;
  };
  Tensor q, k, v, o, lse;
  Tensor q_descale, k_descale, v_descale;  // e4m3 inputs only (q_, k_descale: per-head scales)
  Tensor q_block_descale, k_block_descale;  // e4m3 inputs with fp8_block_scales
  Tensor dout, dq, dk, dv;  // config.backward only
  Tensor sinks, dsinks;     // config.sinks (dsinks: with config.backward); strided when padded
  // config.varlen(): int32 cu_seqlens_q, cu_seqlens_k (batch + 1), seqused_k (batch) if used.
  // The attention tensors above are then allocated as one batch entry of the packed rows.
  Tensor cu_seqlens_q, cu_seqlens_k, seqused_k;
  Config config;
};

struct CheckResult {
  bool pass = false;
  double max_abs_err = 0, rel_rms = 0;     // kernel O vs fp64 reference, over checked rows
  double baseline_max_abs_err = 0;         // low-precision baseline vs fp64 reference
  double tolerance = 0;                    // 2 * baseline + atol
  double lse_max_abs_err = 0, lse_tolerance = 0;
  // e4m3 inputs: the largest per-element O and per-row LSE allowances for the FP8 tensor cores'
  // accumulation (check.cpp; the model in reference/fp8_accumulation.h), granted on top of the
  // tolerance; 0 otherwise.
  double fp8_allowance = 0, fp8_lse_allowance = 0;
  int64_t rows_checked = 0, rows_total = 0;
  int64_t unwritten = 0;          // O/LSE elements still NaN (or NaN produced)
  int64_t padding_clobbered = 0;  // elements written outside the output tensors' elements
  int64_t masked_row_errors = 0;  // rows with no visible key that are not exactly O = 0, LSE = -inf
  std::string message;            // the failure, or a summary

  std::string summary() const;  // "max_abs ... rel_rms ... tol ... PASS|FAIL"
};

// Runs c.kernel once on `buffers` (fresh random inputs from `seed`, poisoned outputs) and checks
// it. max_rows > 0 checks a random subset of (batch, head, row) of that size when there are more.
// Returns the forward() error if the kernel refused to run (the result is then a FAIL).
// `tamper`, for tests of the checker itself, edits the arguments before the launch (the reference
// still computes the untampered problem), so a check that cannot fail would show.
Status run_check(DeviceBuffers& buffers, uint64_t seed, int64_t max_rows, CheckResult* result,
                 const std::function<void(ForwardArgs&)>& tamper = {});

// Convenience: allocate, then run_check.
Status run_check(const Config& c, uint64_t seed, int64_t max_rows, CheckResult* result);

// The backward's check: the same rule per gradient (dq, dk, dv), with the baseline the same
// backward computed as a framework would in the inputs' dtype (reference::backward_group).
struct GradientError {
  double max_abs_err = 0, rel_rms = 0, baseline_max_abs_err = 0, tolerance = 0;
  int64_t unwritten = 0, padding_clobbered = 0;
};
struct BackwardCheckResult {
  bool pass = false;
  GradientError dq, dk, dv;
  int groups_checked = 0, groups_total = 0;  // (batch, KV head) groups compared with the reference
  // With sinks and dsinks: dsinks by the same rule, compared only when every group is checked
  // (each value sums over every row of its head); always checked written.
  GradientError dsinks;
  bool dsinks_checked = false;
  std::string message;
  std::string summary() const;
};

// Runs the forward (config.kernel if it is also a forward kernel, else "auto") and then the
// backward config.kernel on fresh random inputs and dout, and checks dq, dk, dv. max_groups > 0
// compares a random subset of that many (batch, KV head) groups (every element is still checked
// written). `buffers` must have been allocated with config.backward.
// `tamper` edits the backward's arguments before its launch (tests of the checker itself).
Status run_check_backward(DeviceBuffers& buffers, uint64_t seed, int max_groups,
                          BackwardCheckResult* result,
                          const std::function<void(BackwardArgs&)>& tamper = {});

// Median time in ms of `iters` calls of `launch` after `warmup` calls, with L2 flushed before each
// timed call (CUDA events around the call alone; the GPU is kept busy before the start event so
// the host's launch overhead is not part of the time). What time_forward/time_backward use.
Status time_launches(const std::function<Status()>& launch, int warmup, int iters, double* median_ms);

// e4m3 test inputs are N(0, 1) x this (|values| up to ~400 of e4m3's 448), and their descales
// about its inverse.
inline constexpr float kFp8FillScale = 64.f;

// Which input a tensor is: the distributions shape Q and K (and ramp them) differently from V,
// and leave other tensors (dout, appended rows' companions) N(0, 1).
enum class InputRole { kQuery, kKey, kValue, kOther };

// e4m3 fills hold value x kFp8FillScale / fp8_fill_peak(values, role, head_dim), so that each
// distribution's typical magnitudes use e4m3's range as N(0, 1) x 64 does; a descale of the same
// tensor is multiplied by it.
float fp8_fill_peak(Values values, InputRole role, int head_dim);

// Fills the bf16/fp16/e4m3 tensor `view` of rank 3 or 4 (the last dimension head_dim; the
// position along the keys or queries in dimension 1 of rank 4, 0 of rank 3) and the rest of its
// allocation (alloc_elems elements from view.data) with `values` for `role`. Each element depends
// only on (seed, its offset). Asynchronous, on the default stream. (values.cu)
Status fill_values(const TensorView& view, int64_t alloc_elems, Values values, InputRole role,
                   uint64_t seed);

// Absolute slack of the tolerance rule on top of 2x the baseline's error: about one rounding step
// of the output dtype at magnitude 0.5, so a kernel that is exact but for its final rounding
// always passes. LSE is fp32 in every kernel.
inline double output_atol(DType dtype) { return dtype == DType::kFP16 ? 1.0 / 4096 : 1.0 / 512; }
inline constexpr double kLseAtol = 1e-4;

// One row's LSE against the fp64 reference, for every checker: a row that saw no key (ref = -inf)
// must hold -inf (else *masked_ok is cleared) and counts 0; any other row |got - ref|, infinite
// when got is NaN. lse: the host copy of a (batch, heads, rows) fp32 tensor with view lv's strides.
inline double lse_row_error(const TensorView& lv, const std::vector<float>& lse, int b, int h, int i,
                            double ref, bool* masked_ok) {
  const double got = lse[b * lv.stride[0] + h * lv.stride[1] + i * lv.stride[2]];
  if (std::isinf(ref)) {
    *masked_ok = *masked_ok && std::isinf(got) && got < 0;
    return 0.0;
  }
  const double err = std::fabs(got - ref);
  return std::isnan(err) ? INFINITY : err;
}

// Median time in ms of `iters` launches after `warmup` launches, with L2 flushed before each
// timed launch (CUDA events around the launch alone; the GPU is kept busy before the start event
// so the host's launch overhead is not part of the time).
Status time_forward(DeviceBuffers& buffers, int warmup, int iters, double* median_ms);
// The same for the backward (run_check_backward or a forward first, so out and lse are real).
Status time_backward(DeviceBuffers& buffers, int warmup, int iters, double* median_ms);

}  // namespace hfa::check
