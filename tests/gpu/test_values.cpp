// The kernels on inputs that are not N(0, 1) (check.h: Values): near one-hot rows (wide), all-positive
// inputs (uniform), LLM-like outlier channels (outliers), scores that rise along the keys so the
// running max moves on every tile (ramp) and V of one sign (positive V). Forward kernels, the
// variants through "auto", the backward kernels and flash decode, each against the fp64 reference
// by the usual rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check/check.h"
#include "check/check_decode.h"
#include "gpu_test_util.h"

namespace hfa::testing {
namespace {

using check::Values;

const Values kOtherValues[] = {Values::kWide, Values::kUniform, Values::kOutliers, Values::kRamp,
                               Values::kPositiveV};

std::string values_name(const ::testing::TestParamInfo<Values>& info) {
  std::string name = check::to_string(info.param);
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

// sq != sk both ways, GQA and MQA, rows past several tiles (the ramp's max moves on each), and
// long rows (positive V: a loss in P V's accumulation grows with the keys).
const ShapeCase kShapes[] = {{1, 300, 1000, 4, 2}, {2, 257, 129, 6, 1}, {1, 200, 4096, 2, 1}};

void expect_kernel_passes(const std::string& kernel, int d, Values values, uint64_t* seed) {
  for (const bool causal : {false, true})
    for (const ShapeCase& s : kShapes) {
      MatrixParam p{kernel, d, causal, is_fp8_kernel(kernel) ? DType::kE4M3 : DType::kBF16};
      check::Config c = matrix_config(p, s);
      c.values = values;
      check::CheckResult r;
      const Status st = check::run_check(c, ++*seed, 384, &r);
      if (st.code == StatusCode::kUnsupported) continue;  // e.g. k3_3 at d = 256 (declared)
      ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
      EXPECT_TRUE(r.pass) << c.describe() << " seed " << *seed << ": " << r.message;
    }
}

class ForwardValues : public ::testing::TestWithParam<Values> {};

// Every bf16/fp16 forward kernel (the FP8 ones: Fp8ForwardValues).
TEST_P(ForwardValues, EveryKernelMatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed(check::to_string(GetParam()));
  for (const std::string& kernel : kernel_names())
    if (!is_fp8_kernel(kernel))
      for (const int d : compiled_head_dims()) expect_kernel_passes(kernel, d, GetParam(), &seed);
}

// The FP8 kernels on every distribution at every head dim. Their scores and P V are held to the
// yardstick plus what the tensor cores' truncated accumulation can do (check.cpp; the model in
// reference/fp8_accumulation.h), which is larger for products of one sign (uniform), outlier
// channels and a dominant channel (ramp) than for N(0, 1): up to 2^-8 of sum |q k| per score on
// one-sign inputs at d = 256 (WORKLOG, K7 session 47; cuBLAS's FP8 GEMM the same).
struct Fp8ValuesParam {
  Values values;
  int head_dim;
};

class Fp8ForwardValues : public ::testing::TestWithParam<Fp8ValuesParam> {};

TEST_P(Fp8ForwardValues, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const auto [values, d] = GetParam();
  const std::vector<int> dims = compiled_head_dims();
  if (std::find(dims.begin(), dims.end(), d) == dims.end()) GTEST_SKIP() << "d = " << d << " not compiled";
  uint64_t seed = test_seed(std::string("fp8_") + check::to_string(values) + std::to_string(d));
  for (const std::string& kernel : kernel_names())
    if (is_fp8_kernel(kernel)) expect_kernel_passes(kernel, d, values, &seed);
}

std::vector<Fp8ValuesParam> fp8_values_params() {
  std::vector<Fp8ValuesParam> params;
  for (const Values values : kOtherValues)
    for (const int d : {64, 128, 256}) params.push_back({values, d});
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    Values, Fp8ForwardValues, ::testing::ValuesIn(fp8_values_params()),
    [](const ::testing::TestParamInfo<Fp8ValuesParam>& info) {
      std::string name = std::string(check::to_string(info.param.values)) + "_d" +
                         std::to_string(info.param.head_dim);
      for (char& ch : name) ch = ch == '-' ? '_' : ch;
      return name;
    });

// Window, softcap and sinks (together and apart) in fp16 and bf16, and a variable-length batch,
// through "auto" (k6 on Hopper; fa2 elsewhere).
TEST_P(ForwardValues, VariantsMatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed(std::string("variants_") + check::to_string(GetParam()));
  for (const int d : compiled_head_dims())
    for (const DType dtype : {DType::kBF16, DType::kFP16})
      for (int variant = 0; variant < 4; ++variant) {
        check::Config c = matrix_config({"auto", d, variant == 1, dtype}, {1, 700, 900, 4, 2});
        c.values = GetParam();
        if (variant == 0) c.window_left = 300, c.window_right = 40;
        if (variant == 1) c.softcap = 30.f;
        if (variant == 2) c.window_left = 200, c.window_right = 0, c.softcap = 20.f, c.sinks = true;
        if (variant == 3) c.varlen_q = {300, 1, 650}, c.varlen_k = {420, 90, 650}, c.causal = true;
        expect_forward_pass(c, ++seed, 384);
        if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(Values, ForwardValues, ::testing::ValuesIn(kOtherValues), values_name);

class BackwardValues : public ::testing::TestWithParam<Values> {};

TEST_P(BackwardValues, EveryKernelMatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed(std::string("bwd_") + check::to_string(GetParam()));
  for (const KernelInfo& k : list_backward_kernels())
    for (const int d : compiled_head_dims())
      for (const bool causal : {false, true})
        for (const bool deterministic : {false, true}) {
          check::Config c = matrix_config({k.name, d, causal, DType::kBF16}, {1, 300, 400, 4, 2});
          c.values = GetParam();
          c.backward = true;
          c.deterministic = deterministic;
          expect_backward_pass(c, ++seed);
          if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
        }
}

INSTANTIATE_TEST_SUITE_P(Values, BackwardValues, ::testing::ValuesIn(kOtherValues), values_name);

class DecodeValues : public ::testing::TestWithParam<Values> {};

// Contiguous and paged caches (the ramp only contiguous: a page's rows are not key positions),
// bf16 and e4m3 caches, appended keys, causal speculative tokens, forced splits.
TEST_P(DecodeValues, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed(std::string("decode_") + check::to_string(GetParam()));
  for (const int d : compiled_head_dims())
    for (const int page_size : {0, 32})
      for (const bool fp8_cache : {false, true})
        for (const int splits : {0, 5}) {
          if (GetParam() == Values::kRamp && page_size) continue;
          check::DecodeConfig c;
          c.head_dim = d;
          c.batch = 4, c.heads_q = 16, c.heads_kv = 2, c.capacity = 900;
          c.seqlen_q = 3, c.seqlen_new = 3, c.causal = true;
          c.page_size = page_size;
          c.fp8_cache = fp8_cache;
          c.num_splits = splits;
          c.values = GetParam();
          check::DecodeBuffers buf;
          ASSERT_TRUE(buf.allocate(c, ++seed).ok()) << c.describe();
          check::DecodeCheckResult r;
          const Status st = check::run_decode_check(buf, 512, &r);
          ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
          EXPECT_TRUE(r.pass) << c.describe() << " seed " << seed << ": " << r.message;
        }
}

// The ramp's scores need key positions: a paged cache is refused by name.
TEST(DecodeValuesErrors, RampRefusesPagedCache) {
  check::DecodeConfig c;
  c.page_size = 16;
  c.values = Values::kRamp;
  check::DecodeBuffers buf;
  const Status st = buf.allocate(c, 1);
  EXPECT_EQ(st.code, StatusCode::kInvalidArgument);
  EXPECT_NE(st.message.find("ramp"), std::string::npos) << st.message;
}

INSTANTIATE_TEST_SUITE_P(Values, DecodeValues, ::testing::ValuesIn(kOtherValues), values_name);

}  // namespace
}  // namespace hfa::testing
