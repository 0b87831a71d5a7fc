#include "reference/reference.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <limits>
#include <vector>

namespace hfa::reference {
namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

void forward_row(const Shape& s, const double* q, const double* k, const double* v, int b, int h,
                 int i, double* o_row, double* lse) {
  const int d = s.head_dim, hk = s.kv_head(h);
  const double* qi = q + s.q_index(b, i, h);
  std::vector<double> scores(s.seqlen_k, kNegInf);
  double m = kNegInf;
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (!s.visible(i, j)) continue;
    const double* kj = k + s.kv_index(b, j, hk);
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += qi[c] * kj[c];
    scores[j] = s.score(dot);
    m = std::max(m, scores[j]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = 0;
  const double sink = s.sink(h);
  if (m == kNegInf) {  // no visible key
    *lse = s.sinks ? sink : kNegInf;
    return;
  }
  m = std::max(m, sink);
  double l = s.sinks ? std::exp(sink - m) : 0;
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (scores[j] == kNegInf) continue;
    const double p = std::exp(scores[j] - m);
    l += p;
    const double* vj = v + s.kv_index(b, j, hk);
    for (int c = 0; c < d; ++c) o_row[c] += p * vj[c];
  }
  for (int c = 0; c < d; ++c) o_row[c] /= l;
  *lse = m + std::log(l);
}

void forward(const Shape& s, const double* q, const double* k, const double* v, double* o,
             double* lse) {
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < s.seqlen_q; ++i)
        forward_row(s, q, k, v, b, h, i, o + s.q_index(b, i, h), lse + s.lse_index(b, h, i));
}

namespace {

// Runs fn(i) for i in [0, n) on `threads` threads.
template <class Fn>
void parallel_for(int n, int threads, const Fn& fn) {
  if (threads <= 1 || n < 2) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& th : pool) th.join();
}

}  // namespace

void backward_group(const Shape& s, const double* q, const double* k, const double* v,
                    const double* dout, int b, int hk, const Precision* lowp, double* dq,
                    double* dk, double* dv, int threads, const RoundedOBound* o_rounding) {
  const int d = s.head_dim, group = s.heads_q / s.heads_kv;
  auto r = [&](double x) { return lowp ? round_to(*lowp, x) : x; };
  const RoundedOBound* bound = lowp ? o_rounding : nullptr;
  const double unit = lowp && *lowp == Precision::kFP16 ? 0x1p-11 : 0x1p-8;
  std::vector<double> lse(s.seqlen_q), row_dot(s.seqlen_q), row_dot_bound(s.seqlen_q);
  std::vector<char> no_key(s.seqlen_q);  // rows that see no key (their LSE is the sink's, if any)
  std::vector<double> dk_acc(static_cast<size_t>(s.seqlen_k) * d, 0.0), dv_acc(dk_acc.size(), 0.0);
  std::vector<double> dk_bound(bound ? dk_acc.size() : 0, 0.0);

  // P_ij and dS_ij of query head h, recomputed where needed (the backward of FA2 does the same).
  auto p_and_ds = [&](int h, int i, int j, double* p, double* ds) {
    const double* qi = q + s.q_index(b, i, h);
    const double* doi = dout + s.q_index(b, i, h);
    const double* kj = k + s.kv_index(b, j, hk);
    const double* vj = v + s.kv_index(b, j, hk);
    double dot = 0, dp = 0;
    for (int c = 0; c < d; ++c) {
      dot += qi[c] * kj[c];
      dp += doi[c] * vj[c];
    }
    *p = std::exp(s.score(r(dot)) - lse[i]);
    // dS of the scores before the softcap (its tanh' folded in).
    *ds = r(*p * (r(dp) - row_dot[i]) * s.softcap_grad(r(dot)));
  };

  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    parallel_for(s.seqlen_q, threads, [&](int i) {  // LSE and D = rowsum(dO * O) of every row
      std::vector<double> o(d);
      if (lowp) forward_row_lowp(s, *lowp, q, k, v, b, h, i, o.data(), &lse[i]);
      else forward_row(s, q, k, v, b, h, i, o.data(), &lse[i]);
      no_key[i] = 1;
      for (int j = 0; j < s.seqlen_k && no_key[i]; ++j) no_key[i] = !s.visible(i, j);
      const double* doi = dout + s.q_index(b, i, h);
      double dot = 0;
      double magnitude = 0;
      for (int c = 0; c < d; ++c) {
        dot += doi[c] * o[c];
        magnitude += std::fabs(doi[c] * o[c]);
      }
      row_dot[i] = dot;
      row_dot_bound[i] = unit * magnitude;
    });
    parallel_for(s.seqlen_q, threads, [&](int i) {  // dQ_i = scale * sum_j dS_ij K_j
      std::vector<double> acc(d, 0.0), pk(bound ? d : 0, 0.0);
      if (lse[i] != kNegInf && !no_key[i])
        for (int j = 0; j < s.seqlen_k; ++j) {
          if (!s.visible(i, j)) continue;
          double p, ds;
          p_and_ds(h, i, j, &p, &ds);
          const double* kj = k + s.kv_index(b, j, hk);
          for (int c = 0; c < d; ++c) acc[c] += ds * kj[c];
          if (bound)
            for (int c = 0; c < d; ++c) pk[c] += p * kj[c];
        }
      double* dqi = dq + s.q_index(b, i, h);
      for (int c = 0; c < d; ++c) dqi[c] = r(s.scale * acc[c]);
      if (bound)
        for (int c = 0; c < d; ++c)
          bound->dq[s.q_index(b, i, h) + c] = s.scale * row_dot_bound[i] * std::fabs(pk[c]);
    });
    parallel_for(s.seqlen_k, threads, [&](int j) {  // dK_j += scale dS^T Q, dV_j += P^T dO
      double* dkj = &dk_acc[static_cast<size_t>(j) * d];
      double* dvj = &dv_acc[static_cast<size_t>(j) * d];
      for (int i = 0; i < s.seqlen_q; ++i) {
        if (lse[i] == kNegInf || no_key[i] || !s.visible(i, j)) continue;
        double p, ds;
        p_and_ds(h, i, j, &p, &ds);
        const double pr = r(p);
        const double* qi = q + s.q_index(b, i, h);
        const double* doi = dout + s.q_index(b, i, h);
        for (int c = 0; c < d; ++c) {
          dkj[c] += s.scale * ds * qi[c];
          dvj[c] += pr * doi[c];
        }
        if (bound)
          for (int c = 0; c < d; ++c)
            dk_bound[static_cast<size_t>(j) * d + c] += s.scale * p * row_dot_bound[i] * std::fabs(qi[c]);
      }
    });
  }
  for (int j = 0; j < s.seqlen_k; ++j)
    for (int c = 0; c < d; ++c) {
      dk[s.kv_index(b, j, hk) + c] = r(dk_acc[static_cast<size_t>(j) * d + c]);
      dv[s.kv_index(b, j, hk) + c] = r(dv_acc[static_cast<size_t>(j) * d + c]);
      if (bound) bound->dk[s.kv_index(b, j, hk) + c] = dk_bound[static_cast<size_t>(j) * d + c];
    }
}

void backward(const Shape& s, const double* q, const double* k, const double* v,
              const double* dout, double* dq, double* dk, double* dv, double* dsinks) {
  for (int b = 0; b < s.batch; ++b)
    for (int hk = 0; hk < s.heads_kv; ++hk)
      backward_group(s, q, k, v, dout, b, hk, nullptr, dq, dk, dv);
  if (dsinks && s.sinks) sink_gradient(s, q, k, v, dout, nullptr, dsinks);
}

void sink_gradient(const Shape& s, const double* q, const double* k, const double* v,
                   const double* dout, const Precision* lowp, double* dsinks, int threads,
                   double* magnitude) {
  for (int h = 0; h < s.heads_q; ++h) {
    std::vector<double> terms(static_cast<size_t>(s.batch) * s.seqlen_q), sizes(terms.size());
    parallel_for(static_cast<int>(terms.size()), threads, [&](int r) {
      const int b = r / s.seqlen_q, i = r % s.seqlen_q;
      std::vector<double> o(s.head_dim);
      double lse;
      if (lowp) forward_row_lowp(s, *lowp, q, k, v, b, h, i, o.data(), &lse);
      else forward_row(s, q, k, v, b, h, i, o.data(), &lse);
      const double* doi = dout + s.q_index(b, i, h);
      double dot = 0, abs_dot = 0;
      for (int c = 0; c < s.head_dim; ++c) {
        dot += doi[c] * o[c];
        abs_dot += std::fabs(doi[c] * o[c]);
      }
      terms[r] = std::exp(s.sinks[h] - lse) * dot;
      sizes[r] = std::exp(s.sinks[h] - lse) * abs_dot;
    });
    double sum = 0, size = 0;
    for (size_t r = 0; r < terms.size(); ++r) {
      sum += terms[r];
      size += sizes[r];
    }
    dsinks[h] = -sum;
    if (magnitude) magnitude[h] = size;
  }
}

double round_to(Precision p, double x) {
  const float f = static_cast<float>(x);
  return p == Precision::kBF16 ? static_cast<double>(__bfloat162float(__float2bfloat16_rn(f)))
                               : static_cast<double>(__half2float(__float2half_rn(f)));
}

void forward_row_lowp(const Shape& s, Precision prec, const double* q, const double* k,
                      const double* v, int b, int h, int i, double* o_row, double* lse) {
  const int d = s.head_dim, hk = s.kv_head(h);
  const double* qi = q + s.q_index(b, i, h);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> scores(s.seqlen_k, neg_inf);
  float m = neg_inf;
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (!s.visible(i, j)) continue;
    const double* kj = k + s.kv_index(b, j, hk);
    float dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<float>(qi[c]) * static_cast<float>(kj[c]);
    scores[j] = static_cast<float>(s.score(round_to(prec, dot)));
    m = std::max(m, scores[j]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = 0;
  const float sink = static_cast<float>(s.sink(h));
  if (m == neg_inf) {
    *lse = s.sinks ? s.sinks[h] : kNegInf;
    return;
  }
  m = std::max(m, sink);
  float l = s.sinks ? std::exp(sink - m) : 0.f;
  for (int j = 0; j < s.seqlen_k; ++j)
    if (scores[j] != neg_inf) l += std::exp(scores[j] - m);
  std::vector<float> acc(d, 0.f);
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (scores[j] == neg_inf) continue;
    const float pj = static_cast<float>(round_to(prec, std::exp(scores[j] - m) / l));
    const double* vj = v + s.kv_index(b, j, hk);
    for (int c = 0; c < d; ++c) acc[c] += pj * static_cast<float>(vj[c]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = round_to(prec, acc[c]);
  *lse = static_cast<double>(m + std::log(l));
}

}  // namespace hfa::reference

namespace hfa::reference {

double e4m3_to_double(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 0xF, mantissa = bits & 7;
  if (exponent == 0xF && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -9)  // subnormal: m x 2^-9
                                         : std::ldexp(8 + mantissa, exponent - 10);
  return sign ? -magnitude : magnitude;
}

double round_to_e4m3(double x) {
  return e4m3_to_double(static_cast<uint8_t>(__nv_cvt_double_to_fp8(x, __NV_SATFINITE, __NV_E4M3)));
}

void forward_row_fp8_baseline(const Shape& s, Precision out, const double* q, const double* k,
                              const double* v, int b, int h, int i, double* o_row, double* lse) {
  const int d = s.head_dim, hk = s.kv_head(h);
  const double* qi = q + s.q_index(b, i, h);
  std::vector<float> scores(s.seqlen_k, -INFINITY);
  float m = -INFINITY;
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (!s.visible(i, j)) continue;
    const double* kj = k + s.kv_index(b, j, hk);
    float dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<float>(qi[c] * kj[c]);  // exact products
    scores[j] = dot * static_cast<float>(s.scale);
    m = std::max(m, scores[j]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = 0;
  if (m == -INFINITY) {
    *lse = kNegInf;
    return;
  }
  float l = 0;
  std::vector<float> acc(d, 0.f);
  for (int j = 0; j < s.seqlen_k; ++j) {
    if (scores[j] == -INFINITY) continue;
    const float p = std::exp(scores[j] - m);
    l += p;
    const float pq = static_cast<float>(round_to_e4m3(p));
    const double* vj = v + s.kv_index(b, j, hk);
    for (int c = 0; c < d; ++c) acc[c] += pq * static_cast<float>(vj[c]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = round_to(out, acc[c] / l);
  *lse = static_cast<double>(m) + std::log(static_cast<double>(l));
}

}  // namespace hfa::reference
