// The FP8 rules, one test each: e4m3 inputs and their descales (k7), block descales (k8), and
// quantize_fp8's arguments. No GPU needed (see test_validation.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

// ---- FP8 (e4m3) inputs ----------------------------------------------------------------------------

alignas(16) float g_descale[3][16];

ForwardArgs valid_fp8_args(DType out = DType::kBF16) {
  ForwardArgs a = valid_args(DType::kE4M3);
  a.out.dtype = out;
  a.q_descale = make_tensor(g_descale[0], DType::kFP32, {kB, kHkv});
  a.k_descale = make_tensor(g_descale[1], DType::kFP32, {kB, kHkv});
  a.v_descale = make_tensor(g_descale[2], DType::kFP32, {kB, kHkv});
  return a;
}

TEST(Fp8Validation, ValidArgumentsPassAndAutoPicksK7) {
  for (DType out : {DType::kBF16, DType::kFP16}) {
    FwdProblem p;
    ASSERT_TRUE(normalize_forward(valid_fp8_args(out), &p).ok());
    EXPECT_EQ(p.dtype, DType::kE4M3);
    EXPECT_EQ(p.out_dtype, out);
    EXPECT_EQ(p.v_descale.data, g_descale[2]);
    EXPECT_EQ(p.v_descale.head_stride, 1);
    EXPECT_EQ(p.v_descale.batch_stride, kHkv);
    const KernelEntry* kernel = nullptr;
    ASSERT_TRUE(select_kernel_for("auto", p, hopper(), &kernel).ok());
    EXPECT_EQ(kernel->name, "k7");
  }
  EXPECT_EQ(size_of(DType::kE4M3), 1);
  EXPECT_STREQ(to_string(DType::kE4M3), "e4m3");
}

TEST(Fp8Validation, E4m3InputsNeedEveryDescale) {
  for (TensorView ForwardArgs::*field :
       {&ForwardArgs::q_descale, &ForwardArgs::k_descale, &ForwardArgs::v_descale}) {
    ForwardArgs a = valid_fp8_args();
    (a.*field) = TensorView{};
    const char* name = field == &ForwardArgs::q_descale ? "q_descale:"
                       : field == &ForwardArgs::k_descale ? "k_descale:" : "v_descale:";
    expect_error(normalize(a), StatusCode::kInvalidArgument, {name, "e4m3", "null"});
  }
}

TEST(Fp8Validation, DescaleShapeAndDtype) {
  ForwardArgs a = valid_fp8_args();
  a.k_descale = make_tensor(g_descale[1], DType::kFP32, {kB, kHq});  // heads_q, not heads_kv
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_descale:", "(batch, heads_kv)", "(2, 2)"});
  a = valid_fp8_args();
  a.q_descale = make_tensor(g_descale[0], DType::kFP32, {kB * kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q_descale:", "rank 2"});
  a = valid_fp8_args();
  a.v_descale.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_descale:", "bf16", "fp32"});
}

TEST(Fp8Validation, DescalesOnlyWithE4m3Inputs) {
  ForwardArgs a = valid_args();
  a.q_descale = make_tensor(g_descale[0], DType::kFP32, {kB, kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q_descale:", "only e4m3", "bf16"});
}

TEST(Fp8Validation, OutputMustBeBf16OrFp16) {
  for (DType out : {DType::kE4M3, DType::kFP32}) {
    ForwardArgs a = valid_fp8_args(out);
    expect_error(normalize(a), StatusCode::kInvalidArgument, {"out:", to_string(out), "bf16 or fp16"});
  }
  ForwardArgs a = valid_fp8_args();
  a.k.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k:", "bf16", "does not match", "e4m3"});
}

// A kernel takes bf16/fp16 or e4m3 inputs, and refuses the other by name.
TEST(Fp8Validation, KernelsRefuseTheOtherInputTypeByName) {
  for (const KernelInfo& k : list_kernels()) {
    ForwardArgs a = k.fp8 ? valid_args() : valid_fp8_args();
    a.kernel = k.name;
    expect_error(plan(a), StatusCode::kUnsupported,
                 {"q:", ("\"" + k.name + "\"").c_str(), k.fp8 ? "e4m3 inputs only" : "not e4m3"});
  }
  ForwardArgs a = valid_fp8_args();
  a.kernel = "k7";
  EXPECT_TRUE(plan(a).ok()) << plan(a).message;
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  expect_error(plan(a, ampere), StatusCode::kUnsupported, {"k7", "Hopper"});
}

TEST(Fp8Validation, BackwardRefusesE4m3) {
  BackwardArgs b;
  const ForwardArgs f = valid_fp8_args();
  b.q = f.q; b.k = f.k; b.v = f.v; b.out = f.out; b.lse = f.lse;
  b.dout = b.dq = f.out;
  b.dk = b.dv = f.k;
  BwdProblem p;
  expect_error(normalize_backward(b, &p), StatusCode::kUnsupported, {"q:", "e4m3", "backward"});
}

// ---- FP8 block descales (k8) ----------------------------------------------------------------------

alignas(16) float g_block_descale[2][64];

ForwardArgs valid_fp8_block_args() {
  ForwardArgs a = valid_fp8_args();
  a.q_descale = a.k_descale = TensorView{};
  a.q_block_descale = make_tensor(g_block_descale[0], DType::kFP32, {kB, kHq, (kSq + 127) / 128});
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv, (kSk + 127) / 128});
  return a;
}

TEST(Fp8Validation, BlockDescalesPassAndAutoPicksK8) {
  ForwardArgs a = valid_fp8_block_args();
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv, 1}, {3, 1, 7});
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok()) << normalize_forward(a, &p).message;
  EXPECT_TRUE(p.fp8_block_scales);
  EXPECT_EQ(p.q_block_descale.data, g_block_descale[0]);
  EXPECT_EQ(p.q_block_descale.head_stride, 1);
  EXPECT_EQ(p.q_block_descale.batch_stride, kHq);
  EXPECT_EQ(p.k_block_descale.block_stride, 7);
  EXPECT_EQ(p.k_block_descale.batch_stride, 3);
  EXPECT_EQ(p.q_descale.data, nullptr);
  EXPECT_EQ(p.v_descale.data, g_descale[2]);
  const KernelEntry* kernel = nullptr;
  ASSERT_TRUE(select_kernel_for("auto", p, hopper(), &kernel).ok());
  EXPECT_EQ(kernel->name, "k8");
  // 129 keys: two key blocks.
  a = valid_fp8_block_args();
  a.k.shape[1] = a.v.shape[1] = 129;
  a.k_block_descale.shape[2] = 2;
  EXPECT_TRUE(normalize(a).ok()) << normalize(a).message;
}

TEST(Fp8Validation, BlockDescaleShapes) {
  ForwardArgs a = valid_fp8_block_args();
  a.q_block_descale.shape[2] = 2;  // seqlen_q = 33 is one block
  expect_error(normalize(a), StatusCode::kInvalidArgument,
               {"q_block_descale:", "(batch, heads_q, ceil(seqlen_q / 128))", "(2, 8, 1)"});
  a = valid_fp8_block_args();
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHq, 1});  // heads_q
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_block_descale:", "heads_kv", "(2, 2, 1)"});
  a = valid_fp8_block_args();
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_block_descale:", "rank 3"});
  a = valid_fp8_block_args();
  a.q_block_descale.dtype = DType::kFP16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q_block_descale:", "fp16", "fp32"});
  // The kernel's 32-bit offsets: 2^31 elements between blocks is refused, 2^30 taken.
  a = valid_fp8_block_args();
  a.k.shape[1] = a.v.shape[1] = 129;  // two blocks
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv, 2}, {2, 1, int64_t{1} << 30});
  EXPECT_TRUE(normalize(a).ok()) << normalize(a).message;
  a.k_block_descale.stride[2] = int64_t{1} << 31;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_block_descale:", "block stride 2147483648", "2^31"});
}

TEST(Fp8Validation, BlockDescalesComeAsAPairWithoutPerHeadOnes) {
  ForwardArgs a = valid_fp8_block_args();
  a.k_block_descale = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_block_descale:", "null"});
  a = valid_fp8_block_args();
  a.q_descale = make_tensor(g_descale[0], DType::kFP32, {kB, kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q_descale:", "not both"});
  a = valid_fp8_block_args();
  a.k_descale = make_tensor(g_descale[1], DType::kFP32, {kB, kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_descale:", "not both"});
  a = valid_fp8_block_args();
  a.v_descale = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_descale:", "null"});
  a = valid_args();
  a.k_block_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv, 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_block_descale:", "only e4m3", "bf16"});
}

// k7 takes per-head descales and k8 block ones; each refuses the other by name.
TEST(Fp8Validation, KernelsRefuseTheOtherScalesByName) {
  ForwardArgs a = valid_fp8_block_args();
  a.kernel = "k7";
  expect_error(plan(a), StatusCode::kUnsupported, {"q_block_descale:", "\"k7\"", "k8"});
  a.kernel = "k8";
  EXPECT_TRUE(plan(a).ok()) << plan(a).message;
  a = valid_fp8_args();
  a.kernel = "k8";
  expect_error(plan(a), StatusCode::kUnsupported, {"q_descale:", "\"k8\"", "k7"});
  for (const KernelInfo& k : list_kernels()) EXPECT_EQ(k.fp8_block_scales, k.name == "k8") << k.name;
}

// ---- quantize_fp8 ----------------------------------------------------------------------------------

alignas(16) unsigned char g_q8[16], g_k8[16], g_v8[16];

QuantizeFp8Args valid_quantize_args(bool block, int64_t head_dim = 128) {
  QuantizeFp8Args a;
  a.q = make_tensor(g_q, DType::kBF16, {kB, kSq, kHq, head_dim});
  a.k = make_tensor(g_k, DType::kBF16, {kB, kSk, kHkv, head_dim});
  a.v = make_tensor(g_v, DType::kBF16, {kB, kSk, kHkv, head_dim});
  a.q_out = make_tensor(g_q8, DType::kE4M3, {kB, kSq, kHq, head_dim});
  a.k_out = make_tensor(g_k8, DType::kE4M3, {kB, kSk, kHkv, head_dim});
  a.v_out = make_tensor(g_v8, DType::kE4M3, {kB, kSk, kHkv, head_dim});
  a.block = block;
  if (block) {
    a.q_descale = make_tensor(g_block_descale[0], DType::kFP32, {kB, kHq, 1});
    a.k_descale = make_tensor(g_block_descale[1], DType::kFP32, {kB, kHkv, 1});
  } else {
    a.q_descale = make_tensor(g_descale[0], DType::kFP32, {kB, kHkv});
    a.k_descale = make_tensor(g_descale[1], DType::kFP32, {kB, kHkv});
  }
  a.v_descale = make_tensor(g_descale[2], DType::kFP32, {kB, kHkv});
  return a;
}

TEST(QuantizeValidation, ValidArgumentsPass) {
  for (bool block : {false, true}) {
    QuantizeFp8Args a = valid_quantize_args(block);
    a.hadamard = true;
    a.subtract_mean_key = true;
    a.hadamard_seed = 42;
    QuantizeProblem p;
    ASSERT_TRUE(normalize_quantize(a, &p).ok()) << normalize_quantize(a, &p).message;
    EXPECT_EQ(p.q.block, block);
    EXPECT_EQ(p.k.block, block);
    EXPECT_FALSE(p.v.block);  // V's descale is always per (batch, KV head)
    EXPECT_TRUE(p.q.hadamard && p.k.hadamard && !p.v.hadamard);
    EXPECT_TRUE(p.k.minus_mean && !p.q.minus_mean && !p.v.minus_mean);
    EXPECT_EQ(p.hadamard_seed, 42u);
    EXPECT_EQ(p.q.descale_block_stride, block ? 1 : 0);
    EXPECT_EQ(p.q.descale_head_stride, 1);
    EXPECT_EQ(p.q.seqlen, kSq);
    EXPECT_EQ(p.k.heads, kHkv);
  }
}

TEST(QuantizeValidation, InputsAndOutputs) {
  QuantizeProblem p;
  QuantizeFp8Args a = valid_quantize_args(false);
  a.q.dtype = a.k.dtype = a.v.dtype = DType::kE4M3;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q:", "e4m3", "bf16 or fp16"});
  a = valid_quantize_args(false);
  a.v.dtype = DType::kFP16;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"v:", "fp16", "does not match"});
  a = valid_quantize_args(false, 96);
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q:", "head_dim", "96", "64, 128 or 256"});
  a = valid_quantize_args(false);
  a.k_out.dtype = DType::kBF16;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"k_out:", "bf16", "e4m3"});
  a = valid_quantize_args(false);
  a.v_out.shape[1] = kSk + 1;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"v_out:", "v's"});
  a = valid_quantize_args(false);
  a.q_out.stride[3] = 2;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q_out:", "contiguous"});
  a = valid_quantize_args(false);
  a.q_out.data = nullptr;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q_out:", "null"});
}

TEST(QuantizeValidation, DescaleShapesFollowBlock) {
  QuantizeProblem p;
  QuantizeFp8Args a = valid_quantize_args(true);
  a.block = false;  // block-shaped descales for per-head scales
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q_descale:", "rank 2"});
  a = valid_quantize_args(false);
  a.block = true;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"q_descale:", "rank 3"});
  a = valid_quantize_args(true);
  a.k_descale.shape[2] = 2;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument,
               {"k_descale:", "ceil(seqlen_k / 128)", "(2, 2, 1)"});
  a = valid_quantize_args(true);
  a.v_descale = make_tensor(g_descale[2], DType::kFP32, {kB, kHkv, 1});
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"v_descale:", "rank 2"});
  a = valid_quantize_args(false);
  a.v_descale.dtype = DType::kBF16;
  expect_error(normalize_quantize(a, &p), StatusCode::kInvalidArgument, {"v_descale:", "fp32"});
}

}  // namespace
}  // namespace hfa
