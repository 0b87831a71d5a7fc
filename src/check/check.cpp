// Checking a kernel's output against the fp64 reference by the DESIGN.md rule.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "check/check.h"
#include "check/host_tensors.h"
#include "common/status_util.h"
#include "reference/fp8_accumulation.h"
#include "reference/reference.h"

namespace hfa::check {
namespace {

// e4m3 inputs: Hopper's FP8 tensor cores do not accumulate in full fp32, and the yardstick does. Each
// row may exceed the tolerance by what that accumulation can do to it under the model of
// reference/fp8_accumulation.h (13 bits kept below each k-step's largest magnitude):
//  - score j off by up to e_j = |scale| fp8_dot_error_bound(q_i, k_j) (the model's mean error plus
//    6 standard deviations; softcap's tanh only shrinks it), so the LSE by up to max_j e_j;
//  - O_c by what those score errors do through the probabilities (the bound at the allowance's
//    computation below), plus fp8_pv_error_bound(sum_j P_j |v_jc|) from the accumulation of P V.
// Scores of one sign or with outlier channels get more (WORKLOG, K7 session 47: 2^-8 of sum |q k|
// at d = 256 on one-sign inputs, as with cuBLAS) than mixed-sign ones, and so does their row.
// On the H200 (session 54) k7's and k8's LSE errors used at most 38% of this allowance on any
// distribution (outlier channels), 1-2% on N(0, 1); their O errors at most 30% of tolerance + it.

struct RowError {  // per-thread accumulators
  double max_abs = 0, base_max_abs = 0, sq_err = 0, sq_ref = 0, lse_abs = 0, lse_base_abs = 0;
  // The errors less each row's FP8 accumulation allowance (equal to the errors otherwise).
  double excess = 0, lse_excess = 0, allowance = 0, lse_allowance = 0;
  int64_t masked_errors = 0;
};

}  // namespace

std::string CheckResult::summary() const {
  char fp8_note[128] = "";
  if (fp8_allowance > 0)
    std::snprintf(fp8_note, sizeof(fp8_note), " (+ fp8 accumulation allowance <= %.2e O, %.2e LSE per row)",
                  fp8_allowance, fp8_lse_allowance);
  char buf[640];
  std::snprintf(buf, sizeof(buf),
                "max_abs %.3e rel_rms %.3e (tol %.3e = 2 x baseline %.3e + atol) lse_err %.2e "
                "(tol %.2e) rows %lld/%lld%s %s",
                max_abs_err, rel_rms, tolerance, baseline_max_abs_err, lse_max_abs_err,
                lse_tolerance, static_cast<long long>(rows_checked),
                static_cast<long long>(rows_total), fp8_note, pass ? "PASS" : "FAIL");
  return buf;
}

Status run_check(DeviceBuffers& buf, uint64_t seed, int64_t max_rows, CheckResult* result,
                 const std::function<void(ForwardArgs&)>& tamper) {
  const Config& c = buf.config;
  *result = CheckResult{};
  auto fail = [&](const Status& st) {
    result->pass = false;
    result->message = st.message;
    return st;
  };
  Status st = buf.fill_random(seed);
  if (st.ok()) st = buf.poison_outputs();
  if (!st.ok()) return fail(st);
  ForwardArgs args = buf.forward_args();
  if (tamper) tamper(args);
  st = forward(args);
  if (st.ok()) st = cuda_status(cudaDeviceSynchronize(), "running the kernel");
  if (!st.ok()) return fail(st);

  std::vector<uint8_t> hq, hk, hv;
  std::vector<uint16_t> ho;
  std::vector<float> hlse;
  for (auto [t, h] : {std::pair{&buf.q, &hq}, {&buf.k, &hk}, {&buf.v, &hv}})
    if (!(st = download(*t, h)).ok()) return fail(st);
  if (!(st = copy_to_host(buf.o, &ho)).ok()) return fail(st);
  const DType out_dtype = c.out_dtype();
  const bool fp8 = c.dtype == DType::kE4M3;
  if (buf.lse.data && !(st = copy_to_host(buf.lse, &hlse)).ok()) return fail(st);

  // A variable-length batch's buffers are one batch entry of packed rows (DeviceBuffers), of which
  // the rows past the last sequence's (varlen_tail) belong to none: they must stay untouched.
  const std::vector<int> cu_q = c.varlen() ? c.cu_seqlens(false) : std::vector<int>{};
  const std::vector<int> cu_k = c.varlen() ? c.cu_seqlens(true) : std::vector<int>{};
  const int64_t output_rows = c.varlen() ? cu_q.back() : buf.o.view.shape[1];

  // Every output element written, nothing outside them: scan the whole allocation.
  const TensorView& ov = buf.o.view;
  std::vector<char> is_element(buf.o.alloc_elems, 0);
  for (int64_t a = 0; a < ov.shape[0]; ++a)
    for (int64_t b = 0; b < output_rows; ++b)
      for (int64_t h = 0; h < ov.shape[2]; ++h)
        for (int64_t d = 0; d < ov.shape[3]; ++d) is_element[offset4(ov, a, b, h, d)] = 1;
  for (int64_t i = 0; i < buf.o.alloc_elems; ++i) {
    if (is_element[i] && std::isnan(element_to_double(out_dtype, ho[i]))) ++result->unwritten;
    if (!is_element[i] && ho[i] != 0xFFFF) ++result->padding_clobbered;
  }
  if (buf.lse.data) {
    const TensorView& lv = buf.lse.view;
    std::vector<char> lse_element(buf.lse.alloc_elems, 0);
    for (int64_t a = 0; a < lv.shape[0]; ++a)
      for (int64_t h = 0; h < lv.shape[1]; ++h)
        for (int64_t i = 0; i < output_rows; ++i)
          lse_element[a * lv.stride[0] + h * lv.stride[1] + i * lv.stride[2]] = 1;
    for (int64_t i = 0; i < buf.lse.alloc_elems; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &hlse[i], 4);
      if (lse_element[i] && std::isnan(hlse[i])) ++result->unwritten;
      if (!lse_element[i] && bits != 0xFFFFFFFFu) ++result->padding_clobbered;
    }
  }

  // Rows to compare with the reference: all, or a random subset.
  std::vector<double> sinks;
  if (buf.sinks.data && !(st = vector_to_host(buf.sinks, &sinks)).ok()) return fail(st);
  const reference::Shape whole = reference_shape(c, sinks);
  const int64_t total = c.varlen() ? static_cast<int64_t>(cu_q.back()) * c.heads_q
                                   : static_cast<int64_t>(c.batch) * c.heads_q * c.seqlen_q;
  std::vector<int64_t> rows(total);
  std::iota(rows.begin(), rows.end(), 0);
  if (max_rows > 0 && total > max_rows) {
    std::mt19937_64 rng(seed);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(max_rows);
  }
  result->rows_total = total;
  result->rows_checked = static_cast<int64_t>(rows.size());

  std::vector<double> q = to_contiguous(buf.q.view, hq);
  std::vector<double> k = to_contiguous(buf.k.view, hk);
  std::vector<double> v = to_contiguous(buf.v.view, hv);
  if (fp8) {  // the reference sees exactly the dequantized inputs
    const bool block = c.fp8_block_scales;
    if (!(st = dequantize(&q, buf.q.view, block ? buf.q_block_descale : buf.q_descale,
                          c.heads_q / c.heads_kv)).ok() ||
        !(st = dequantize(&k, buf.k.view, block ? buf.k_block_descale : buf.k_descale, 1)).ok() ||
        !(st = dequantize(&v, buf.v.view, buf.v_descale, 1)).ok())
      return fail(st);
  }
  const auto prec = out_dtype == DType::kFP16 ? reference::Precision::kFP16 : reference::Precision::kBF16;

  const int n_threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 32u));
  std::vector<RowError> errs(n_threads);
  std::atomic<size_t> next{0};
  // Row `row` of the check as a row (b, h, i) of a reference problem: the configuration's, or
  // with a variable-length batch its sequence's (batch 1, its lengths, its rows of the packed
  // inputs); out_b / out_i: the row's place in the output buffers.
  struct RowTask {
    reference::Shape shape;
    const double *q, *k, *v;
    int b, h, i;
    int64_t out_b, out_i;
  };
  auto locate = [&](int64_t row) {
    if (!c.varlen()) {
      const int i = static_cast<int>(row % c.seqlen_q);
      const int h = static_cast<int>((row / c.seqlen_q) % c.heads_q);
      const int b = static_cast<int>(row / (static_cast<int64_t>(c.seqlen_q) * c.heads_q));
      return RowTask{whole, q.data(), k.data(), v.data(), b, h, i, b, i};
    }
    const int token = static_cast<int>(row / c.heads_q), h = static_cast<int>(row % c.heads_q);
    const int seq = static_cast<int>(std::upper_bound(cu_q.begin(), cu_q.end(), token) - cu_q.begin()) - 1;
    RowTask task{whole, q.data() + static_cast<int64_t>(cu_q[seq]) * c.heads_q * c.head_dim,
                 k.data() + static_cast<int64_t>(cu_k[seq]) * c.heads_kv * c.head_dim,
                 v.data() + static_cast<int64_t>(cu_k[seq]) * c.heads_kv * c.head_dim,
                 0, h, token - cu_q[seq], 0, token};
    task.shape.batch = 1;
    task.shape.seqlen_q = c.varlen_q[seq];
    task.shape.seqlen_k = c.used_keys(seq);
    return task;
  };
  auto worker = [&](int t) {
    RowError& e = errs[t];
    std::vector<double> ref(c.head_dim), base(c.head_dim), allow_o(c.head_dim);
    std::vector<double> dots(fp8 ? c.seqlen_k : 0), score_err(dots.size());
    std::vector<double> spread(c.head_dim), magnitude(c.head_dim);
    for (size_t r; (r = next.fetch_add(1)) < rows.size();) {
      const RowTask task = locate(rows[r]);
      const reference::Shape& shape = task.shape;
      const int b = task.b, h = task.h, i = task.i;
      double ref_lse, base_lse;
      reference::forward_row(shape, task.q, task.k, task.v, b, h, i, ref.data(), &ref_lse);
      if (fp8)
        reference::forward_row_fp8_baseline(shape, prec, task.q, task.k, task.v, b, h, i,
                                            base.data(), &base_lse);
      else
        reference::forward_row_lowp(shape, prec, task.q, task.k, task.v, b, h, i, base.data(),
                                    &base_lse);
      bool masked_ok = true;
      double allow_lse = 0;
      std::fill(allow_o.begin(), allow_o.end(), 0.0);
      if (fp8) {  // the row's FP8 accumulation allowance (the model above)
        const int hk = shape.kv_head(h);
        const double* qi = task.q + shape.q_index(b, i, h);
        for (int j = 0; j < shape.seqlen_k; ++j) {
          if (!shape.visible(i, j)) continue;
          const double* kj = task.k + shape.kv_index(b, j, hk);
          dots[j] = 0;
          for (int x = 0; x < c.head_dim; ++x) dots[j] += qi[x] * kj[x];
          score_err[j] = std::fabs(shape.scale) * reference::fp8_dot_error_bound(qi, kj, c.head_dim);
          allow_lse = std::max(allow_lse, score_err[j]);
        }
        std::fill(spread.begin(), spread.end(), 0.0);
        std::fill(magnitude.begin(), magnitude.end(), 0.0);
        if (!std::isinf(ref_lse)) {
          // P_j = exp(s_j - LSE) moves by at most a factor exp(e_j + log M) either way, M =
          // sum_j P_j exp(e_j) (+ the sink's P) bounding the denominator's growth; sum_j dP_j = 0,
          // so O_c moves by at most sum_j |dP_j| |v_jc - O_c| (+ the sink's |dP| |O_c|).
          const double p_sink = shape.sinks ? std::exp(shape.sink(h) - ref_lse) : 0;
          double growth = p_sink;
          for (int j = 0; j < shape.seqlen_k; ++j)
            if (shape.visible(i, j)) growth += std::exp(shape.score(dots[j]) - ref_lse + score_err[j]);
          const double log_growth = std::log(growth);
          for (int j = 0; j < shape.seqlen_k; ++j) {
            if (!shape.visible(i, j)) continue;
            const double p = std::exp(shape.score(dots[j]) - ref_lse);
            const double dp = p * std::expm1(score_err[j] + log_growth);
            const double* vj = task.v + shape.kv_index(b, j, hk);
            for (int x = 0; x < c.head_dim; ++x) {
              spread[x] += dp * std::fabs(vj[x] - ref[x]);
              magnitude[x] += p * std::fabs(vj[x]);
            }
          }
          for (int x = 0; x < c.head_dim; ++x) spread[x] += p_sink * std::expm1(log_growth) * std::fabs(ref[x]);
        }
        for (int x = 0; x < c.head_dim; ++x) {
          allow_o[x] = spread[x] + reference::fp8_pv_error_bound(magnitude[x]);
          e.allowance = std::max(e.allowance, allow_o[x]);
        }
        e.lse_allowance = std::max(e.lse_allowance, allow_lse);
      }
      for (int d = 0; d < c.head_dim; ++d) {
        const double out = element_to_double(out_dtype, ho[offset4(ov, task.out_b, task.out_i, h, d)]);
        const double err = std::fabs(out - ref[d]);
        e.max_abs = std::isnan(err) ? INFINITY : std::max(e.max_abs, err);
        e.excess = std::isnan(err) ? INFINITY : std::max(e.excess, err - allow_o[d]);
        e.base_max_abs = std::max(e.base_max_abs, std::fabs(base[d] - ref[d]));
        e.sq_err += err * err;
        e.sq_ref += ref[d] * ref[d];
        if (std::isinf(ref_lse) && out != 0.0) masked_ok = false;
      }
      if (buf.lse.data) {
        const double err = lse_row_error(buf.lse.view, hlse, task.out_b, h, task.out_i, ref_lse, &masked_ok);
        if (!std::isinf(ref_lse)) {
          e.lse_abs = std::max(e.lse_abs, err);
          e.lse_excess = std::max(e.lse_excess, err - allow_lse);
          e.lse_base_abs = std::max(e.lse_base_abs, std::fabs(base_lse - ref_lse));
        }
      }
      if (!masked_ok) ++e.masked_errors;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < n_threads; ++t) pool.emplace_back(worker, t);
  for (auto& th : pool) th.join();

  double sq_err = 0, sq_ref = 0, excess = 0, lse_excess = 0;
  for (const RowError& e : errs) {
    excess = std::max(excess, e.excess);
    lse_excess = std::max(lse_excess, e.lse_excess);
    result->fp8_allowance = std::max(result->fp8_allowance, e.allowance);
    result->fp8_lse_allowance = std::max(result->fp8_lse_allowance, e.lse_allowance);
    result->max_abs_err = std::max(result->max_abs_err, e.max_abs);
    result->baseline_max_abs_err = std::max(result->baseline_max_abs_err, e.base_max_abs);
    result->lse_max_abs_err = std::max(result->lse_max_abs_err, e.lse_abs);
    result->lse_tolerance = std::max(result->lse_tolerance, e.lse_base_abs);
    result->masked_row_errors += e.masked_errors;
    sq_err += e.sq_err;
    sq_ref += e.sq_ref;
  }
  result->rel_rms = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
  result->tolerance = 2 * result->baseline_max_abs_err + output_atol(out_dtype);
  result->lse_tolerance = 2 * result->lse_tolerance + kLseAtol;

  std::string why;
  if (result->unwritten) why += std::to_string(result->unwritten) + " output elements unwritten or NaN; ";
  if (result->padding_clobbered)
    why += std::to_string(result->padding_clobbered) + " elements written outside the outputs; ";
  if (result->masked_row_errors)
    why += std::to_string(result->masked_row_errors) + " rows with no visible key not O=0/LSE=-inf; ";
  if (!(excess <= result->tolerance)) why += "O error over tolerance; ";
  if (!(lse_excess <= result->lse_tolerance)) why += "LSE error over tolerance; ";
  result->pass = why.empty();
  result->message = result->pass ? result->summary() : why + result->summary();
  return Status::Ok();
}

}  // namespace hfa::check
