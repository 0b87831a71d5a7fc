// The attention mask applied to mma.sync accumulator fragments (layout: mma.cuh). A score is kept
// when its key exists (col < seqlen_k) and, for causal, when the key is not in the query's future
// (col <= row + causal_offset, bottom-right aligned); otherwise it becomes -inf, which the softmax
// (forward) and exp2(S - LSE) (backward) turn into probability 0.
#pragma once

#include <cmath>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/sm80/common/mma.cuh"

namespace hfa::sm80 {

// Whether a (BlockM x BlockN) block of scores at (q0, k0) has any masked element: blocks wholly
// inside the visible region skip the per-element test.
__device__ __forceinline__ bool block_needs_mask(int q0, int k0, int block_n, int seqlen_k,
                                                 bool causal, int causal_offset) {
  return k0 + block_n > seqlen_k || (causal && k0 + block_n - 1 > q0 + causal_offset);
}

// acc holds this warp's rows row0 + 16 mt (+ g, + g + 8) and keys col0 + 8 nt (+ 2q, + 2q + 1).
template <int MT, int NT>
__device__ __forceinline__ void apply_mask(float (&acc)[MT][NT][4], int row0, int col0,
                                           int seqlen_k, bool causal, int causal_offset) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) {
    const int row = row0 + 16 * mt + g + 8 * (i / 2);
    const int col = col0 + 8 * nt + 2 * q + i % 2;
    const bool visible = col < seqlen_k && (!causal || col <= row + causal_offset);
    if (!visible) acc[mt][nt][i] = -INFINITY;
  });
}

// The mask where the block of scores at (q0, k0) with block_n keys needs one (acc's rows start at
// row0 and its keys at col0), and the scale into the base-2 softmax domain (scale * log2 e) where
// it cannot be folded into the exponent. Returns the factor the caller multiplies the scores by
// inside the exponent's FFMA (exponent_factor, kernels/common/numeric.cuh).
template <int MT, int NT>
__device__ __forceinline__ float fold_scale_and_mask(float (&acc)[MT][NT][4], float scale_log2,
                                                     const FwdProblem& p, int q0, int k0,
                                                     int block_n, int row0, int col0) {
  const float factor = exponent_factor(scale_log2);
  if (!(scale_log2 > 0.f))
    for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) { acc[mt][nt][i] *= scale_log2; });
  if (block_needs_mask(q0, k0, block_n, p.seqlen_k, p.causal, p.causal_offset()))
    apply_mask(acc, row0, col0, p.seqlen_k, p.causal, p.causal_offset());
  return factor;
}

}  // namespace hfa::sm80
