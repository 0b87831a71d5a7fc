// The fp64 reference is the oracle for every kernel, so it is tested against facts that do not
// come from its own code: closed forms, symmetries, and finite differences for the backward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference/fp8_accumulation.h"
#include "reference/reference.h"

namespace hfa::reference {
namespace {

struct Inputs {
  Shape s;
  std::vector<double> q, k, v;
};

Inputs random_inputs(Shape s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  Inputs in{s, {}, {}, {}};
  in.q.resize(s.q_index(s.batch, 0, 0));
  in.k.resize(s.kv_index(s.batch, 0, 0));
  in.v.resize(in.k.size());
  for (auto* t : {&in.q, &in.k, &in.v})
    for (double& x : *t) x = n(rng);
  return in;
}

Shape make_shape(int b, int sq, int sk, int hq, int hkv, int d, bool causal) {
  Shape s;
  s.batch = b; s.seqlen_q = sq; s.seqlen_k = sk; s.heads_q = hq; s.heads_kv = hkv; s.head_dim = d;
  s.scale = 1.0 / std::sqrt(static_cast<double>(d));
  s.causal = causal;
  return s;
}

TEST(Reference, MatchesDirectSoftmaxFormula) {
  // softmax written the textbook way: p_j = exp(s_j) / sum exp(s_k), no max subtraction.
  Inputs in = random_inputs(make_shape(2, 5, 7, 4, 2, 8, false), 1);
  const Shape& s = in.s;
  std::vector<double> o(s.head_dim);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < s.seqlen_q; ++i) {
        double lse;
        forward_row(s, in.q.data(), in.k.data(), in.v.data(), b, h, i, o.data(), &lse);
        std::vector<double> e(s.seqlen_k);
        double sum = 0;
        for (int j = 0; j < s.seqlen_k; ++j) {
          double dot = 0;
          for (int c = 0; c < s.head_dim; ++c)
            dot += in.q[s.q_index(b, i, h) + c] * in.k[s.kv_index(b, j, h / 2) + c];
          e[j] = std::exp(dot * s.scale);
          sum += e[j];
        }
        EXPECT_NEAR(lse, std::log(sum), 1e-12);
        for (int c = 0; c < s.head_dim; ++c) {
          double expect = 0;
          for (int j = 0; j < s.seqlen_k; ++j) expect += e[j] / sum * in.v[s.kv_index(b, j, h / 2) + c];
          EXPECT_NEAR(o[c], expect, 1e-12);
        }
      }
}

TEST(Reference, UniformValuesGiveThatValue) {
  // If every value row is u, any convex combination is u, whatever the scores and mask.
  Inputs in = random_inputs(make_shape(1, 9, 6, 2, 1, 4, true), 2);
  for (size_t x = 0; x < in.v.size(); ++x) in.v[x] = 0.5 + static_cast<double>(x % 4);
  std::vector<double> o(in.s.q_index(1, 0, 0)), lse(in.s.lse_index(1, 0, 0));
  forward(in.s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
  for (int h = 0; h < 2; ++h)
    for (int i = 3; i < 9; ++i)  // rows 0..2 see no key (sq - sk = 3)
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(o[in.s.q_index(0, i, h) + c], 0.5 + c, 1e-12);
}

TEST(Reference, CausalIsBottomRightAligned) {
  // sq = 4 > sk = 2: query i sees keys j <= i - 2. Rows 0, 1 see nothing; row 2 sees key 0 only.
  Inputs in = random_inputs(make_shape(1, 4, 2, 1, 1, 3, true), 3);
  std::vector<double> o(in.s.q_index(1, 0, 0)), lse(4);
  forward(in.s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i;
    for (int c = 0; c < 3; ++c) EXPECT_EQ(o[in.s.q_index(0, i, 0) + c], 0.0);
  }
  double dot = 0;
  for (int c = 0; c < 3; ++c) dot += in.q[in.s.q_index(0, 2, 0) + c] * in.k[c];
  EXPECT_NEAR(lse[2], dot * in.s.scale, 1e-12);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(o[in.s.q_index(0, 2, 0) + c], in.v[c], 1e-12);
  // sq = 2 < sk = 5: the last query sees every key, the first all but the last.
  Shape wide = make_shape(1, 2, 5, 1, 1, 3, true);
  EXPECT_TRUE(wide.visible(1, 4));
  EXPECT_TRUE(wide.visible(0, 3));
  EXPECT_FALSE(wide.visible(0, 4));
}

TEST(Reference, GqaEqualsMhaWithRepeatedKvHeads) {
  Inputs gqa = random_inputs(make_shape(2, 6, 5, 6, 2, 4, true), 4);
  Inputs mha = gqa;
  mha.s.heads_kv = 6;
  mha.k.assign(mha.s.kv_index(2, 0, 0), 0);
  mha.v.assign(mha.k.size(), 0);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 5; ++j)
      for (int h = 0; h < 6; ++h)
        for (int c = 0; c < 4; ++c) {
          mha.k[mha.s.kv_index(b, j, h) + c] = gqa.k[gqa.s.kv_index(b, j, h / 3) + c];
          mha.v[mha.s.kv_index(b, j, h) + c] = gqa.v[gqa.s.kv_index(b, j, h / 3) + c];
        }
  std::vector<double> o1(gqa.s.q_index(2, 0, 0)), o2(o1.size()), l1(gqa.s.lse_index(2, 0, 0)), l2(l1.size());
  forward(gqa.s, gqa.q.data(), gqa.k.data(), gqa.v.data(), o1.data(), l1.data());
  forward(mha.s, mha.q.data(), mha.k.data(), mha.v.data(), o2.data(), l2.data());
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(l1, l2);
}

// Backward against central finite differences of L = sum(O * W).
TEST(Reference, BackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    Inputs in = random_inputs(make_shape(1, 5, 4, 4, 2, 3, causal), causal ? 6 : 5);
    const Shape& s = in.s;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> n(0.0, 1.0);
    std::vector<double> w(s.q_index(1, 0, 0));
    for (double& x : w) x = n(rng);
    auto loss = [&](const Inputs& x) {
      std::vector<double> o(w.size()), lse(s.lse_index(1, 0, 0));
      forward(s, x.q.data(), x.k.data(), x.v.data(), o.data(), lse.data());
      double l = 0;
      for (size_t i = 0; i < o.size(); ++i) l += o[i] * w[i];
      return l;
    };
    std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    backward(s, in.q.data(), in.k.data(), in.v.data(), w.data(), dq.data(), dk.data(), dv.data());
    const double eps = 1e-6;
    for (auto [tensor, grad] : {std::pair{&Inputs::q, &dq}, {&Inputs::k, &dk}, {&Inputs::v, &dv}}) {
      for (size_t i = 0; i < (in.*tensor).size(); ++i) {
        Inputs plus = in, minus = in;
        (plus.*tensor)[i] += eps;
        (minus.*tensor)[i] -= eps;
        const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
        EXPECT_NEAR((*grad)[i], numeric, 1e-7) << "causal " << causal << " element " << i;
      }
    }
  }
}

// The score variants (issue 22) against facts of their own: the window is the keys the
// definition names, the softcap equals attention over capped scores written out, a sink adds
// exp(sink) to the denominator; and their gradients (softcap's tanh', dsinks) against finite
// differences.
TEST(ReferenceVariants, WindowSeesExactlyItsKeys) {
  Shape s = make_shape(1, 6, 9, 1, 1, 4, false);
  s.window_left = 2;
  s.window_right = 1;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 9; ++j) {  // diagonal of row i: i + 3
      EXPECT_EQ(s.visible(i, j), j >= i + 3 - 2 && j <= i + 3 + 1) << i << " " << j;
    }
  s.window_right = -1;  // unbounded right
  EXPECT_TRUE(s.visible(0, 8));
  EXPECT_FALSE(s.visible(0, 0));
  s.causal = true;  // causal and a left window
  EXPECT_FALSE(s.visible(0, 4));
  EXPECT_TRUE(s.visible(0, 3));
  EXPECT_TRUE(s.visible(0, 1));
  EXPECT_FALSE(s.visible(0, 0));
}

TEST(ReferenceVariants, SoftcapAndSinkMatchTheFormula) {
  Inputs in = random_inputs(make_shape(1, 4, 6, 2, 1, 8, false), 21);
  Shape& s = in.s;
  s.softcap = 1.5;  // small, so that the tanh bends the scores a lot
  const double sinks[2] = {0.7, -2.0};
  s.sinks = sinks;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      std::vector<double> o(8);
      double lse;
      forward_row(s, in.q.data(), in.k.data(), in.v.data(), 0, h, i, o.data(), &lse);
      double denom = std::exp(sinks[h]);
      std::vector<double> num(8, 0.0);
      for (int j = 0; j < 6; ++j) {
        double dot = 0;
        for (int c = 0; c < 8; ++c) dot += in.q[s.q_index(0, i, h) + c] * in.k[s.kv_index(0, j, 0) + c];
        const double e = std::exp(1.5 * std::tanh(dot * s.scale / 1.5));
        denom += e;
        for (int c = 0; c < 8; ++c) num[c] += e * in.v[s.kv_index(0, j, 0) + c];
      }
      EXPECT_NEAR(lse, std::log(denom), 1e-12);
      for (int c = 0; c < 8; ++c) EXPECT_NEAR(o[c], num[c] / denom, 1e-12);
    }
  // A row that sees no key: O = 0 and LSE = the sink (the denominator is exp(sink) alone).
  s.window_left = 0;
  s.window_right = 0;
  s.seqlen_k = 2;  // row 0's diagonal is key -2: nothing
  std::vector<double> o(8, 1.0);
  double lse;
  forward_row(s, in.q.data(), in.k.data(), in.v.data(), 0, 1, 0, o.data(), &lse);
  EXPECT_EQ(lse, sinks[1]);
  for (double x : o) EXPECT_EQ(x, 0.0);
}

TEST(ReferenceVariants, GradientsMatchFiniteDifferences) {
  Inputs in = random_inputs(make_shape(2, 5, 6, 4, 2, 3, false), 22);
  Shape& s = in.s;
  s.softcap = 0.8;
  s.window_left = 2;
  s.window_right = 0;
  std::vector<double> sinks = {0.3, -0.5, 1.1, 0.0};
  s.sinks = sinks.data();
  std::mt19937_64 rng(23);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> w(s.q_index(2, 0, 0));
  for (double& x : w) x = n(rng);
  auto loss = [&](const Inputs& x, const std::vector<double>& sk) {
    Shape t = s;
    t.sinks = sk.data();
    std::vector<double> o(w.size()), lse(t.lse_index(2, 0, 0));
    forward(t, x.q.data(), x.k.data(), x.v.data(), o.data(), lse.data());
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * w[i];
    return l;
  };
  std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.v.size()), dsinks(4);
  backward(s, in.q.data(), in.k.data(), in.v.data(), w.data(), dq.data(), dk.data(), dv.data(), dsinks.data());
  const double eps = 1e-6;
  for (auto [tensor, grad] : {std::pair{&Inputs::q, &dq}, {&Inputs::k, &dk}, {&Inputs::v, &dv}})
    for (size_t i = 0; i < (in.*tensor).size(); ++i) {
      Inputs plus = in, minus = in;
      (plus.*tensor)[i] += eps;
      (minus.*tensor)[i] -= eps;
      EXPECT_NEAR((*grad)[i], (loss(plus, sinks) - loss(minus, sinks)) / (2 * eps), 1e-7) << i;
    }
  for (int h = 0; h < 4; ++h) {
    std::vector<double> plus = sinks, minus = sinks;
    plus[h] += eps;
    minus[h] -= eps;
    EXPECT_NEAR(dsinks[h], (loss(in, plus) - loss(in, minus)) / (2 * eps), 1e-7) << "sink " << h;
  }
}

TEST(Reference, LowPrecisionBaselineHasTheExpectedErrorSize) {
  // The tolerance baseline must be neither exact (a useless bound) nor far off (a loose one).
  Inputs in = random_inputs(make_shape(1, 64, 256, 1, 1, 64, false), 8);
  for (Precision p : {Precision::kBF16, Precision::kFP16}) {
    for (auto* t : {&in.q, &in.k, &in.v})
      for (double& x : *t) x = round_to(p, x);  // kernels see dtype-representable inputs
    double max_err = 0;
    std::vector<double> ref(64), base(64);
    for (int i = 0; i < 64; ++i) {
      double l1, l2;
      forward_row(in.s, in.q.data(), in.k.data(), in.v.data(), 0, 0, i, ref.data(), &l1);
      forward_row_lowp(in.s, p, in.q.data(), in.k.data(), in.v.data(), 0, 0, i, base.data(), &l2);
      for (int c = 0; c < 64; ++c) max_err = std::max(max_err, std::fabs(ref[c] - base[c]));
    }
    const double unit = p == Precision::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    EXPECT_GT(max_err, 0.01 * unit);
    EXPECT_LT(max_err, 8 * unit);
  }
}

TEST(Reference, LowPrecisionBackwardBaselineHasTheExpectedErrorSize) {
  // The gradients' baseline: close to the fp64 gradients (within a few dtype steps of their
  // magnitude) but not equal, and computed for every row of the group (none left unwritten).
  Inputs in = random_inputs(make_shape(1, 48, 80, 4, 2, 64, true), 9);
  std::mt19937_64 rng(10);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> dout(in.q.size());
  for (double& x : dout) x = n(rng);
  for (Precision p : {Precision::kBF16, Precision::kFP16}) {
    std::vector<double> rq(in.q.size(), NAN), rk(in.k.size(), NAN), rv(in.v.size(), NAN);
    std::vector<double> bq = rq, bk = rk, bv = rv;
    for (int hk = 0; hk < 2; ++hk) {
      backward_group(in.s, in.q.data(), in.k.data(), in.v.data(), dout.data(), 0, hk, nullptr,
                     rq.data(), rk.data(), rv.data(), 2);
      backward_group(in.s, in.q.data(), in.k.data(), in.v.data(), dout.data(), 0, hk, &p,
                     bq.data(), bk.data(), bv.data(), 2);
    }
    const double unit = p == Precision::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (auto [ref, base] : {std::pair{&rq, &bq}, {&rk, &bk}, {&rv, &bv}}) {
      double max_err = 0, max_ref = 0;
      for (size_t i = 0; i < ref->size(); ++i) {
        ASSERT_FALSE(std::isnan((*ref)[i]) || std::isnan((*base)[i])) << "element " << i;
        max_err = std::max(max_err, std::fabs((*ref)[i] - (*base)[i]));
        max_ref = std::max(max_ref, std::fabs((*ref)[i]));
      }
      EXPECT_GT(max_err, 0.01 * unit * max_ref);
      EXPECT_LT(max_err, 16 * unit * max_ref);
    }
  }
}

// RoundedOBound against its meaning, on the case that needed it (one query, one key, a sink):
// computed from the definitions here, dS = P (dP - D) with D from O rounded to bf16 moves dq and
// dk by no more than the bound, and by a good part of it somewhere (the bound is not vacuous).
TEST(Reference, RoundedOBoundCoversDFromARoundedO) {
  const int d = 64;
  std::mt19937_64 rng(21);
  std::normal_distribution<double> n(0.0, 1.0);
  std::uniform_real_distribution<double> u(-1.0, 4.0);
  const Precision bf16 = Precision::kBF16;
  double worst = 0;  // the largest (effect / bound)
  for (int trial = 0; trial < 200; ++trial) {
    Inputs in = random_inputs(make_shape(1, 1, 1, 1, 1, d, false), 100 + trial);
    for (auto* t : {&in.q, &in.k, &in.v})
      for (double& x : *t) x = round_to(bf16, x);
    double sink = u(rng);
    in.s.sinks = &sink;
    std::vector<double> dout(d);
    for (double& x : dout) x = round_to(bf16, n(rng));
    // The definitions: s = scale q.k, P = e^s / (e^s + e^sink), O = P v, dP = dO.v, dq = scale dS k.
    double dot = 0, dp = 0;
    for (int c = 0; c < d; ++c) dot += in.q[c] * in.k[c], dp += dout[c] * in.v[c];
    const double p = 1.0 / (1.0 + std::exp(sink - in.s.scale * dot));
    double d_exact = 0, d_rounded = 0;
    for (int c = 0; c < d; ++c) {
      d_exact += dout[c] * p * in.v[c];
      d_rounded += dout[c] * round_to(bf16, p * in.v[c]);
    }
    const double ds_shift = p * (d_exact - d_rounded);  // dS(rounded O) - dS(exact O)
    std::vector<double> bq(d), bk(d), gq(d), gk(d), gv(d);
    const RoundedOBound bound{bq.data(), bk.data()};
    backward_group(in.s, in.q.data(), in.k.data(), in.v.data(), dout.data(), 0, 0, &bf16, gq.data(),
                   gk.data(), gv.data(), 1, &bound);
    for (int c = 0; c < d; ++c) {
      const double moved_q = std::fabs(in.s.scale * ds_shift * in.k[c]);
      const double moved_k = std::fabs(in.s.scale * ds_shift * in.q[c]);
      ASSERT_LE(moved_q, 1.01 * bq[c]) << "trial " << trial << " dq column " << c;
      ASSERT_LE(moved_k, 1.01 * bk[c]) << "trial " << trial << " dk column " << c;
      if (bq[c] > 0) worst = std::max(worst, moved_q / bq[c]);
    }
  }
  EXPECT_GT(worst, 0.1);
}

// The same without a sink, on a row that sees two keys in fp16 (as the top rows of a causal
// problem with seqlen_q > seqlen_k do; check_backward applies the bound to every problem since a
// kernel's dq exceeded the tolerance there): dS_j = P_j (dP_j - D) moves by P_j (D - D(rounded O)).
TEST(Reference, RoundedOBoundCoversAFewKeysWithoutSink) {
  const int d = 64;
  std::mt19937_64 rng(22);
  std::normal_distribution<double> n(0.0, 1.0);
  const Precision fp16 = Precision::kFP16;
  double worst = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Inputs in = random_inputs(make_shape(1, 1, 2, 1, 1, d, false), 300 + trial);
    for (auto* t : {&in.q, &in.k, &in.v})
      for (double& x : *t) x = round_to(fp16, x);
    std::vector<double> dout(d);
    for (double& x : dout) x = round_to(fp16, n(rng));
    // The definitions: s_j = scale q.k_j, P = softmax(s), O = sum_j P_j v_j, D = dO.O.
    double s[2];
    for (int j = 0; j < 2; ++j) {
      s[j] = 0;
      for (int c = 0; c < d; ++c) s[j] += in.q[c] * in.k[j * d + c];
      s[j] *= in.s.scale;
    }
    const double top = std::max(s[0], s[1]);
    const double e0 = std::exp(s[0] - top), e1 = std::exp(s[1] - top);
    const double p[2] = {e0 / (e0 + e1), e1 / (e0 + e1)};
    double d_exact = 0, d_rounded = 0;
    for (int c = 0; c < d; ++c) {
      const double o = p[0] * in.v[c] + p[1] * in.v[d + c];
      d_exact += dout[c] * o;
      d_rounded += dout[c] * round_to(fp16, o);
    }
    std::vector<double> bq(d), bk(2 * d), gq(d), gk(2 * d), gv(2 * d);
    const RoundedOBound bound{bq.data(), bk.data()};
    backward_group(in.s, in.q.data(), in.k.data(), in.v.data(), dout.data(), 0, 0, &fp16, gq.data(),
                   gk.data(), gv.data(), 1, &bound);
    for (int c = 0; c < d; ++c) {
      const double moved_q = std::fabs(in.s.scale * (d_exact - d_rounded) * (p[0] * in.k[c] + p[1] * in.k[d + c]));
      ASSERT_LE(moved_q, 1.01 * bq[c]) << "trial " << trial << " dq column " << c;
      if (bq[c] > 0) worst = std::max(worst, moved_q / bq[c]);
      for (int j = 0; j < 2; ++j) {
        const double moved_k = std::fabs(in.s.scale * p[j] * (d_exact - d_rounded) * in.q[c]);
        ASSERT_LE(moved_k, 1.01 * bk[j * d + c]) << "trial " << trial << " dk row " << j << " column " << c;
      }
    }
  }
  EXPECT_GT(worst, 0.1);
}

TEST(Reference, RoundToNearestEven) {
  EXPECT_EQ(round_to(Precision::kBF16, 1.0 + std::ldexp(1.0, -8)), 1.0);  // tie -> even
  EXPECT_EQ(round_to(Precision::kBF16, 1.0 + 3 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(round_to(Precision::kFP16, 1.0 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_to(Precision::kFP16, 65504.0), 65504.0);
}

}  // namespace
}  // namespace hfa::reference

namespace hfa::reference {
namespace {

// e4m3 (FN): known codes, every code's round trip, and rounding between codes.
TEST(ReferenceFp8, E4m3CodesAndRounding) {
  EXPECT_EQ(e4m3_to_double(0x7E), 448.0);           // the largest finite value
  EXPECT_EQ(e4m3_to_double(0x08), std::ldexp(1, -6));  // the smallest normal
  EXPECT_EQ(e4m3_to_double(0x01), std::ldexp(1, -9));  // the smallest subnormal
  EXPECT_EQ(e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(e4m3_to_double(0xB8), -1.0);
  EXPECT_TRUE(std::isnan(e4m3_to_double(0x7F)));
  for (int code = 0; code < 256; ++code) {
    const double x = e4m3_to_double(static_cast<uint8_t>(code));
    if (!std::isnan(x)) EXPECT_EQ(round_to_e4m3(x), x) << code;
  }
  EXPECT_EQ(round_to_e4m3(1000.0), 448.0);  // saturating
  EXPECT_EQ(round_to_e4m3(1.0 + 1.0 / 32), 1.0);  // half-way between 1 and 1.125: to even
  EXPECT_EQ(round_to_e4m3(1.0 + 3.0 / 32), 1.125);
}

// The FP8 yardstick is close to the fp64 attention but not equal: its P is rounded to e4m3.
TEST(ReferenceFp8, BaselineErrorIsThatOfE4m3P) {
  Shape s;
  s.seqlen_q = 4;
  s.seqlen_k = 300;
  s.head_dim = 64;
  s.scale = 0.125;
  std::vector<double> q(s.seqlen_q * 64), k(s.seqlen_k * 64), v(s.seqlen_k * 64);
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return round_to_e4m3(static_cast<double>(x >> 11) * 0x1p-53 * 4 - 2);
  };
  for (auto* t : {&q, &k, &v})
    for (double& e : *t) e = next();
  std::vector<double> ref(64), base(64);
  double lse_ref, lse_base;
  for (int i = 0; i < s.seqlen_q; ++i) {
    forward_row(s, q.data(), k.data(), v.data(), 0, 0, i, ref.data(), &lse_ref);
    forward_row_fp8_baseline(s, Precision::kBF16, q.data(), k.data(), v.data(), 0, 0, i, base.data(), &lse_base);
    double err = 0;
    for (int c = 0; c < 64; ++c) err = std::max(err, std::fabs(ref[c] - base[c]));
    EXPECT_GT(err, 1e-4);  // P in e4m3 is visibly inexact
    EXPECT_LT(err, 0.1);
    EXPECT_NEAR(lse_base, lse_ref, 1e-4);
  }
}


// The FP8 accumulation model (fp8_accumulation.h): its bound covers the model's own arithmetic, a
// product at a time truncated toward zero, on the value distributions the checks use (products of
// mixed sign, of one sign, with outlier channels, with one dominant channel; e4m3 inputs and any),
// and is not vacuous where the errors are largest (one sign: within a small factor of them).
TEST(ReferenceFp8, DotErrorBoundCoversTheModel) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  for (const bool e4m3 : {true, false})
  for (const int d : {64, 128, 256})
    for (int dist = 0; dist < 4; ++dist) {
      auto input = [e4m3](double x) { return e4m3 ? round_to_e4m3(x) : x; };
      double sum_err = 0, sum_bound = 0;
      for (int t = 0; t < 500; ++t) {
        std::vector<double> a(d), b(d);
        for (int c = 0; c < d; ++c) {
          const double outlier = dist == 2 && c % 16 == 5 ? 12 : 1;
          const double ramp = dist == 3 && c == 0 ? 10 * std::sqrt(d) : 0;
          a[c] = input(dist == 1 ? uniform(rng) : normal(rng) * outlier + ramp);
          b[c] = input(dist == 1 ? uniform(rng) : normal(rng) * outlier + ramp * uniform(rng));
        }
        double exact = 0;
        for (int c = 0; c < d; ++c) exact += a[c] * b[c];
        const double err = std::fabs(fp8_dot_emulated(a.data(), b.data(), d) - exact);
        const double bound = fp8_dot_error_bound(a.data(), b.data(), d);
        // The bound takes the exact partial sums, the emulation its own: 1e-3 for the difference.
        ASSERT_LE(err, bound * (1 + 1e-3)) << "d " << d << " distribution " << dist << " e4m3 " << e4m3;
        sum_err += err;
        sum_bound += bound;
      }
      EXPECT_GT(sum_err, 0) << "d " << d << " distribution " << dist << ": the model loses nothing?";
      // (e4m3 products have few bits, so many steps lose less than the model's worst case.)
      if (dist == 1 && !e4m3) EXPECT_LT(sum_bound, 16 * sum_err) << "d " << d << ": one-sign products";
    }
}

// P V in tiles of at most kFp8PvTileKeys keys, each into a fresh accumulator, at any alignment of the
// tiles, with P rounded to e4m3 as the kernels do (after a common factor that puts its largest at
// 256): the error against the exact sum of those rounded products stays within fp8_pv_error_bound.
TEST(ReferenceFp8, PvErrorBoundCoversTiledAccumulation) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  const int keys = 1500;
  for (const bool one_sign : {false, true})
    for (int t = 0; t < 40; ++t) {
      std::vector<double> p(keys), v(keys);
      double l = 0, m = 0;
      for (int j = 0; j < keys; ++j) m = std::max(m, p[j] = normal(rng) * 1.5);
      for (int j = 0; j < keys; ++j) l += (p[j] = std::exp(p[j] - m));
      for (int j = 0; j < keys; ++j) v[j] = round_to_e4m3(one_sign ? uniform(rng) : normal(rng));
      std::vector<double> p_e4m3(keys);  // the kernels' P: exp2(s - max + 8), in e4m3
      double exact = 0, sum_p_abs_v = 0;
      for (int j = 0; j < keys; ++j) {
        p_e4m3[j] = round_to_e4m3(p[j] * 256);
        exact += p_e4m3[j] * v[j];
        sum_p_abs_v += p[j] / l * std::fabs(v[j]);
      }
      const int first = static_cast<int>(rng() % kFp8PvTileKeys);  // the first tile's width
      double tiled = 0;
      for (int j0 = 0; j0 < keys;) {
        const int width = std::min(keys - j0, j0 == 0 ? std::max(first, 1) : kFp8PvTileKeys);
        tiled += fp8_dot_emulated(p_e4m3.data() + j0, v.data() + j0, width);
        j0 += width;
      }
      const double err = std::fabs(tiled - exact) / (256 * l);  // in units of O
      EXPECT_LE(err, fp8_pv_error_bound(sum_p_abs_v)) << "one sign " << one_sign << " trial " << t;
      if (one_sign) EXPECT_GT(err, fp8_pv_error_bound(sum_p_abs_v) / 32) << "trial " << t;  // not vacuous
    }
}

}  // namespace
}  // namespace hfa::reference
