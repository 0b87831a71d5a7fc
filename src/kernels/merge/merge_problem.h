// The validated form of MergeArgs (api/merge.cpp fills it; flash decode fills one for its split
// results), plain data passed to the merge kernel by value. Strides are in elements.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "hfa/hfa.h"

namespace hfa {

// The most partial results one merge takes: the kernel keeps one weight per part in shared memory.
inline constexpr int kMaxMergeParts = 256;

struct MergeProblem {
  // O of each part: (num_parts, batch, seqlen, heads, head_dim) in part_dtype.
  const void* o_parts = nullptr;
  DType part_dtype = DType::kFP32;
  int64_t o_part_stride = 0, o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  // fp32 LSE of each part: (num_parts, batch, heads, seqlen).
  const float* lse_parts = nullptr;
  int64_t lse_part_stride = 0, lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;
  // The merged O: (batch, seqlen, heads, head_dim) in out_dtype.
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;
  // The merged LSE, fp32 (batch, heads, seqlen); null: not written.
  float* lse = nullptr;
  int64_t lse_out_batch_stride = 0, lse_out_head_stride = 0, lse_out_row_stride = 0;
  int num_parts = 0, batch = 0, seqlen = 0, heads = 0, head_dim = 0;

  HFA_HOST_DEVICE int64_t rows() const { return static_cast<int64_t>(batch) * seqlen * heads; }
};

}  // namespace hfa
