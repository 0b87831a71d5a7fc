#include "reference/reference.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
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
    scores[j] = dot * s.scale;
    m = std::max(m, scores[j]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = 0;
  if (m == kNegInf) {  // no visible key
    *lse = kNegInf;
    return;
  }
  double l = 0;
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

void backward(const Shape& s, const double* q, const double* k, const double* v,
              const double* dout, double* dq, double* dk, double* dv) {
  const int d = s.head_dim;
  const int64_t q_elems = s.q_index(s.batch, 0, 0), kv_elems = s.kv_index(s.batch, 0, 0);
  std::fill(dq, dq + q_elems, 0.0);
  std::fill(dk, dk + kv_elems, 0.0);
  std::fill(dv, dv + kv_elems, 0.0);
  std::vector<double> o(d), p(s.seqlen_k);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < s.seqlen_q; ++i) {
        double lse;
        forward_row(s, q, k, v, b, h, i, o.data(), &lse);
        if (lse == kNegInf) continue;  // no visible key: O is constant 0, no gradient flows
        const int hk = s.kv_head(h);
        const double* qi = q + s.q_index(b, i, h);
        const double* doi = dout + s.q_index(b, i, h);
        double D = 0;  // rowsum(dO * O)
        for (int c = 0; c < d; ++c) D += doi[c] * o[c];
        for (int j = 0; j < s.seqlen_k; ++j) {
          if (!s.visible(i, j)) continue;
          const double* kj = k + s.kv_index(b, j, hk);
          const double* vj = v + s.kv_index(b, j, hk);
          double dot = 0, dp = 0;
          for (int c = 0; c < d; ++c) {
            dot += qi[c] * kj[c];
            dp += doi[c] * vj[c];
          }
          const double pij = std::exp(dot * s.scale - lse);
          const double ds = pij * (dp - D);
          double* dqi = dq + s.q_index(b, i, h);
          double* dkj = dk + s.kv_index(b, j, hk);
          double* dvj = dv + s.kv_index(b, j, hk);
          for (int c = 0; c < d; ++c) {
            dvj[c] += pij * doi[c];
            dqi[c] += s.scale * ds * kj[c];
            dkj[c] += s.scale * ds * qi[c];
          }
        }
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
    scores[j] = static_cast<float>(round_to(prec, dot)) * static_cast<float>(s.scale);
    m = std::max(m, scores[j]);
  }
  for (int c = 0; c < d; ++c) o_row[c] = 0;
  if (m == neg_inf) {
    *lse = kNegInf;
    return;
  }
  float l = 0;
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
