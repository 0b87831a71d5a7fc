// The rules of variable-length batches (ForwardArgs / BackwardArgs: cu_seqlens_q, cu_seqlens_k,
// max_seqlen_q, max_seqlen_k, seqused_k), one test each: a bad argument fails naming it and the
// rule; the normalized problem is what the kernels are told (problem.h); a kernel without
// variable-length batches refuses them by name.
#include <gtest/gtest.h>

#include "api/validate.h"
#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

constexpr int kSeqs = 3, kTotalQ = 70, kTotalK = 90;
alignas(16) int g_cu_q[8], g_cu_k[8], g_used[8];

// Three sequences packed into 70 query and 90 key rows; lse (heads_q, total_q).
ForwardArgs varlen_args(DType dtype = DType::kBF16) {
  ForwardArgs a;
  a.q = make_tensor(g_q, dtype, {kTotalQ, kHq, kD});
  a.k = make_tensor(g_k, dtype, {kTotalK, kHkv, kD});
  a.v = make_tensor(g_v, dtype, {kTotalK, kHkv, kD});
  a.out = make_tensor(g_o, dtype, {kTotalQ, kHq, kD});
  a.lse = make_tensor(g_lse, DType::kFP32, {kHq, kTotalQ});
  a.cu_seqlens_q = make_tensor(g_cu_q, DType::kI32, {kSeqs + 1});
  a.cu_seqlens_k = make_tensor(g_cu_k, DType::kI32, {kSeqs + 1});
  a.max_seqlen_q = 40;
  a.max_seqlen_k = 50;
  return a;
}

TEST(VarlenValidation, ProblemIsTheSequencesView) {
  ForwardArgs a = varlen_args();
  a.seqused_k = make_tensor(g_used, DType::kI32, {kSeqs});
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  EXPECT_TRUE(p.varlen());
  EXPECT_EQ(p.batch, kSeqs);
  EXPECT_EQ(p.seqlen_q, 40);  // the bounds: max_seqlen_q / k
  EXPECT_EQ(p.seqlen_k, 50);
  EXPECT_EQ(p.total_q, kTotalQ);
  EXPECT_EQ(p.total_k, kTotalK);
  EXPECT_EQ(p.q_rows(), kTotalQ);
  EXPECT_EQ(p.k_rows(), kTotalK);
  EXPECT_EQ(p.tma_batch(), 1);
  EXPECT_EQ(p.cu_seqlens_q, g_cu_q);
  EXPECT_EQ(p.cu_seqlens_k, g_cu_k);
  EXPECT_EQ(p.seqused_k, g_used);
  // Rows are the packed tensors' first dimension; no batch stride; lse is (heads_q, total_q).
  EXPECT_EQ(p.q_row_stride, kHq * kD);
  EXPECT_EQ(p.q_head_stride, kD);
  EXPECT_EQ(p.q_batch_stride, 0);
  EXPECT_EQ(p.k_row_stride, kHkv * kD);
  EXPECT_EQ(p.o_batch_stride, 0);
  EXPECT_EQ(p.lse_batch_stride, 0);
  EXPECT_EQ(p.lse_head_stride, kTotalQ);
  EXPECT_EQ(p.lse_row_stride, 1);
  // Dense arguments stay dense.
  ASSERT_TRUE(normalize_forward(valid_args(), &p).ok());
  EXPECT_FALSE(p.varlen());
  EXPECT_EQ(p.q_rows(), kSq);
  EXPECT_EQ(p.tma_batch(), kB);
}

TEST(VarlenValidation, BothCuSeqlensOrNeither) {
  ForwardArgs a = varlen_args();
  a.cu_seqlens_k = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_k", "both"});
  a = varlen_args();
  a.cu_seqlens_q = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_q", "both"});
  a = valid_args();  // seqused_k belongs to variable-length batches
  a.seqused_k = make_tensor(g_used, DType::kI32, {kB});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"seqused_k", "cu_seqlens"});
}

TEST(VarlenValidation, PackedTensorsHaveRankThree) {
  ForwardArgs a = varlen_args();
  a.q = make_tensor(g_q, DType::kBF16, {1, kTotalQ, kHq, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q", "rank 3", "(total_q, heads_q, head_dim)"});
  a = varlen_args();
  a.v = make_tensor(g_v, DType::kBF16, {1, kTotalK, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v", "rank 3", "(total_k"});
  a = varlen_args();  // the dense rules still hold on the packed tensors
  a.v = make_tensor(g_v, DType::kBF16, {kTotalK - 1, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v", "shape"});
  a = varlen_args();
  a.out = make_tensor(g_o, DType::kBF16, {kTotalQ, kHq, kD}, {kHq * kD, kD, 2});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "head_dim must be contiguous"});
}

TEST(VarlenValidation, CuSeqlensRules) {
  ForwardArgs a = varlen_args();
  a.cu_seqlens_q = make_tensor(g_cu_q, DType::kFP32, {kSeqs + 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_q", "int32"});
  a = varlen_args();
  a.cu_seqlens_k = make_tensor(g_cu_k, DType::kI32, {kSeqs});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_k", "(batch + 1)", "(4)"});
  a = varlen_args();
  a.cu_seqlens_q = make_tensor(g_cu_q, DType::kI32, {kSeqs + 1}, {2});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_q", "contiguous"});
  a = varlen_args();
  a.cu_seqlens_q = make_tensor(g_cu_q, DType::kI32, {0});
  a.cu_seqlens_k = make_tensor(g_cu_k, DType::kI32, {0});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_q", "batch + 1 >= 1"});
  a = varlen_args();
  a.cu_seqlens_q = make_tensor(g_cu_q, DType::kI32, {kSeqs + 1, 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cu_seqlens_q", "rank 1"});
  a = varlen_args();
  a.seqused_k = make_tensor(g_used, DType::kI32, {kSeqs + 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"seqused_k", "(batch)", "(3)"});
  a = varlen_args();
  a.max_seqlen_k = -1;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"max_seqlen_k", ">= 0"});
}

TEST(VarlenValidation, LseIsHeadsByTotal) {
  ForwardArgs a = varlen_args();
  a.lse = make_tensor(g_lse, DType::kFP32, {1, kHq, kTotalQ});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse", "(heads_q, total_q)"});
  a.lse = make_tensor(g_lse, DType::kFP32, {kTotalQ, kHq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse", "(heads_q, total_q) = (8, 70)"});
}

TEST(VarlenValidation, Fp8IsRefusedByName) {
  ForwardArgs a = varlen_args(DType::kE4M3);
  a.out.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kUnsupported, {"cu_seqlens_q", "e4m3"});
}

TEST(VarlenValidation, KernelsWithoutVarlenRefuseIt) {
  const ForwardArgs a = varlen_args();
  FwdProblem p;
  ASSERT_TRUE(normalize_forward(a, &p).ok());
  const KernelEntry* chosen = nullptr;
  for (const char* name : {"k5", "k6_no_pingpong"}) {
    if (!find_kernel(name)) continue;
    expect_error(select_kernel_for(name, p, hopper(), &chosen), StatusCode::kUnsupported,
                 {"cu_seqlens_q", name, "variable-length batches", "k6", "fa2"});
  }
  if (find_kernel("k6")) {  // "auto" finds the fastest one that does: k6 on Hopper, fa2 before
    ASSERT_TRUE(select_kernel_for("auto", p, hopper(), &chosen).ok());
    EXPECT_EQ(chosen->name, "k6");
  }
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ASSERT_TRUE(select_kernel_for("auto", p, ampere, &chosen).ok());
  EXPECT_EQ(chosen->name, "fa2");
  ASSERT_TRUE(select_kernel_for("fa2", p, hopper(), &chosen).ok());
  for (const KernelInfo& info : list_kernels())
    EXPECT_EQ(info.varlen, info.name == "k6" || info.name == "fa2") << info.name;
}

// Packed gradients, their rules, and the kernels: bwd_sm90 runs them on Hopper, fa2 elsewhere,
// but not with softcap (nor a window or sinks).
TEST(VarlenValidation, BackwardTakesThePackedGradients) {
  BackwardArgs b;
  const ForwardArgs f = varlen_args();
  b.q = f.q; b.k = f.k; b.v = f.v; b.out = f.out; b.lse = f.lse;
  b.cu_seqlens_q = f.cu_seqlens_q;
  b.cu_seqlens_k = f.cu_seqlens_k;
  b.max_seqlen_q = f.max_seqlen_q;
  b.max_seqlen_k = f.max_seqlen_k;
  b.dout = make_tensor(g_do, DType::kBF16, {kTotalQ, kHq, kD});
  b.dq = make_tensor(g_dq, DType::kBF16, {kTotalQ, kHq, kD});
  b.dk = make_tensor(g_dk, DType::kBF16, {kTotalK, kHkv, kD});
  b.dv = make_tensor(g_dv, DType::kBF16, {kTotalK, kHkv, kD});
  BwdProblem p;
  ASSERT_TRUE(normalize_backward(b, &p).ok());
  EXPECT_TRUE(p.fwd.varlen());
  EXPECT_EQ(p.dq_batch_stride, 0);
  EXPECT_EQ(p.dq_row_stride, kHq * kD);
  EXPECT_EQ(p.dk_row_stride, kHkv * kD);
  EXPECT_EQ(p.dv_head_stride, kD);
  const BackwardKernelEntry* kernel = nullptr;
  ASSERT_TRUE(select_backward_kernel_for("fa2", p, hopper(), &kernel).ok());
  ASSERT_TRUE(select_backward_kernel_for("auto", p, hopper(), &kernel).ok());
  EXPECT_EQ(kernel->name, "bwd_sm90");
  DeviceInfo ampere = hopper();
  ampere.cc_major = 8;
  ASSERT_TRUE(select_backward_kernel_for("auto", p, ampere, &kernel).ok());
  EXPECT_EQ(kernel->name, "fa2");
  BwdProblem capped = p;  // with the variants, too
  capped.fwd.softcap = 30.f;
  capped.fwd.local = true;
  capped.fwd.window_left = 100;
  capped.fwd.window_right = 0;
  ASSERT_TRUE(select_backward_kernel_for("fa2", capped, hopper(), &kernel).ok());
  ASSERT_TRUE(select_backward_kernel_for("auto", capped, ampere, &kernel).ok());
  EXPECT_EQ(kernel->name, "fa2");
  for (const KernelInfo& info : list_backward_kernels())
    EXPECT_EQ(info.varlen, info.name == "bwd_sm90" || info.name == "fa2") << info.name;
  BackwardArgs bad = b;
  bad.dk = make_tensor(g_dk, DType::kBF16, {1, kTotalK, kHkv, kD});
  expect_error(normalize_backward(bad, &p), StatusCode::kInvalidArgument, {"dk", "rank 3"});
  bad = b;
  bad.dq = make_tensor(g_dq, DType::kBF16, {kTotalQ + 1, kHq, kD});
  expect_error(normalize_backward(bad, &p), StatusCode::kInvalidArgument, {"dq", "shape"});
}

}  // namespace
}  // namespace hfa
