// The score variants' policies (kernels/common/attention_mask.cuh: a Mask says which keys a query
// sees, a Score what becomes of a score) applied to mma.sync accumulator fragments (layout:
// mma.cuh). A score that its query does not see becomes -inf, which the softmax (forward) and
// exp2(S - LSE) (backward) turn into probability 0.
#pragma once

#include <cmath>

#include "common/problem.h"
#include "kernels/common/attention_mask.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/sm80/common/mma.cuh"

namespace hfa::sm80 {

// acc holds this warp's rows row0 + 16 mt (+ g, + g + 8) and keys col0 + 8 nt (+ 2q, + 2q + 1).
// Calls f(mt, nt, i, seen) for each of its elements, seen: whether the element's query sees its
// key by the Mask. A block that needs no mask (needs_mask false) pays for no compares.
template <int MT, int NT, class Mask, class F>
__device__ __forceinline__ void for_each_visible_element(const Mask& mask, bool needs_mask, int row0,
                                                         int col0, F&& f) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  if (!needs_mask) {
    for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) { f(mt, nt, i, true); });
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * mt + g + 8 * r;
      // The row's visible keys relative to the lane's first column.
      const VisibleKeys<Mask> keys(mask, true, row, col0 + 2 * q, /*block_n=*/0);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) f(mt, nt, 2 * r + c, keys.sees(8 * nt + c));
    }
}

// Transforms the block of scores by the Score policy, applies the scale into the base-2 softmax
// domain (scale_log2 = Score::log2_factor) where it cannot be folded into the exponent, and where
// the block needs the mask sets the scores its queries do not see to -inf (acc's rows start at
// row0 and its keys at col0). Returns the factor the caller multiplies the scores by inside the
// exponent's FFMA (exponent_factor, kernels/common/numeric.cuh).
template <class Mask, class Score, int MT, int NT>
__device__ __forceinline__ float transform_scale_and_mask(float (&acc)[MT][NT][4], float scale_log2,
                                                          const Mask& mask, const Score& score,
                                                          bool needs_mask, int row0, int col0) {
  if constexpr (Score::kTransforms)
    for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) { acc[mt][nt][i] = score.transform(acc[mt][nt][i]); });
  const float factor = exponent_factor(scale_log2);
  if (!(scale_log2 > 0.f))
    for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) { acc[mt][nt][i] *= scale_log2; });
  if (needs_mask)
    for_each_visible_element<MT, NT>(mask, true, row0, col0, [&](int mt, int nt, int i, bool seen) {
      if (!seen) acc[mt][nt][i] = -INFINITY;
    });
  return factor;
}

}  // namespace hfa::sm80
