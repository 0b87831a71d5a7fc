// The score variants (issue 22: sliding window, softcap, attention sinks, and their combinations)
// in every kernel that takes them, forward and backward, against the fp64 reference by the
// DESIGN.md rule (check::run_check, run_check_backward: the reference and its low-precision
// baseline apply the same variant). Windows are chosen to cross tile edges (128-key tiles), to
// leave some rows with no key, and to be one-sided; sinks are random per head in [-1, 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "check/check.h"
#include "gpu_test_util.h"
#include "kernels/k6/k6_launch.h"

namespace hfa::testing {
namespace {

struct VariantCase {
  const char* name;
  int window_left, window_right;
  float softcap;
  bool sinks, causal;
};

const VariantCase kVariants[] = {
    {"window_128_0", 128, 0, 0.f, false, false},     // Mistral-like: a causal sliding window
    {"window_100_37", 100, 37, 0.f, false, false},   // two-sided, crossing tile edges
    {"window_right_50", -1, 50, 0.f, false, false},  // bounded on the right only
    {"window_0_0", 0, 0, 0.f, false, false},         // the diagonal alone
    {"causal_left_64", 64, -1, 0.f, false, true},    // causal flag plus a left window
    {"softcap", -1, -1, 2.f, false, false},          // a small cap bends most scores
    {"softcap_causal", -1, -1, 2.f, false, true},
    {"sinks", -1, -1, 0.f, true, false},
    {"sinks_causal", -1, -1, 0.f, true, true},
    {"window_softcap_sinks", 96, 0, 3.f, true, false},
    // most scores past the tanh's knee: tanh' small, where 1 - t * t from an approximate t lost
    // most of its digits (the backward's dS)
    {"softcap_saturated", -1, -1, 0.5f, false, true},
    {"softcap_50", -1, -1, 50.f, false, true},  // Gemma 2's attention cap: tanh near its linear part
};

// Odd lengths, sq != sk both ways (rows with no key under windows and causal), GQA 3:1, MQA,
// and lengths of several tiles so that windows start past the first KV tile.
const ShapeCase kForwardShapes[] = {
    {1, 1, 1, 2, 2}, {2, 17, 129, 6, 2}, {1, 129, 17, 4, 4}, {1, 300, 257, 6, 3}, {1, 520, 700, 2, 1},
};
const ShapeCase kBackwardShapes[] = {
    {1, 1, 1, 2, 2}, {2, 17, 129, 6, 2}, {1, 129, 17, 4, 4}, {1, 300, 257, 6, 3},
};

struct VariantParam {
  std::string kernel;
  int head_dim;
  DType dtype;
  VariantCase variant;
};

std::string variant_param_name(const ::testing::TestParamInfo<VariantParam>& info) {
  const VariantParam& p = info.param;
  return p.kernel + "_d" + std::to_string(p.head_dim) + "_" + to_string(p.dtype) + "_" + p.variant.name;
}

template <class Info>
std::vector<VariantParam> params_for(const std::vector<Info>& kernels) {
  std::vector<VariantParam> out;
  for (const Info& k : kernels)
    for (int d : compiled_head_dims())
      for (DType dt : {DType::kBF16, DType::kFP16})
        for (const VariantCase& v : kVariants) {
          const bool window = v.window_left != -1 || (v.window_right != -1 && v.window_right != 0);
          if ((window && !k.window) || (v.softcap > 0 && !k.softcap) || (v.sinks && !k.sinks)) continue;
          out.push_back({k.name, d, dt, v});
        }
  return out;
}

check::Config variant_config(const VariantParam& p, const ShapeCase& s, int n) {
  check::Config c = matrix_config({p.kernel, p.head_dim, p.variant.causal, p.dtype}, s);
  c.window_left = p.variant.window_left;
  c.window_right = p.variant.window_right;
  c.softcap = p.variant.softcap;
  c.sinks = p.variant.sinks;
  c.layout = kLayouts[n % 3];  // padded: the sinks' stride is 2
  return c;
}

class ForwardVariants : public ::testing::TestWithParam<VariantParam> {};

TEST_P(ForwardVariants, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  const VariantParam& p = GetParam();
  for_each_case(variant_param_name({p, 0}), kForwardShapes, [&](const ShapeCase& s, int n, uint64_t seed) {
    expect_forward_pass(variant_config(p, s, n), seed, /*max_rows=*/768);
  });
}

INSTANTIATE_TEST_SUITE_P(VariantKernels, ForwardVariants, ::testing::ValuesIn(params_for(list_kernels())),
                         variant_param_name);

// One long-row variant case checked against the reference (up to max_rows rows); *ran counts the
// cases that ran. A kernel that does not take the case (e.g. this head dim) is passed over.
void expect_long_row_pass(const check::Config& c, uint64_t seed, int max_rows, int* ran) {
  check::CheckResult r;
  const Status st = check::run_check(c, seed, max_rows, &r);
  if (st.code == StatusCode::kUnsupported) return;
  ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
  EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
  ++*ran;
}

// Softcap on long causal rows, where k6 takes its tiles in the dynamic order (k6_launch.h:
// dynamic_tile_order): every kernel with softcap, every compiled head dim, seqlen_q != seqlen_k
// both ways, GQA 3:1, Gemma 2's cap.
TEST(ForwardVariantsLongCausal, SoftcapMatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  int ran = 0;
  for (const KernelInfo& k : list_kernels()) {
    if (!k.softcap) continue;
    for (int d : compiled_head_dims()) {
      const int seqlen_q = k6::dynamic_order_min_seqlen_q(d) + 77;
      for (int seqlen_k : {seqlen_q + 300, seqlen_q / 2}) {
        check::Config c = matrix_config({k.name, d, /*causal=*/true, DType::kBF16}, ShapeCase{2, seqlen_q, seqlen_k, 6, 2});
        c.softcap = 50.f;
        ASSERT_NO_FATAL_FAILURE(expect_long_row_pass(c, 77 + d + ran, /*max_rows=*/512, &ran));
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no kernel of this build takes softcap";
}

// Sliding windows on long rows, where k6 takes its tiles in the dynamic order (k6_launch.h:
// dynamic_tile_order) with the window's KV range per tile: every kernel that takes a window, every
// compiled head dim, a causal window, one reaching both ways, one only ahead (its last Q tiles
// see fewer keys), seqlen_q != seqlen_k both ways, GQA 3:1.
TEST(ForwardVariantsLongWindow, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  int ran = 0;
  for (const KernelInfo& k : list_kernels()) {
    if (!k.window) continue;
    for (int d : compiled_head_dims()) {
      const int seqlen_q = k6::dynamic_order_min_seqlen_q_window(d) + 77;
      FwdProblem shape;
      shape.head_dim = d, shape.seqlen_q = seqlen_q, shape.local = true;
      ASSERT_TRUE(k6::dynamic_tile_order(shape)) << "window problems no longer reach k6's dynamic order";
      const std::pair<int, int> windows[] = {{700, 0}, {1000, 300}, {0, 900}};
      for (int seqlen_k : {seqlen_q + 300, seqlen_q / 2})
        for (const auto& [left, right] : windows) {
          check::Config c = matrix_config({k.name, d, /*causal=*/false, DType::kBF16}, ShapeCase{2, seqlen_q, seqlen_k, 6, 2});
          c.window_left = left, c.window_right = right;
          ASSERT_NO_FATAL_FAILURE(expect_long_row_pass(c, 91 + d + left + seqlen_k % 5, /*max_rows=*/384, &ran));
        }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no kernel of this build takes a window";
}

// The checker has teeth for each variant: a kernel that ignored it (the launch without it,
// while the reference applies it) fails.
TEST(ForwardVariantsChecker, CatchesAnIgnoredVariant) {
  HFA_SKIP_WITHOUT_GPU();
  const std::pair<const char*, void (*)(ForwardArgs&)> ignore[] = {
      {"window", [](ForwardArgs& a) { a.window_left = a.window_right = -1; }},
      {"softcap", [](ForwardArgs& a) { a.softcap = 0.f; }},
      {"sinks", [](ForwardArgs& a) { a.sinks = TensorView{}; }}};
  for (const auto& [name, tamper] : ignore) {
    const VariantCase& all_three = *std::find_if(std::begin(kVariants), std::end(kVariants), [](const VariantCase& v) {
      return std::string(v.name) == "window_softcap_sinks";
    });
    check::Config c = variant_config({"auto", compiled_head_dims()[0], DType::kBF16, all_three},
                                     {1, 300, 257, 6, 3}, 0);
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(c).ok());
    check::CheckResult r;
    ASSERT_TRUE(check::run_check(buf, 77, 0, &r, tamper).ok());
    EXPECT_FALSE(r.pass) << name << " ignored and still passed: " << r.message;
  }
}

class BackwardVariants : public ::testing::TestWithParam<VariantParam> {};

// dq, dk, dv (and dsinks, every group compared) against the reference; every other shape in
// deterministic mode, whose dQ turns follow the window's KV-block ranges.
TEST_P(BackwardVariants, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  const VariantParam& p = GetParam();
  uint64_t seed = test_seed(variant_param_name({p, 0}));
  int n = 0;
  for (const ShapeCase& s : kBackwardShapes) {
    check::Config c = variant_config(p, s, n);
    c.backward = true;
    c.deterministic = n++ % 2 == 1;
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(c).ok());
    check::BackwardCheckResult r;
    const Status st = check::run_check_backward(buf, ++seed, /*max_groups=*/0, &r);
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << c.describe() << ": " << st.message;
    ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
    EXPECT_TRUE(r.pass) << c.describe() << " seed " << seed << ": " << r.message;
    if (c.sinks) EXPECT_TRUE(r.dsinks_checked) << c.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(VariantKernels, BackwardVariants,
                         ::testing::ValuesIn(params_for(list_backward_kernels())), variant_param_name);

// Deterministic mode with a window: dq, dk, dv and dsinks bit-identical from run to run, in every
// backward kernel that takes a window.
TEST(BackwardVariantsDeterministic, WindowIsBitwiseRepeatable) {
  HFA_SKIP_WITHOUT_GPU();
  int ran = 0;
  for (const KernelInfo& k : list_backward_kernels()) {
    if (!k.window) continue;
    SCOPED_TRACE(k.name);
    check::Config c;
    c.kernel = k.name;
    c.head_dim = compiled_head_dims()[0];
    c.batch = 2; c.seqlen_q = 700; c.seqlen_k = 900; c.heads_q = 4; c.heads_kv = 2;
    c.window_left = 200;
    c.window_right = 0;
    c.sinks = true;
    c.backward = true;
    c.deterministic = true;
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(c).ok());
    ASSERT_TRUE(buf.fill_random(5).ok());
    ForwardArgs fwd = buf.forward_args();
    fwd.kernel = "auto";  // (the config names the backward kernel)
    ASSERT_TRUE(forward(fwd).ok());
    std::vector<unsigned char> first;
    bool unsupported = false;
    for (int run = 0; run < 3 && !unsupported; ++run) {
      ASSERT_TRUE(buf.poison_outputs().ok());
      ASSERT_TRUE(forward(fwd).ok());
      const Status st = backward(buf.backward_args());
      if (st.code == StatusCode::kUnsupported) { unsupported = true; break; }
      ASSERT_TRUE(st.ok()) << st.message;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto bytes = download_bytes({&buf.dq, &buf.dk, &buf.dv, &buf.dsinks});
      if (run == 0) first = bytes;
      else EXPECT_TRUE(bytes == first) << "run " << run << " differs";
    }
    ran += unsupported ? 0 : 1;
  }
  if (ran == 0) GTEST_SKIP() << "no backward kernel of this build takes a window here";
}

}  // namespace
}  // namespace hfa::testing
