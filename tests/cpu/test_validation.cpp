// Every validation rule, one test each: the call must fail with a message that names the argument
// and the rule. No GPU is needed: argument rules are checked before the device is touched, and
// kernel/architecture rules are checked against a hand-made DeviceInfo.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "api/validate.h"
#include "hfa_build_config.h"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"

#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

TEST(Validation, ValidArgumentsPass) {
  EXPECT_TRUE(normalize(valid_args()).ok());
  EXPECT_TRUE(plan(valid_args()).ok());
  ForwardArgs a = valid_args();
  a.kernel = "k2";
  EXPECT_TRUE(plan(a).ok()) << plan(a).message;
}

TEST(Validation, NullPointer) {
  for (TensorView ForwardArgs::*field : {&ForwardArgs::q, &ForwardArgs::k, &ForwardArgs::v, &ForwardArgs::out}) {
    ForwardArgs a = valid_args();
    (a.*field).data = nullptr;
    expect_error(normalize(a), StatusCode::kInvalidArgument, {"null"});
  }
  ForwardArgs a = valid_args();
  a.v.data = nullptr;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v:", "null"});
}

TEST(Validation, DtypeMismatch) {
  ForwardArgs a = valid_args();
  a.k.dtype = DType::kFP16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k:", "fp16", "does not match", "bf16"});
  a = valid_args(DType::kFP16);
  a.out.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out:", "bf16", "does not match"});
  a = valid_args();
  a.q.dtype = a.k.dtype = a.v.dtype = a.out.dtype = DType::kFP32;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q:", "fp32", "not supported"});
}

TEST(Validation, ShapeMismatch) {
  ForwardArgs a = valid_args();
  a.v = make_tensor(g_v, DType::kBF16, {kB, kSk + 1, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v:", "k's"});
  a = valid_args();
  a.out = make_tensor(g_o, DType::kBF16, {kB, kSq, kHq - 1, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out:", "q's"});
  a = valid_args();
  a.k = make_tensor(g_k, DType::kBF16, {kB + 1, kSk, kHkv, kD});
  a.v = a.k;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k:", "batch"});
  a = valid_args();
  a.k = make_tensor(g_k, DType::kBF16, {kB, kSk, kHkv, kD / 2});
  a.v = make_tensor(g_v, DType::kBF16, {kB, kSk, kHkv, kD / 2});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k:", "head_dim"});
  a = valid_args();
  a.q = make_tensor(g_q, DType::kBF16, {kB * kSq, kHq, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q:", "rank 4", "got rank 3"});
}

TEST(Validation, HeadsNotMultiple) {
  ForwardArgs a = valid_args();
  a.q = make_tensor(g_q, DType::kBF16, {kB, kSq, 6, kD});
  a.out = make_tensor(g_o, DType::kBF16, {kB, kSq, 6, kD});
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, 6, kSq});
  a.k = make_tensor(g_k, DType::kBF16, {kB, kSk, 4, kD});
  a.v = make_tensor(g_v, DType::kBF16, {kB, kSk, 4, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"heads_q (6)", "multiple of heads_kv (4)"});
}

TEST(Validation, HeadDimNotSupportedByKernel) {
  ForwardArgs a = valid_args();
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out}) *t = make_tensor(t->data, t->dtype, {t->shape[0], t->shape[1], t->shape[2], 96});
  a.kernel = "k2";
  expect_error(plan(a), StatusCode::kUnsupported, {"head_dim", "96", "k2"});
  a.kernel = "k1";  // k1 runs any head_dim
  EXPECT_TRUE(plan(a).ok()) << plan(a).message;
  a.kernel = "auto";  // auto never falls back to the naive kernel
  expect_error(plan(a), StatusCode::kUnsupported, {"auto", "head_dim"});
}

TEST(Validation, HeadDimStrideMustBeOne) {
  ForwardArgs a = valid_args();
  a.k.stride[3] = 2;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k:", "head_dim stride", "contiguous"});
}

TEST(Validation, NegativeStrideAndHugeSize) {
  ForwardArgs a = valid_args();
  a.q.stride[1] = -a.q.stride[1];
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q:", "stride", "non-negative"});
  a = valid_args();
  a.out.shape[1] = a.q.shape[1] = int64_t{1} << 31;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q:", "2^31"});
}

TEST(Validation, MisalignedPointerOrStrideForVectorKernels) {
  ForwardArgs a = valid_args();
  a.kernel = "k2";
  a.q.data = g_q + 2;  // 2-byte aligned only
  expect_error(plan(a), StatusCode::kUnsupported, {"q:", "16-byte aligned", "k2"});
  a = valid_args();
  a.kernel = "k2";
  a.k.stride[1] = kHkv * kD + 4;  // 8-byte row stride step
  a.v.stride[1] = a.k.stride[1];
  expect_error(plan(a), StatusCode::kUnsupported, {"k:", "seqlen stride", "16 bytes"});
  a.kernel = "k1";  // scalar loads: no alignment rule
  EXPECT_TRUE(plan(a).ok()) << plan(a).message;
}

TEST(Validation, EmptyProblemsSucceedWithoutLaunching) {
  // batch == 0 and seqlen_q == 0 are valid, need no device and touch nothing (null data is fine).
  for (int which = 0; which < 2; ++which) {
    ForwardArgs a;
    const int b = which == 0 ? 0 : kB, sq = which == 0 ? kSq : 0;
    a.q = make_tensor(nullptr, DType::kBF16, {b, sq, kHq, kD});
    a.k = make_tensor(g_k, DType::kBF16, {b, kSk, kHkv, kD});
    a.v = make_tensor(g_v, DType::kBF16, {b, kSk, kHkv, kD});
    a.out = make_tensor(nullptr, DType::kBF16, {b, sq, kHq, kD});
    Status st = forward(a);
    EXPECT_TRUE(st.ok()) << st.message;
    FwdProblem p;
    ASSERT_TRUE(normalize_forward(a, &p).ok());
    EXPECT_TRUE(is_empty(p));
  }
  ForwardArgs a = valid_args();  // seqlen_k == 0 alone is not empty: rows see no key
  a.k = make_tensor(g_k, DType::kBF16, {kB, 0, kHkv, kD});
  a.v = make_tensor(g_v, DType::kBF16, {kB, 0, kHkv, kD});
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  EXPECT_FALSE(is_empty(p));
}

TEST(Validation, UnknownKernelName) {
  ForwardArgs a = valid_args();
  a.kernel = "k99";
  expect_error(plan(a), StatusCode::kInvalidArgument, {"kernel:", "unknown", "k99", "k1", "k2"});
  expect_error(forward(a), StatusCode::kInvalidArgument, {"unknown", "k99"});  // before any device query
}

TEST(Validation, ArchitectureTooOld) {
  DeviceInfo turing = hopper();
  turing.cc_major = 7;
  turing.cc_minor = 5;
  for (const char* k : {"k1", "k2", "fa2"}) {
    ForwardArgs a = valid_args();
    a.kernel = k;
    expect_error(plan(a, turing), StatusCode::kUnsupported, {k, "compute capability 8.0", "7.5"});
  }
  expect_error(plan(valid_args(), turing), StatusCode::kUnsupported, {"auto", "compute capability"});
}

TEST(Validation, SharedMemoryLimit) {
  DeviceInfo small = hopper();
  small.max_smem_per_block_optin = 16 * 1024;
  ForwardArgs a = valid_args();
  a.kernel = "k2";
  expect_error(plan(a, small), StatusCode::kUnsupported, {"k2", "shared memory"});
}

TEST(Validation, LseShapeAndDtype) {
  ForwardArgs a = valid_args();
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, kSq, kHq});  // (batch, seqlen, heads): wrong order
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse:", "(batch, heads_q, seqlen_q)"});
  a = valid_args();
  a.lse.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse:", "fp32"});
  a = valid_args();
  a.lse.data = nullptr;  // lse is optional
  EXPECT_TRUE(normalize(a).ok());
}

TEST(Validation, SoftmaxScaleMustBeFinite) {
  ForwardArgs a = valid_args();
  a.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"softmax_scale", "not finite"});
  a.softmax_scale = 0.25f;
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  EXPECT_EQ(p.softmax_scale, 0.25f);
  a.softmax_scale.reset();
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(static_cast<float>(kD)));
}

TEST(Validation, AutoPicksTheFastestSupportingKernel) {
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(valid_args(), &p).ok());
  const KernelEntry* kernel = nullptr;
  ASSERT_TRUE(select_kernel_for("auto", p, hopper(), &kernel).ok());
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->name, "k6");  // today's fastest on Hopper; update when a faster kernel lands
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ampere.cc_minor = 0;
  ASSERT_TRUE(select_kernel_for("auto", p, ampere, &kernel).ok());
  EXPECT_EQ(kernel->name, "fa2");  // sm90a kernels cannot run there; fa2 is faster than k2
}

TEST(Validation, HopperKernelsNeedHopper) {
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ampere.cc_minor = 6;
  for (const char* k : {"k3_1", "k3_2", "k3_3", "k4_qk", "k4", "k5", "k6", "k6_no_pingpong", "k6_no_overlap"}) {
    // (k3_3 has no head_dim 256 shape, which a build of that head dim alone would test here:
    // ShapesThatDoNotFitSharedMemory checks that refusal.)
    if (std::string(k) == "k3_3" && kD == 256) continue;
    ForwardArgs a = valid_args();
    a.kernel = k;
    EXPECT_TRUE(plan(a).ok()) << k << ": " << plan(a).message;
    expect_error(plan(a, ampere), StatusCode::kUnsupported, {k, "Hopper", "8.6"});
  }
}

TEST(Validation, ShapesThatDoNotFitSharedMemory) {
  // 5 stages of 64 x 256 K and V tiles exceed 227 KB: k3_3 has no head_dim 256 configuration.
  ForwardArgs a = valid_args();
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out})
    *t = make_tensor(t->data, t->dtype, {t->shape[0], t->shape[1], t->shape[2], 256});
  a.kernel = "k3_3";
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  bool built = false;
  for (int d : {HFA_HEAD_DIMS_INIT}) built = built || d == 256;
  if (!built) GTEST_SKIP() << "head_dim 256 not in this build";
  expect_error(plan(a), StatusCode::kUnsupported, {"k3_3", "256", "227 KB"});
}

TEST(Validation, NoDeviceIsAClearError) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) GTEST_SKIP() << "a GPU is present";
  expect_error(forward(valid_args()), StatusCode::kNoDevice, {"no usable CUDA device"});
}

// The workspace pool's calls (hfa.h, "Workspace memory") say so too, and report nothing held.
TEST(WorkspaceMemory, NoDeviceIsAClearError) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) GTEST_SKIP() << "a GPU is present";
  cudaGetLastError();
  size_t bytes = 1;
  expect_error(workspace_memory_reserved(&bytes), StatusCode::kNoDevice,
               {"workspace_memory_reserved", "no usable CUDA device"});
  EXPECT_EQ(bytes, 0u);
  expect_error(release_workspace_memory(), StatusCode::kNoDevice, {"release_workspace_memory", "no usable CUDA device"});
}

TEST(Registry, ListsEveryKernelWithDescription) {
  const std::vector<KernelInfo> kernels = list_kernels();
  ASSERT_GE(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "k1");
  EXPECT_EQ(kernels[1].name, "k2");
  for (const KernelInfo& k : kernels) {
    EXPECT_FALSE(k.description.empty()) << k.name;
    EXPECT_FALSE(k.supports.empty()) << k.name;
  }
}


// ---- Backward ------------------------------------------------------------------------------------

BackwardArgs valid_backward_args(DType dtype = DType::kBF16) {
  const ForwardArgs f = valid_args(dtype);
  BackwardArgs a;
  a.q = f.q; a.k = f.k; a.v = f.v; a.out = f.out; a.lse = f.lse;
  a.dout = make_tensor(g_do, dtype, {kB, kSq, kHq, kD});
  a.dq = make_tensor(g_dq, dtype, {kB, kSq, kHq, kD});
  a.dk = make_tensor(g_dk, dtype, {kB, kSk, kHkv, kD});
  a.dv = make_tensor(g_dv, dtype, {kB, kSk, kHkv, kD});
  return a;
}

Status plan_backward(const BackwardArgs& a, const DeviceInfo& device = hopper()) {
  BwdProblem p;
  Status st = normalize_backward(a, &p);
  if (!st.ok()) return st;
  const BackwardKernelEntry* kernel = nullptr;
  return select_backward_kernel_for(a.kernel, p, device, &kernel);
}

// "auto" runs bwd_sm90 on Hopper at every head dim (with every variant), and fa2 where the GPU is
// not a Hopper or in the deterministic mode where fa2's measured faster (bwd_sm90.cu: at 512 keys
// but d = 64's launch order and d = 256, under the causal mask below 2k keys).
TEST(BackwardValidation, ValidArgumentsPassAndAutoPicksBwdSm90OnHopper) {
  BwdProblem p;
  ASSERT_TRUE(normalize_backward(valid_backward_args(), &p).ok());
  const BackwardKernelEntry* kernel = nullptr;
  ASSERT_TRUE(select_backward_kernel_for("auto", p, hopper(), &kernel).ok());
  EXPECT_EQ(kernel->name, "bwd_sm90");
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ASSERT_TRUE(select_backward_kernel_for("auto", p, ampere, &kernel).ok());
  EXPECT_EQ(kernel->name, "fa2");
  for (int d : {64, 128, 256}) {
    bool built = false;
    for (int c : {HFA_HEAD_DIMS_INIT}) built = built || c == d;
    if (!built) continue;  // (a build without d refuses it in both kernels: check_head_dim)
    BwdProblem dense = p;
    dense.fwd.head_dim = d;
    ASSERT_TRUE(select_backward_kernel_for("auto", dense, hopper(), &kernel).ok()) << d;
    EXPECT_EQ(kernel->name, "bwd_sm90") << "head_dim " << d;
    BwdProblem capped = dense;
    capped.fwd.softcap = 30.f;
    ASSERT_TRUE(select_backward_kernel_for("auto", capped, hopper(), &kernel).ok()) << d;
    EXPECT_EQ(kernel->name, "bwd_sm90") << "softcap, head_dim " << d;
    BwdProblem det = dense;
    det.deterministic = true;
    // (causal, seqlen_k) -> the measured faster deterministic kernel at d = 64 / 128 / 256, with
    // batch 32 x 32 heads (launch order at d = 64 and 512 keys).
    struct Case {
      bool causal;
      int seqlen_k;
      const char* by_dim[3];
    };
    det.fwd.batch = 32, det.fwd.heads_q = det.fwd.heads_kv = 32;
    for (const Case& c : {Case{false, 512, {"bwd_sm90", "bwd_sm90", "bwd_sm90"}}, Case{false, 1024, {"bwd_sm90", "bwd_sm90", "bwd_sm90"}},
                          Case{true, 512, {"fa2", "fa2", "fa2"}}, Case{true, 1024, {"fa2", "bwd_sm90", "fa2"}},
                          Case{true, 2048, {"bwd_sm90", "bwd_sm90", "bwd_sm90"}}, Case{true, 4096, {"bwd_sm90", "bwd_sm90", "bwd_sm90"}},
                          Case{true, 16384, {"bwd_sm90", "bwd_sm90", "bwd_sm90"}}}) {
      det.fwd.causal = c.causal;
      det.fwd.seqlen_k = det.fwd.seqlen_q = c.seqlen_k;
      ASSERT_TRUE(select_backward_kernel_for("auto", det, hopper(), &kernel).ok()) << d;
      EXPECT_EQ(kernel->name, c.by_dim[d == 64 ? 0 : d == 128 ? 1 : 2])
          << "deterministic, head_dim " << d << ", causal " << c.causal << ", seqlen_k " << c.seqlen_k;
    }
    EXPECT_TRUE(select_backward_kernel_for("bwd_sm90", det, hopper(), &kernel).ok()) << d;
  }
  EXPECT_EQ(p.dq, g_dq);
  EXPECT_EQ(p.dk_row_stride, kHkv * kD);
}

// bwd_sm90's deterministic mode sums dQ in launch order where one launch's Q, dO and dQ sums fit
// the L2 and its CTAs fill their waves (bwd_sm90_launch.h): over issue 21's sweep (batch = 16k /
// s, heads = 2048 / d) at d = 64 and 512 keys only; never where a launch's CTAs leave its last
// wave half empty, nor with the few KV heads of GQA; the rule has no SM count of the device.
TEST(BackwardValidation, DeterministicLaunchOrderWhereItMeasuredFaster) {
  FwdProblem p;
  for (int d : {64, 128, 256})
    for (int s = 512; s <= 16384; s *= 2) {
      p.head_dim = d, p.seqlen_q = p.seqlen_k = s, p.batch = 16384 / s, p.heads_q = p.heads_kv = 2048 / d;
      EXPECT_EQ(bwd_sm90::dq_in_launch_order(p), d == 64 && s == 512) << "d " << d << ", s " << s;
    }
  p.head_dim = 128, p.seqlen_q = p.seqlen_k = 256, p.batch = 16, p.heads_q = 32;
  p.heads_kv = 4;  // 64 CTAs a launch: half of the 132 slots
  EXPECT_FALSE(bwd_sm90::dq_in_launch_order(p));
  p.heads_kv = 8;  // 128
  EXPECT_TRUE(bwd_sm90::dq_in_launch_order(p));
  p.seqlen_q = 257;  // one launch's Q rows no longer fit
  EXPECT_FALSE(bwd_sm90::dq_in_launch_order(p));
  p.seqlen_q = 256, p.batch = 9;  // 72 of 132
  EXPECT_FALSE(bwd_sm90::dq_in_launch_order(p));
  p.batch = 25;  // 200 of 264: 0.76 of two waves
  EXPECT_TRUE(bwd_sm90::dq_in_launch_order(p));
  p.batch = 0;
  EXPECT_FALSE(bwd_sm90::dq_in_launch_order(p));
}

// BackwardArgs::deterministic reaches the kernel's problem (default off), and fa2 takes it.
TEST(BackwardValidation, DeterministicIsCarried) {
  BwdProblem p;
  BackwardArgs a = valid_backward_args();
  ASSERT_TRUE(normalize_backward(a, &p).ok());
  EXPECT_FALSE(p.deterministic);
  a.deterministic = true;
  ASSERT_TRUE(normalize_backward(a, &p).ok());
  EXPECT_TRUE(p.deterministic);
  EXPECT_TRUE(plan_backward(a).ok());
}

TEST(BackwardValidation, LseIsRequired) {
  BackwardArgs a = valid_backward_args();
  a.lse.data = nullptr;
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"lse:", "null", "backward needs"});
}

TEST(BackwardValidation, ForwardRulesApply) {
  BackwardArgs a = valid_backward_args();
  a.v = make_tensor(g_v, DType::kBF16, {kB, kSk + 1, kHkv, kD});
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"v:", "k's"});
  a = valid_backward_args();
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, kSq, kHq});
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"lse:", "(batch, heads_q, seqlen_q)"});
}

TEST(BackwardValidation, GradientShapes) {
  BackwardArgs a = valid_backward_args();
  a.dout = make_tensor(g_do, DType::kBF16, {kB, kSq + 1, kHq, kD});
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dout:", "out's"});
  a = valid_backward_args();
  a.dq = make_tensor(g_dq, DType::kBF16, {kB, kSq, kHkv, kD});
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dq:", "q's"});
  a = valid_backward_args();
  a.dk = make_tensor(g_dk, DType::kBF16, {kB, kSk, kHq, kD});  // per query head: not GQA's shape
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dk:", "k's"});
  a = valid_backward_args();
  a.dv = make_tensor(g_dv, DType::kBF16, {kB, kSk, kHkv});
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dv:", "rank 4"});
}

TEST(BackwardValidation, GradientDtypeAndStride) {
  BackwardArgs a = valid_backward_args();
  a.dq.dtype = DType::kFP16;
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dq:", "fp16", "q's dtype bf16", "fp32"});
  a = valid_backward_args();
  a.dout.dtype = DType::kFP32;
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dout:", "fp32"});
  a = valid_backward_args();
  a.dv.stride[3] = 2;
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dv:", "contiguous"});
  a = valid_backward_args();
  a.dk.data = nullptr;
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"dk:", "null"});
}

// dq, dk, dv all fp32: accepted for both kernels (stored unrounded), fp32 strides by fp32's
// 16-byte rule; mixed with q's dtype refused, naming the one that differs.
TEST(BackwardValidation, Fp32Gradients) {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    BackwardArgs a = valid_backward_args(dtype);
    for (TensorView* t : {&a.dq, &a.dk, &a.dv})
      *t = make_tensor(t->data, DType::kFP32, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]});
    BwdProblem p;
    ASSERT_TRUE(normalize_backward(a, &p).ok());
    EXPECT_TRUE(p.grads_fp32);
    EXPECT_EQ(p.grad_dtype(), DType::kFP32);
    EXPECT_EQ(p.dk_row_stride, kHkv * kD);  // in fp32 elements
    for (const char* kernel : {"auto", "fa2", "bwd_sm90"}) {
      a.kernel = kernel;
      EXPECT_TRUE(plan_backward(a).ok()) << kernel << ": " << plan_backward(a).message;
    }
    BackwardArgs mixed = a;
    mixed.dv.dtype = dtype;
    expect_error(plan_backward(mixed), StatusCode::kInvalidArgument,
                 {"dv:", to_string(dtype), "all be fp32", "dq is fp32"});
    mixed = valid_backward_args(dtype);
    mixed.dk.dtype = DType::kFP32;  // dq in q's dtype: dk must be too
    expect_error(plan_backward(mixed), StatusCode::kInvalidArgument, {"dk:", "fp32", "q's dtype"});
    mixed = a;
    mixed.dout.dtype = DType::kFP32;  // dout stays in q's dtype
    expect_error(plan_backward(mixed), StatusCode::kInvalidArgument, {"dout:", "fp32", "does not match"});
    mixed = a;
    mixed.dq.stride[1] = kHq * kD + 2;  // 8 bytes past a 16-byte multiple in fp32
    expect_error(plan_backward(mixed), StatusCode::kUnsupported, {"dq:", "seqlen stride", "16 bytes"});
  }
  BwdProblem p;
  ASSERT_TRUE(normalize_backward(valid_backward_args(), &p).ok());
  EXPECT_FALSE(p.grads_fp32);
}

TEST(BackwardValidation, KernelRules) {
  BackwardArgs a = valid_backward_args();
  a.kernel = "k6";  // a forward-only kernel
  expect_error(plan_backward(a), StatusCode::kInvalidArgument, {"unknown backward kernel", "k6", "fa2"});
  expect_error(backward(a), StatusCode::kInvalidArgument, {"unknown backward kernel"});  // no device needed
  a.kernel = "fa2";
  DeviceInfo turing = hopper();
  turing.cc_major = 7;
  turing.cc_minor = 5;
  expect_error(plan_backward(a, turing), StatusCode::kUnsupported, {"fa2", "compute capability 8.0"});
  a.kernel = "auto";
  expect_error(plan_backward(a, turing), StatusCode::kUnsupported, {"auto", "backward", "compute capability"});
  a = valid_backward_args();
  a.dout.data = g_do + 2;
  expect_error(plan_backward(a), StatusCode::kUnsupported, {"dout:", "16-byte"});
  a = valid_backward_args();
  a.dk.stride[1] = kHkv * kD + 2;  // 4 bytes past a 16-byte multiple
  expect_error(plan_backward(a), StatusCode::kUnsupported, {"dk:", "seqlen stride", "16 bytes"});
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv})
    *t = make_tensor(t->data, t->dtype, {t->shape[0], t->shape[1], t->shape[2], 96});
  expect_error(plan_backward(a), StatusCode::kUnsupported, {"head_dim", "96", "fa2"});
}

TEST(BackwardValidation, EmptyProblemsSucceedWithoutLaunching) {
  BackwardArgs a = valid_backward_args();
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv})
    *t = make_tensor(nullptr, t->dtype, {0, t->shape[1], t->shape[2], t->shape[3]});
  a.lse = make_tensor(nullptr, DType::kFP32, {0, kHq, kSq});
  EXPECT_TRUE(backward(a).ok()) << backward(a).message;  // batch 0: no device touched
}

TEST(Registry, ListsBackwardKernels) {
  const std::vector<KernelInfo> kernels = list_backward_kernels();
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "fa2");
  EXPECT_EQ(kernels[1].name, "bwd_sm90");
  for (const KernelInfo& k : kernels) EXPECT_FALSE(k.description.empty()) << k.name;
}

}  // namespace
}  // namespace hfa
