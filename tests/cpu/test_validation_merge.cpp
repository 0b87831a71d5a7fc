// merge_attention's host rules, one test each (no GPU: validation never dereferences the buffers).
#include <gtest/gtest.h>

#include "api/merge_validate.h"
#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

constexpr int kParts = 3, kBatch = 2, kSeq = 5, kHeads = 4, kDim = 128;
alignas(16) unsigned char g_parts[1 << 16], g_lse_parts[1 << 12], g_out[1 << 15], g_lse_out[1 << 10];

MergeArgs valid_merge_args(DType part_dtype = DType::kBF16, DType out_dtype = DType::kBF16) {
  MergeArgs a;
  a.o_parts = make_tensor(g_parts, part_dtype, {kParts, kBatch, kSeq, kHeads, kDim});
  a.lse_parts = make_tensor(g_lse_parts, DType::kFP32, {kParts, kBatch, kHeads, kSeq});
  a.out = make_tensor(g_out, out_dtype, {kBatch, kSeq, kHeads, kDim});
  a.lse = make_tensor(g_lse_out, DType::kFP32, {kBatch, kHeads, kSeq});
  return a;
}

Status normalize(const MergeArgs& a, MergeProblem* p = nullptr) {
  MergeProblem local;
  return normalize_merge(a, p ? p : &local);
}

TEST(MergeValidation, ValidArgumentsPass) {
  for (DType pd : {DType::kFP32, DType::kBF16, DType::kFP16})
    for (DType od : {DType::kFP32, DType::kBF16, DType::kFP16}) {
      MergeProblem p;
      const Status st = normalize(valid_merge_args(pd, od), &p);
      ASSERT_TRUE(st.ok()) << st.message;
      EXPECT_EQ(p.num_parts, kParts);
      EXPECT_EQ(p.rows(), int64_t{kBatch} * kSeq * kHeads);
      EXPECT_EQ(p.o_part_stride, int64_t{kBatch} * kSeq * kHeads * kDim);
      EXPECT_EQ(p.lse_row_stride, 1);
      EXPECT_EQ(p.lse_head_stride, kSeq);
    }
  MergeArgs a = valid_merge_args();
  a.lse = TensorView{};  // optional
  EXPECT_TRUE(normalize(a).ok());
}

TEST(MergeValidation, PartsNeedRankFiveAndAHeadDimTheKernelHas) {
  MergeArgs a = valid_merge_args();
  a.o_parts = make_tensor(g_parts, DType::kBF16, {kBatch, kSeq, kHeads, kDim});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"o_parts", "rank 5"});
  a = valid_merge_args();
  a.o_parts = make_tensor(g_parts, DType::kBF16, {kParts, kBatch, kSeq, kHeads, 96});
  a.out = make_tensor(g_out, DType::kBF16, {kBatch, kSeq, kHeads, 96});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"o_parts", "head_dim 96"});
  a = valid_merge_args(DType::kE4M3);
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"o_parts", "dtype"});
}

TEST(MergeValidation, PartCountBetweenOneAnd256) {
  for (int parts : {0, 257}) {
    MergeArgs a = valid_merge_args();
    a.o_parts = make_tensor(g_parts, DType::kFP16, {parts, 1, 1, 1, 64});
    a.lse_parts = make_tensor(g_lse_parts, DType::kFP32, {parts, 1, 1, 1});
    a.out = make_tensor(g_out, DType::kFP16, {1, 1, 1, 64});
    a.lse = TensorView{};
    expect_error(normalize(a), StatusCode::kInvalidArgument, {"o_parts", "1 to 256"});
  }
}

TEST(MergeValidation, LseOfThePartsMatchesTheirShapeAndIsFp32) {
  MergeArgs a = valid_merge_args();
  a.lse_parts = make_tensor(g_lse_parts, DType::kFP32, {kParts, kBatch, kSeq, kHeads});  // seqlen and heads swapped
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse_parts", "heads"});
  a = valid_merge_args();
  a.lse_parts = make_tensor(g_lse_parts, DType::kBF16, {kParts, kBatch, kHeads, kSeq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse_parts", "fp32"});
  a = valid_merge_args();
  a.lse_parts = make_tensor(g_lse_parts, DType::kFP32, {kParts - 1, kBatch, kHeads, kSeq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse_parts", "num_parts"});
}

TEST(MergeValidation, OutShapedLikeOnePartWithAContiguousHeadDim) {
  MergeArgs a = valid_merge_args();
  a.out = make_tensor(g_out, DType::kBF16, {kBatch, kSeq + 1, kHeads, kDim});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "seqlen"});
  a = valid_merge_args();
  a.out = make_tensor(g_out, DType::kBF16, {kBatch, kSeq, kHeads, kDim}, {kSeq * kHeads * kDim * 2, kHeads * kDim * 2, kDim * 2, 2});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "head_dim stride"});
  a = valid_merge_args(DType::kBF16, DType::kI32);
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "dtype"});
  a = valid_merge_args();
  a.lse = make_tensor(g_lse_out, DType::kFP32, {kBatch, kSeq, kHeads});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse", "heads"});
}

TEST(MergeValidation, RowsAlignedToFourElements) {
  MergeArgs a = valid_merge_args();
  a.o_parts.data = g_parts + 2;  // 1 bf16 element off
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"o_parts", "aligned"});
  a = valid_merge_args();
  a.out = make_tensor(g_out, DType::kBF16, {kBatch, kSeq, kHeads, kDim}, {kSeq * kHeads * 130, kHeads * 130, 130, 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "multiple of 4"});
}

TEST(MergeValidation, OutIsOnePartOrApartFromThem) {
  MergeArgs a = valid_merge_args();
  const int64_t part = int64_t{kBatch} * kSeq * kHeads * kDim;
  a.out = make_tensor(g_parts + 2 * part * 2, DType::kBF16, {kBatch, kSeq, kHeads, kDim});  // part 2
  EXPECT_TRUE(normalize(a).ok()) << normalize(a).message;
  a.out = make_tensor(g_parts + 8, DType::kBF16, {kBatch, kSeq, kHeads, kDim});  // straddles parts 0 and 1
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out", "overlaps o_parts"});
  a = valid_merge_args();
  a.lse = make_tensor(g_lse_parts + 4 * kBatch * kHeads * kSeq, DType::kFP32, {kBatch, kHeads, kSeq});  // lse part 1
  EXPECT_TRUE(normalize(a).ok()) << normalize(a).message;
  a.lse = make_tensor(g_out, DType::kFP32, {kBatch, kHeads, kSeq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse", "overlaps out"});
}

}  // namespace
}  // namespace hfa
