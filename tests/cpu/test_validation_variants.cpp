// The rules of the score variants (ForwardArgs / BackwardArgs: window_left, window_right, softcap,
// sinks, dsinks), one test each: a bad value fails naming the argument and the rule; the
// normalized problem is what the kernels are told (problem.h); a kernel without the variant
// refuses it by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "api/validate.h"
#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

alignas(16) float g_sinks[64], g_dsinks[64];

FwdProblem normalized(const ForwardArgs& a) {
  FwdProblem p;
  const Status st = normalize_forward(a, &p);
  EXPECT_TRUE(st.ok()) << st.message;
  return p;
}

TEST(VariantValidation, WindowIsNormalized) {
  ForwardArgs a = valid_args();
  FwdProblem p = normalized(a);
  EXPECT_FALSE(p.local);
  EXPECT_FALSE(p.causal);
  a.window_right = 0;  // (-1, 0) is the causal mask
  p = normalized(a);
  EXPECT_TRUE(p.causal);
  EXPECT_FALSE(p.local);
  a.window_left = 16;  // a window: causal folds into window_right = 0
  a.window_right = -1;
  a.causal = true;
  p = normalized(a);
  EXPECT_TRUE(p.local);
  EXPECT_FALSE(p.causal);
  EXPECT_EQ(p.window_left, 16);
  EXPECT_EQ(p.window_right, 0);
  a.causal = false;  // an unbounded side becomes the bound no query reaches past
  p = normalized(a);
  EXPECT_EQ(p.window_right, FwdProblem::kUnboundedWindow);
  a.window_left = -1;
  a.window_right = 3;
  p = normalized(a);
  EXPECT_TRUE(p.local);
  EXPECT_EQ(p.window_left, FwdProblem::kUnboundedWindow);
  EXPECT_EQ(p.window_right, 3);
}

TEST(VariantValidation, WindowRules) {
  ForwardArgs a = valid_args();
  a.window_left = -2;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_left", "-2", "-1 (unbounded) or >= 0"});
  a = valid_args();
  a.window_right = -7;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_right", "-7"});
  a = valid_args();
  a.causal = true;
  a.window_right = 4;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_right", "causal", "-1 or 0"});
  a = valid_args();  // a window on sequences too long for its int arithmetic
  a.q = make_tensor(g_q, DType::kBF16, {1, int64_t{1} << 29, kHq, kD});
  a.out = make_tensor(g_o, DType::kBF16, {1, int64_t{1} << 29, kHq, kD});
  a.k = make_tensor(g_k, DType::kBF16, {1, int64_t{1} << 29, kHkv, kD});
  a.v = make_tensor(g_v, DType::kBF16, {1, int64_t{1} << 29, kHkv, kD});
  a.lse = TensorView{};
  a.window_left = 8;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_left", "seqlen_q + seqlen_k", "2^30"});
}

TEST(VariantValidation, SoftcapRules) {
  for (float bad : {-1.f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    ForwardArgs a = valid_args();
    a.softcap = bad;
    expect_error(normalize(a), StatusCode::kInvalidArgument, {"softcap", "finite and >= 0"});
  }
  ForwardArgs a = valid_args();
  a.softcap = 30.f;
  EXPECT_EQ(normalized(a).softcap, 30.f);
}

TEST(VariantValidation, SinksRules) {
  ForwardArgs a = valid_args();
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq}, {2});
  FwdProblem p = normalized(a);
  EXPECT_EQ(p.sinks, g_sinks);
  EXPECT_EQ(p.sinks_stride, 2);
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq + 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks", "(heads_q)"});
  a.sinks = make_tensor(g_sinks, DType::kBF16, {kHq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks", "bf16", "fp32"});
  a.sinks = make_tensor(g_sinks, DType::kFP32, {1, kHq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks", "rank 1"});
  a.sinks = make_tensor(nullptr, DType::kFP32, {kHq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks", "null"});
}

// k6 and fa2 take every variant; a kernel that takes none refuses each by its argument's name and
// lists the kernels that do; "auto" picks k6 on Hopper and fa2 on an sm80 GPU.
TEST(VariantValidation, KernelsWithoutTheVariantRefuseIt) {
  struct Case { void (*set)(ForwardArgs&); const char* arg; };
  const Case cases[] = {
      {[](ForwardArgs& a) { a.window_left = 64; }, "window_left"},
      {[](ForwardArgs& a) { a.softcap = 20.f; }, "softcap"},
      {[](ForwardArgs& a) { a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq}); }, "sinks"}};
  for (const Case& c : cases) {
    ForwardArgs a = valid_args();
    c.set(a);
    for (const char* kernel : {"k2", "k5", "k6_no_pingpong"}) {
      a.kernel = kernel;
      expect_error(plan(a), StatusCode::kUnsupported, {c.arg, kernel, "does not support", "k6", "fa2"});
    }
    for (const char* kernel : {"k6", "fa2"}) {
      a.kernel = kernel;
      EXPECT_TRUE(plan(a).ok()) << kernel << ": " << plan(a).message;
    }
    FwdProblem p = normalized(a);
    const KernelEntry* chosen = nullptr;
    ASSERT_TRUE(select_kernel_for("auto", p, hopper(), &chosen).ok());
    EXPECT_EQ(chosen->name, "k6") << c.arg;
    DeviceInfo ampere = hopper();
    ampere.cc_major = 8;
    ASSERT_TRUE(select_kernel_for("auto", p, ampere, &chosen).ok());
    EXPECT_EQ(chosen->name, "fa2") << c.arg;
  }
  // The variants are listed.
  int listed = 0;
  for (const KernelInfo& k : list_kernels())
    if (k.name == "k6" || k.name == "fa2") {
      EXPECT_TRUE(k.window && k.softcap && k.sinks) << k.name;
      ++listed;
    }
  EXPECT_EQ(listed, 2);
}

BackwardArgs backward_args() {
  const ForwardArgs f = valid_args();
  BackwardArgs a;
  a.q = f.q; a.k = f.k; a.v = f.v; a.out = f.out; a.lse = f.lse;
  a.dout = make_tensor(g_do, DType::kBF16, {kB, kSq, kHq, kD});
  a.dq = make_tensor(g_dq, DType::kBF16, {kB, kSq, kHq, kD});
  a.dk = make_tensor(g_dk, DType::kBF16, {kB, kSk, kHkv, kD});
  a.dv = make_tensor(g_dv, DType::kBF16, {kB, kSk, kHkv, kD});
  return a;
}

TEST(VariantValidation, BackwardTakesTheForwardsVariantsAndDsinks) {
  BackwardArgs a = backward_args();
  a.window_left = 8;
  a.softcap = 10.f;
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq});
  a.dsinks = make_tensor(g_dsinks, DType::kFP32, {kHq}, {3});
  BwdProblem p;
  ASSERT_TRUE(normalize_backward(a, &p).ok()) << normalize_backward(a, &p).message;
  EXPECT_TRUE(p.fwd.local);
  EXPECT_EQ(p.fwd.softcap, 10.f);
  EXPECT_EQ(p.fwd.sinks, g_sinks);
  EXPECT_EQ(p.dsinks, g_dsinks);
  EXPECT_EQ(p.dsinks_stride, 3);
  const BackwardKernelEntry* kernel = nullptr;
  ASSERT_TRUE(select_backward_kernel_for("auto", p, hopper(), &kernel).ok());
  EXPECT_EQ(kernel->name, "bwd_sm90");
  // fa2 takes them too, and is what "auto" runs on an sm80 GPU.
  ASSERT_TRUE(select_backward_kernel_for("fa2", p, hopper(), &kernel).ok());
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ASSERT_TRUE(select_backward_kernel_for("auto", p, ampere, &kernel).ok());
  EXPECT_EQ(kernel->name, "fa2");
  for (const KernelInfo& info : list_backward_kernels())
    EXPECT_TRUE(info.window && info.softcap && info.sinks) << info.name;
  // Every rule of the forward applies to the backward's copy.
  a.softcap = -1.f;
  expect_error(normalize_backward(a, &p), StatusCode::kInvalidArgument, {"softcap"});
}

TEST(VariantValidation, DsinksRules) {
  BackwardArgs a = backward_args();
  BwdProblem p;
  a.dsinks = make_tensor(g_dsinks, DType::kFP32, {kHq});
  expect_error(normalize_backward(a, &p), StatusCode::kInvalidArgument, {"dsinks", "without sinks"});
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq});
  a.dsinks = make_tensor(g_dsinks, DType::kFP32, {kHq - 1});
  expect_error(normalize_backward(a, &p), StatusCode::kInvalidArgument, {"dsinks", "(heads_q)"});
  a.dsinks = make_tensor(g_dsinks, DType::kFP16, {kHq});
  expect_error(normalize_backward(a, &p), StatusCode::kInvalidArgument, {"dsinks", "fp32"});
  a.dsinks = TensorView{};  // optional: the sinks' gradient is not always wanted
  EXPECT_TRUE(normalize_backward(a, &p).ok());
  EXPECT_EQ(p.dsinks, nullptr);
}

}  // namespace
}  // namespace hfa
