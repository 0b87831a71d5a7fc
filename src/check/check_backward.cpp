// Checking a backward kernel's dq, dk, dv against the fp64 reference by the DESIGN.md rule:
//   max|grad - ref| <= 2 * max|baseline - ref| + atol(dtype)   for each of dq, dk, dv,
// where baseline is the same backward computed as a framework would on bf16/fp16 tensors
// (reference::backward_group with a Precision). Gradients are poisoned (NaN) before the launch;
// every element must be written and no padding touched.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "check/check.h"
#include "check/host_tensors.h"
#include "reference/reference.h"

namespace hfa::check {
namespace {

// One rounding step of the dtype at magnitude 0.5, as for the forward's output.
double gradient_atol(DType dtype) { return dtype == DType::kFP16 ? 1.0 / 4096 : 1.0 / 512; }

// Unwritten (NaN) elements of a 4-D tensor, and elements written outside it (padding no longer
// all-ones).
void scan_written(const DeviceBuffers::Tensor& t, const std::vector<uint16_t>& raw, DType dtype,
                  GradientError* e) {
  const TensorView& v = t.view;
  std::vector<char> is_element(t.alloc_elems, 0);
  for (int64_t a = 0; a < v.shape[0]; ++a)
    for (int64_t b = 0; b < v.shape[1]; ++b)
      for (int64_t h = 0; h < v.shape[2]; ++h)
        for (int64_t d = 0; d < v.shape[3]; ++d) is_element[offset4(v, a, b, h, d)] = 1;
  for (int64_t i = 0; i < t.alloc_elems; ++i) {
    if (is_element[i] && std::isnan(element_to_double(dtype, raw[i]))) ++e->unwritten;
    if (!is_element[i] && raw[i] != 0xFFFF) ++e->padding_clobbered;
  }
}

bool is_forward_kernel(const std::string& name) {
  for (const KernelInfo& k : list_kernels())
    if (k.name == name) return true;
  return false;
}

// o_bound: the largest reference::RoundedOBound of the elements (0 where none is computed).
struct ErrorSums {
  double max_abs = 0, base_max_abs = 0, sq_err = 0, sq_ref = 0, o_bound = 0;
  void add(double got, double ref, double base, double rounded_o = 0) {
    const double err = std::fabs(got - ref);
    max_abs = std::isnan(err) ? INFINITY : std::max(max_abs, err);
    base_max_abs = std::max(base_max_abs, std::fabs(base - ref));
    o_bound = std::max(o_bound, rounded_o);
    sq_err += err * err;
    sq_ref += ref * ref;
  }
  void finish(DType dtype, GradientError* e) const {
    e->max_abs_err = max_abs;
    e->baseline_max_abs_err = base_max_abs;
    e->rel_rms = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
    e->tolerance = 2 * base_max_abs + gradient_atol(dtype) + o_bound;
  }
};

}  // namespace

std::string BackwardCheckResult::summary() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "dq %.2e (tol %.2e, rms %.1e) dk %.2e (tol %.2e, rms %.1e) dv %.2e (tol %.2e, "
                "rms %.1e) groups %d/%d %s",
                dq.max_abs_err, dq.tolerance, dq.rel_rms, dk.max_abs_err, dk.tolerance, dk.rel_rms,
                dv.max_abs_err, dv.tolerance, dv.rel_rms, groups_checked, groups_total,
                pass ? "PASS" : "FAIL");
  std::string out = buf;
  if (dsinks_checked) {
    std::snprintf(buf, sizeof(buf), " dsinks %.2e (tol %.2e)", dsinks.max_abs_err, dsinks.tolerance);
    out += buf;
  }
  return out;
}

Status run_check_backward(DeviceBuffers& buf, uint64_t seed, int max_groups,
                          BackwardCheckResult* result,
                          const std::function<void(BackwardArgs&)>& tamper) {
  const Config& c = buf.config;
  *result = BackwardCheckResult{};
  auto fail = [&](const Status& st) {
    result->pass = false;
    result->message = st.message;
    return st;
  };
  if (!c.backward)
    return fail(make_error(StatusCode::kInvalidArgument, "run_check_backward: buffers allocated "
                                                         "without Config::backward"));
  Status st = buf.fill_random(seed);
  if (st.ok()) st = buf.poison_outputs();
  if (!st.ok()) return fail(st);
  ForwardArgs fwd = buf.forward_args();
  fwd.kernel = is_forward_kernel(c.kernel) ? c.kernel : "auto";
  st = forward(fwd);
  BackwardArgs bwd = buf.backward_args();
  if (tamper) tamper(bwd);
  if (st.ok()) st = backward(bwd);
  if (st.ok()) st = cuda_status(cudaDeviceSynchronize(), "running the backward");
  if (!st.ok()) return fail(st);

  std::vector<uint16_t> hq, hk, hv, hdo, hdq, hdk, hdv;
  for (auto [t, h] : {std::pair{&buf.q, &hq}, {&buf.k, &hk}, {&buf.v, &hv}, {&buf.dout, &hdo},
                      {&buf.dq, &hdq}, {&buf.dk, &hdk}, {&buf.dv, &hdv}})
    if (!(st = copy_to_host(*t, h)).ok()) return fail(st);
  // A variable-length batch's buffers are one batch entry of packed rows (DeviceBuffers).
  const std::vector<int> cu_q = c.varlen() ? c.cu_seqlens(false) : std::vector<int>{};
  const std::vector<int> cu_k = c.varlen() ? c.cu_seqlens(true) : std::vector<int>{};
  scan_written(buf.dq, hdq, c.dtype, &result->dq);
  scan_written(buf.dk, hdk, c.dtype, &result->dk);
  scan_written(buf.dv, hdv, c.dtype, &result->dv);

  std::vector<double> sinks;
  if (buf.sinks.data && !(st = vector_to_host(buf.sinks, &sinks)).ok()) return fail(st);
  const reference::Shape shape = reference_shape(c, sinks);
  const std::vector<double> q = to_contiguous(buf.q.view, hq), k = to_contiguous(buf.k.view, hk),
                            v = to_contiguous(buf.v.view, hv), dout = to_contiguous(buf.dout.view, hdo);
  const std::vector<double> dq = to_contiguous(buf.dq.view, hdq), dk = to_contiguous(buf.dk.view, hdk),
                            dv = to_contiguous(buf.dv.view, hdv);

  // A group (b, KV head) as a problem of the reference: the configuration's, or with a
  // variable-length batch sequence b's (batch 1, its lengths), whose rows start at element q_at
  // of q, dout, dq and k_at of k, v, dk, dv; key_rows: the rows of dk / dv it spans (zero past
  // seqlen_k: seqused_k).
  const int n_entries = c.varlen() ? static_cast<int>(c.varlen_q.size()) : c.batch;
  struct Group {
    reference::Shape shape;
    int b;
    int64_t q_at, k_at;
    int key_rows;
  };
  auto locate = [&](int b, const reference::Shape& whole) {
    if (!c.varlen()) return Group{whole, b, 0, 0, c.seqlen_k};
    Group g{whole, 0, static_cast<int64_t>(cu_q[b]) * c.heads_q * c.head_dim,
            static_cast<int64_t>(cu_k[b]) * c.heads_kv * c.head_dim, c.varlen_k[b]};
    g.shape.batch = 1;
    g.shape.seqlen_q = c.varlen_q[b];
    g.shape.seqlen_k = c.used_keys(b);
    return g;
  };
  std::vector<int> groups(n_entries * c.heads_kv);  // b * heads_kv + hk
  std::iota(groups.begin(), groups.end(), 0);
  if (max_groups > 0 && static_cast<int>(groups.size()) > max_groups) {
    std::mt19937_64 rng(seed);
    std::shuffle(groups.begin(), groups.end(), rng);
    groups.resize(max_groups);
  }
  result->groups_total = n_entries * c.heads_kv;
  result->groups_checked = static_cast<int>(groups.size());

  const auto prec = c.dtype == DType::kFP16 ? reference::Precision::kFP16 : reference::Precision::kBF16;
  const int threads = static_cast<int>(std::max(1u, std::min(std::thread::hardware_concurrency(), 32u)));
  std::vector<double> ref_q(q.size()), ref_k(k.size()), ref_v(v.size());
  std::vector<double> base_q(q.size()), base_k(k.size()), base_v(v.size());
  // The tolerance of dq and dk also allows what rounding O does to them through D
  // (reference::RoundedOBound): a row whose mass sits on a few keys (beside a sink, or a causal
  // row near the top of a problem with sq > sk) has dS = P (dP - D) small against that rounding,
  // and the baseline's own rounding of O may cancel by luck (seen: b 1, sq = sk = 1, causal, with a
  // sink, dq 6.4e-3 against a tolerance of 3.1e-3, with bwd_sm90's 64- and 128-row blocks alike;
  // and fa2, fp16, d 64, causal, sq 200, sk 70, dq 2.38e-3 against 2.08e-3, one random seed of many).
  std::vector<double> bound_q(q.size(), 0.0), bound_k(k.size(), 0.0);
  ErrorSums eq, ek, ev;
  // Elements that must be exactly 0 and are not: dk / dv rows past seqused_k, and a
  // variable-length batch's rows past its last sequence (Config::varlen_tail).
  int64_t zeros_not_zero = 0;
  if (c.varlen()) {
    for (int i = cu_q.back(); i < buf.dq.view.shape[1]; ++i)
      for (int h = 0; h < c.heads_q; ++h)
        for (int e = 0; e < c.head_dim; ++e) zeros_not_zero += dq[(static_cast<int64_t>(i) * c.heads_q + h) * c.head_dim + e] != 0.0;
    for (int j = cu_k.back(); j < buf.dk.view.shape[1]; ++j)
      for (int h = 0; h < c.heads_kv; ++h)
        for (int e = 0; e < c.head_dim; ++e) {
          const int64_t idx = (static_cast<int64_t>(j) * c.heads_kv + h) * c.head_dim + e;
          zeros_not_zero += (dk[idx] != 0.0) + (dv[idx] != 0.0);
        }
  }
  const int group_size = c.heads_q / c.heads_kv, d = c.head_dim;
  for (int gidx : groups) {
    const int hkv = gidx % c.heads_kv;
    const Group grp = locate(gidx / c.heads_kv, shape);
    const reference::Shape& s = grp.shape;
    const int b = grp.b;
    const int64_t qa = grp.q_at, ka = grp.k_at;
    reference::backward_group(s, q.data() + qa, k.data() + ka, v.data() + ka, dout.data() + qa, b, hkv,
                              nullptr, ref_q.data() + qa, ref_k.data() + ka, ref_v.data() + ka, threads);
    const reference::RoundedOBound bound{bound_q.data() + qa, bound_k.data() + ka};
    reference::backward_group(s, q.data() + qa, k.data() + ka, v.data() + ka, dout.data() + qa, b, hkv,
                              &prec, base_q.data() + qa, base_k.data() + ka, base_v.data() + ka, threads,
                              &bound);
    for (int g = 0; g < group_size; ++g)
      for (int i = 0; i < s.seqlen_q; ++i)
        for (int e = 0; e < d; ++e) {
          const int64_t idx = qa + s.q_index(b, i, hkv * group_size + g) + e;
          eq.add(dq[idx], ref_q[idx], base_q[idx], bound_q[idx]);
        }
    for (int j = 0; j < s.seqlen_k; ++j)
      for (int e = 0; e < d; ++e) {
        const int64_t idx = ka + s.kv_index(b, j, hkv) + e;
        ek.add(dk[idx], ref_k[idx], base_k[idx], bound_k[idx]);
        ev.add(dv[idx], ref_v[idx], base_v[idx]);
      }
    for (int j = s.seqlen_k; j < grp.key_rows; ++j)
      for (int e = 0; e < d; ++e) {
        const int64_t idx = ka + s.kv_index(b, j, hkv) + e;
        zeros_not_zero += (dk[idx] != 0.0) + (dv[idx] != 0.0);
      }
  }
  eq.finish(c.dtype, &result->dq);
  ek.finish(c.dtype, &result->dk);
  ev.finish(c.dtype, &result->dv);

  std::string why;
  if (buf.dsinks.data) {  // every row of every head counts: compared when every group is checked
    std::vector<double> got;
    if (!(st = vector_to_host(buf.dsinks, &got)).ok()) return fail(st);
    ErrorSums es;
    for (int h = 0; h < c.heads_q; ++h)
      if (std::isnan(got[h])) ++result->dsinks.unwritten;
    if (result->groups_checked == result->groups_total) {
      // Summed over the batch entries, or a variable-length batch's sequences one by one.
      std::vector<double> ref(c.heads_q), base(c.heads_q), magnitude(c.heads_q);
      std::vector<double> ref_b(c.heads_q), base_b(c.heads_q), magnitude_b(c.heads_q);
      for (int b = 0; b < (c.varlen() ? n_entries : 1); ++b) {
        const Group grp = locate(b, shape);
        const int64_t qa = grp.q_at, ka = grp.k_at;
        reference::sink_gradient(grp.shape, q.data() + qa, k.data() + ka, v.data() + ka, dout.data() + qa,
                                 nullptr, ref_b.data(), threads, magnitude_b.data());
        reference::sink_gradient(grp.shape, q.data() + qa, k.data() + ka, v.data() + ka, dout.data() + qa,
                                 &prec, base_b.data(), threads);
        for (int h = 0; h < c.heads_q; ++h)
          ref[h] += ref_b[h], base[h] += base_b[h], magnitude[h] += magnitude_b[h];
      }
      for (int h = 0; h < c.heads_q; ++h) es.add(got[h], ref[h], base[h]);
      es.finish(c.dtype, &result->dsinks);
      // Each dsinks value is one sum: the baseline's error can be small by luck (a few rows, its
      // roundings cancelling), so the bound also allows what rounding O to the dtype can do to
      // it, unit roundoff x sum |P_sink dout * O| (the kernel's D is computed from its rounded O).
      const double unit = c.dtype == DType::kFP16 ? 0x1p-11 : 0x1p-8;
      result->dsinks.tolerance += unit * *std::max_element(magnitude.begin(), magnitude.end());
      result->dsinks_checked = true;
    }
    if (result->dsinks.unwritten) why += "dsinks: " + std::to_string(result->dsinks.unwritten) + " values unwritten or NaN; ";
    if (result->dsinks_checked && !(result->dsinks.max_abs_err <= result->dsinks.tolerance))
      why += "dsinks error over tolerance; ";
  }
  for (auto [name, e] : {std::pair{"dq", &result->dq}, {"dk", &result->dk}, {"dv", &result->dv}}) {
    if (e->unwritten) why += std::string(name) + ": " + std::to_string(e->unwritten) + " elements unwritten or NaN; ";
    if (e->padding_clobbered)
      why += std::string(name) + ": " + std::to_string(e->padding_clobbered) + " elements written outside it; ";
    if (!(e->max_abs_err <= e->tolerance)) why += std::string(name) + " error over tolerance; ";
  }
  if (zeros_not_zero)
    why += std::to_string(zeros_not_zero) + " gradient elements of rows past seqused_k or past the "
           "last sequence not zero; ";
  result->pass = why.empty();
  result->message = result->pass ? result->summary() : why + result->summary();
  return Status::Ok();
}

}  // namespace hfa::check
