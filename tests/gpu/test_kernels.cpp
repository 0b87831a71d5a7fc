// Every registered kernel over the GPU test matrix, each case on fresh random inputs with poisoned
// outputs, checked against the fp64 reference by the DESIGN.md rule (check/check.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "check/check.h"
#include "gpu_test_util.h"
#include "kernels/k6/k6_launch.h"
#include "kernels/k7/k7_launch.h"

namespace hfa::testing {
namespace {

// Odd seqlens, seqlen_q != seqlen_k both ways, MHA, GQA 8:1 and 6:1, MQA.
const ShapeCase kShapes[] = {
    {1, 1, 1, 2, 2},        {2, 17, 17, 8, 1},     {1, 129, 129, 16, 2},  {1, 1000, 1000, 6, 1},
    {2, 17, 129, 12, 2},    {2, 129, 17, 4, 4},    {1, 1000, 257, 8, 1},  {1, 64, 1000, 6, 3},
    {3, 128, 128, 2, 1},    {1, 1, 1000, 4, 1},
};
constexpr int64_t kMaxRowsChecked = 768;

class KernelMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(KernelMatrix, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const MatrixParam& p = GetParam();
  for_each_case(param_name({p, 0}), kShapes, [&](const ShapeCase& s, int n, uint64_t seed) {
    check::Config c = matrix_config(p, s);
    c.layout = kLayouts[n % 3];
    expect_forward_pass(c, seed, kMaxRowsChecked);
  });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, KernelMatrix, ::testing::ValuesIn(matrix(kernel_names())),
                         param_name);

class PerKernel : public ::testing::TestWithParam<std::string> {
 protected:
  // A small problem for this test's kernel, at the first head dim of this build.
  check::Config small(int seqlen_q, int seqlen_k, int heads_q, int heads_kv) const {
    check::Config c;
    c.kernel = GetParam();
    check::use_kernel_inputs(&c, c.kernel);
    c.head_dim = compiled_head_dims()[0];
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    return c;
  }
};

// A non-default softmax scale reaches the kernel.
TEST_P(PerKernel, CustomSoftmaxScale) {
  HFA_SKIP_WITHOUT_GPU();
  check::Config c = small(77, 90, 2, 2);
  c.softmax_scale = 0.37f;
  check::CheckResult r;
  ASSERT_TRUE(check::run_check(c, 11, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
}

// Zero and negative scales are allowed: the max of the scaled scores is then not the scaled max
// of the raw ones (kernels that fold the scale into the exponent's FMA must notice), and a masked
// score times a zero scale must not become NaN. Causal, so that masked scores exist.
TEST_P(PerKernel, ZeroAndNegativeSoftmaxScale) {
  HFA_SKIP_WITHOUT_GPU();
  for (const float scale : {-0.37f, 0.f}) {
    check::Config c = small(77, 90, 2, 2);
    c.causal = true;
    c.softmax_scale = scale;
    check::CheckResult r;
    ASSERT_TRUE(check::run_check(c, 16, 0, &r).ok());
    EXPECT_TRUE(r.pass) << "softmax_scale " << scale << ": " << r.message;
  }
}

// A large scale spreads the scores over hundreds of log2 units, so a row's max keeps growing from
// one KV tile to the next by far more than the online softmax's lazy-rescale threshold (K6): the
// path that moves the reference max and rescales O mid-row runs, not just the first tile's. At
// scale 50 a new max is typically hundreds of log2 units above the old one, so a P taken against
// the old max (K6's speculative softmax: d = 128, and d = 64's 192-row tiles, which this
// non-causal 300-row shape takes) would overflow to inf: the slow path must recompute it from the
// raw scores. Every head dim: kernels choose such things per head dim.
TEST_P(PerKernel, LargeScoreRangeAcrossTiles) {
  HFA_SKIP_WITHOUT_GPU();
  for (const int head_dim : compiled_head_dims())
    for (const bool causal : {false, true})
      for (const float scale : {2.f, 50.f}) {
        check::Config c = small(300, 1000, 4, 2);
        c.head_dim = head_dim;
        c.causal = causal;
        c.softmax_scale = scale;
        check::CheckResult r;
        const Status st = check::run_check(c, 23, 0, &r);
        if (st.code == StatusCode::kUnsupported) continue;  // e.g. k3_3 at d = 256 (declared)
        ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
        EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
      }
}

// A long query sequence against short keys at d = 64: k6 runs these shapes on its 192-row Q tiles
// with three consumer warpgroups (k6_launch.h, wide_q_tile), whose last tile holds rows past
// seqlen_q (8200 = 42 x 192 + 136) and whose last KV tile is masked (1000 keys). Also with a
// large scale (the max moves across KV tiles), with no keys at all, and causal (bottom-right
// aligned: the first 7200 rows see no key, so whole 192-row tiles have no KV tile).
TEST_P(PerKernel, LongQueriesShortKeysAtD64) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = compiled_head_dims();
  if (std::find(dims.begin(), dims.end(), 64) == dims.end()) GTEST_SKIP() << "d = 64 not compiled";
  const struct { int seqlen_k; float scale; bool causal; } cases[] = {
      {1000, 0.125f, false}, {1000, 2.f, false}, {0, 0.125f, false}, {1000, 0.125f, true}};
  for (const auto& cs : cases) {
    check::Config c = small(8200, cs.seqlen_k, 4, 2);
    c.head_dim = 64;
    c.softmax_scale = cs.scale;
    c.causal = cs.causal;
    FwdProblem shape;
    shape.head_dim = 64;
    shape.seqlen_q = 8200;
    shape.causal = cs.causal;
    ASSERT_TRUE(k6::wide_q_tile(shape)) << c.describe() << " no longer reaches k6's 192-row tiles";
    check::CheckResult r;
    const Status st = check::run_check(c, 29, kMaxRowsChecked, &r);
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
    EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
  }
}

// Long causal rows at every compiled head dim: k6 takes these problems' tiles dynamically in
// L2-sized head groups (k6_launch.h: dynamic_tile_order), a CTA's producer asking for each next
// tile and ending with a marker through the Q stage. With GQA 3:1, seqlen_q != seqlen_k both ways
// (with fewer keys, the first rows see none: whole Q tiles with no KV tile), a ragged last Q tile
// and several heads per L2 group.
TEST_P(PerKernel, LongCausalRowsEveryHeadDim) {
  HFA_SKIP_WITHOUT_GPU();
  for (int d : compiled_head_dims()) {
    const int seqlen_q = k6::dynamic_order_min_seqlen_q(d) + 77;
    for (int seqlen_k : {seqlen_q + 300, seqlen_q / 2}) {
      check::Config c = small(seqlen_q, seqlen_k, 6, 2);
      c.head_dim = d;
      c.batch = 2;
      c.causal = true;
      FwdProblem shape;
      shape.head_dim = d;
      shape.seqlen_q = seqlen_q;
      shape.causal = true;
      ASSERT_TRUE(k6::dynamic_tile_order(shape)) << c.describe() << " no longer reaches k6's dynamic order";
      check::CheckResult r;
      const Status st = check::run_check(c, 31 + d + seqlen_k % 7, kMaxRowsChecked, &r);
      if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
      ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
      EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
    }
  }
}

// The checker itself can fail: a kernel run with a wrong scale or a wrong mask must be caught.
TEST_P(PerKernel, CheckerCatchesWrongResults) {
  HFA_SKIP_WITHOUT_GPU();
  const check::Config c = small(100, 100, 2, 2);
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(c).ok());
  check::CheckResult r;
  ASSERT_TRUE(check::run_check(buf, 12, 0, &r, [](ForwardArgs& a) { a.softmax_scale = 0.1f; }).ok());
  EXPECT_FALSE(r.pass) << "a 20% scale error passed: " << r.message;
  ASSERT_TRUE(check::run_check(buf, 13, 0, &r, [](ForwardArgs& a) { a.causal = true; }).ok());
  EXPECT_FALSE(r.pass) << "a causal result passed as non-causal: " << r.message;
  ASSERT_TRUE(check::run_check(buf, 14, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
}

// seqlen_k == 0: every row sees no key, so O = 0 and LSE = -inf (and nothing is NaN).
TEST_P(PerKernel, EmptyKeysGiveZeroOutput) {
  HFA_SKIP_WITHOUT_GPU();
  const check::Config c = small(70, 0, 4, 2);
  check::CheckResult r;
  ASSERT_TRUE(check::run_check(c, 15, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
  EXPECT_EQ(r.masked_row_errors, 0);
}

// Results are identical from run to run (no races, no order-dependent reductions).
TEST_P(PerKernel, Deterministic) {
  HFA_SKIP_WITHOUT_GPU();
  check::Config c = small(300, 333, 4, 2);
  c.head_dim = compiled_head_dims().back();  // the largest tiles of the build
  c.batch = 2;
  c.causal = true;
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(c).ok());
  ASSERT_TRUE(buf.fill_random(16).ok());
  std::string chosen;
  const Status supported = select_kernel(buf.forward_args(), &chosen);
  if (supported.code == StatusCode::kUnsupported) GTEST_SKIP() << supported.message;
  std::vector<std::vector<unsigned char>> outs;
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(buf.poison_outputs().ok());
    ASSERT_TRUE(forward(buf.forward_args()).ok());
    outs.push_back(download_bytes({&buf.o, &buf.lse}));
  }
  EXPECT_TRUE(outs[0] == outs[1] && outs[1] == outs[2]);
}

// More Q tiles than twice the SMs of an H100 (9 x 48 = 432 tiles of 128 rows, 132 SMs): a
// persistent kernel (k6) runs several tiles per CTA, reusing its Q buffer and K/V ring across
// tiles of different lengths (causal, longest first), with GQA and seqlen_q != seqlen_k.
TEST_P(PerKernel, ManyTilesPerSm) {
  HFA_SKIP_WITHOUT_GPU();
  for (bool causal : {true, false}) {
    check::Config c = small(1100, 1300, 16, 4);
    c.batch = 3;
    c.causal = causal;
    check::CheckResult r;
    const Status st = check::run_check(c, causal ? 17 : 18, kMaxRowsChecked, &r);
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKernels, PerKernel, ::testing::ValuesIn(kernel_names()),
                         [](const auto& info) { return info.param; });

// One FP8 shape of the tests below, for `kernel` with its inputs (check::use_kernel_inputs), and
// the FwdProblem fields that k7_launch.h's tile choices read. scale 0: the default softmax scale.
struct Fp8Case {
  int head_dim, batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  bool causal;
  float scale;
  check::Config config(const std::string& kernel) const {
    check::Config c;
    c.kernel = kernel;
    check::use_kernel_inputs(&c, c.kernel);
    c.head_dim = head_dim;
    c.batch = batch;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    c.causal = causal;
    if (scale != 0.f) c.softmax_scale = scale;
    return c;
  }
  FwdProblem tile_shape(bool fp8_block_scales) const {
    FwdProblem shape;
    shape.head_dim = head_dim;
    shape.seqlen_q = seqlen_q;
    shape.seqlen_k = seqlen_k;
    shape.causal = causal;
    shape.fp8_block_scales = fp8_block_scales;
    return shape;
  }
};

// k7 and k8 take wide KV tiles on long rows (k7_launch.h, wide_kv_tile: 192 keys at d = 128),
// which the matrix's shapes (at most 1000 keys) never reach: a last tile past seqlen_k
// (2500 = 13 x 192 + 4; k8's 64-key descale segments past the last K scale block read its scale,
// masked), causal with seqlen_q != seqlen_k, GQA 8:1, a negative scale (k8: set_factors scales
// such segments itself).
class Fp8WideKvTiles : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8WideKvTiles, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  const Fp8Case cases[] = {
      {128, 2, 300, 2500, 8, 1, false, 0.f},      {128, 1, 300, 2500, 4, 2, false, -0.37f},
      {128, 1, 4200, 4300, 4, 2, true, 0.f},
  };
  const std::vector<int> dims = compiled_head_dims();
  int ran = 0;
  for (const Fp8Case& cs : cases) {
    if (std::find(dims.begin(), dims.end(), cs.head_dim) == dims.end()) continue;
    const check::Config c = cs.config(GetParam());
    if (!k7::wide_kv_tile(cs.tile_shape(c.fp8_block_scales))) continue;
    expect_forward_pass(c, 31 + ran, 256);
    ++ran;
  }
  // d = 128 reaches them for both kernels whenever they are built: a rule change that drops
  // every case must show. (They are not built while d = 128 accumulates P V in two levels, whose
  // second accumulator a 192-key tile has no registers for: k7_launch.h, two_level_pv.)
  const bool wide_built = k7::max_block_n(128) != k7::kBlockN;
  if (wide_built && std::find(dims.begin(), dims.end(), 128) != dims.end())
    EXPECT_GE(ran, 3) << "no case reached the wide tiles";
  if (ran == 0)
    GTEST_SKIP() << "no compiled head dim takes wide tiles for " << GetParam()
                 << (wide_built ? "" : " (not built: d = 128's two-level P V accumulation, k7_launch.h)");
}

// k7's and k8's 192-row Q tiles (three consumer warpgroups, d = 64: k7_launch.h,
// consumer_warpgroups): ragged last Q tiles, causal with seqlen_q != seqlen_k both ways, one query
// row, GQA 6:1, MQA, a negative scale; k8's Q descale blocks (128 rows) then straddle Q tiles.
class Fp8ThreeConsumerWarpgroups : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8ThreeConsumerWarpgroups, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = compiled_head_dims();
  if (std::find(dims.begin(), dims.end(), 64) == dims.end()) GTEST_SKIP() << "d = 64 not compiled";
  const Fp8Case cases[] = {
      {64, 2, 333, 2900, 6, 1, false, 0.f}, {64, 1, 1000, 8200, 2, 1, true, 0.f}, {64, 1, 2900, 2100, 4, 4, true, 0.f},
      {64, 1, 2100, 4500, 3, 3, true, 0.f}, {64, 3, 1, 2500, 8, 1, false, 0.f},    {64, 1, 700, 2048, 4, 2, false, -0.41f},
      {64, 2, 100, 3000, 2, 1, false, 0.f},  // k8: the third warpgroup's rows lie past the last Q scale block
  };
  int ran = 0;
  for (const Fp8Case& cs : cases) {
    const check::Config c = cs.config(GetParam());
    ASSERT_EQ(k7::consumer_warpgroups(cs.tile_shape(c.fp8_block_scales)), 3)
        << "case " << ran << " no longer takes 192-row tiles";
    expect_forward_pass(c, 61 + ran, 256);
    ++ran;
  }
}

// k7's and k8's dynamic tile order (k7_launch.h, dynamic_tile_order: long causal rows at d = 64
// and 256), in which the producer also ends the transposers' walk with a marker through the V
// ring: seqlen_q != seqlen_k both ways (fewer keys: whole Q tiles with no KV tile, so a CTA's V
// ring may see no tile before the marker), GQA 3:1, two heads' groups.
class Fp8DynamicTileOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8DynamicTileOrder, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  int ran = 0;
  for (int d : compiled_head_dims()) {
    const int from = k7::dynamic_order_min_seqlen_q(d);
    if (from == 0) continue;  // this head dim keeps the static rounds
    const int seqlen_q = from + 77;
    for (int seqlen_k : {seqlen_q + 300, seqlen_q / 3}) {
      const Fp8Case cs{d, 2, seqlen_q, seqlen_k, 6, 2, true, 0.f};
      const check::Config c = cs.config(GetParam());
      ASSERT_TRUE(k7::dynamic_tile_order(cs.tile_shape(c.fp8_block_scales)))
          << c.describe() << " no longer takes the dynamic order";
      expect_forward_pass(c, 91 + ran, 256);
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no compiled head dim takes the dynamic order";
}

std::vector<std::string> fp8_kernel_names() {
  std::vector<std::string> out;
  for (const std::string& k : kernel_names())
    if (is_fp8_kernel(k)) out.push_back(k);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Fp8Kernels, Fp8WideKvTiles, ::testing::ValuesIn(fp8_kernel_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fp8WideKvTiles);
INSTANTIATE_TEST_SUITE_P(Fp8Kernels, Fp8ThreeConsumerWarpgroups, ::testing::ValuesIn(fp8_kernel_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fp8ThreeConsumerWarpgroups);
INSTANTIATE_TEST_SUITE_P(Fp8Kernels, Fp8DynamicTileOrder, ::testing::ValuesIn(fp8_kernel_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fp8DynamicTileOrder);

}  // namespace
}  // namespace hfa::testing
