// The score variants' policies (kernels/common/attention_mask.cuh: AttentionMask, LocalMask,
// PlainScore, SoftcapScore) applied to a WGMMA kernel's CuTe fragments: scale_and_mask.
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/attention_mask.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/sm90/common/fragment_softmax.cuh"

namespace hfa::sm90 {

using hfa::AttentionMask;
using hfa::KvRange;
using hfa::LocalMask;
using hfa::PlainScore;
using hfa::SoftcapScore;

// Transforms a tile of scores (a thread's (rows, cols) view, c_rc its (row, col) coordinates within
// the tile) by the Score policy, scales it to log2 units (scale_log2 = Score::log2_factor) and, on
// tiles that need the mask, sets invisible scores to -inf. With kFoldScale
// (OnlineSoftmax<.., true>) the multiply happens inside the softmax's exponent instead, unless the
// factor is zero or negative (exponent_factor). q0 / k0: the tile's first query and key.
// The scale and the mask are separate passes, so that the mask is one compare per end of the
// interval (against an immediate: a column's offset from the thread's first column is a constant
// once unrolled) and one select per score. Folded into one pass with a runtime scale test, ptxas
// emitted two compares, an add and a predicated multiply per score: 13% more instructions than
// cuDNN at d = 64, causal, s = 512 (ncu; docs/WORKLOG.md, K6 eighth pass).
template <bool kFoldScale, class TS, class TC, class Mask, class Score = PlainScore>
__device__ __forceinline__ void scale_and_mask(TS& s_rc, const TC& c_rc, const Mask& mask,
                                               bool needs_mask, int q0, int k0, float scale_log2,
                                               const Score& score = Score{}) {
  using namespace cute;
  if constexpr (Score::kTransforms) {
    CUTE_UNROLL
    for (int i = 0; i < size(s_rc); ++i) s_rc(i) = score.transform(s_rc(i));
  }
  if (!kFoldScale || !(scale_log2 > 0.f)) {
    CUTE_UNROLL
    for (int i = 0; i < size(s_rc); ++i) s_rc(i) *= scale_log2;
  }
  if (needs_mask) {
    const int col0 = get<1>(c_rc(0, 0));
    // One interval per row, relative to the thread's first column.
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int query = q0 + get<0>(c_rc(r, 0));
      const int limit = mask.key_limit(query) - k0 - col0;
      if constexpr (Mask::kInterval) {
        const int begin = mask.key_begin(query) - k0 - col0;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s_rc); ++c) {
          const int col = get<1>(c_rc(r, c)) - col0;
          if (col < begin || col >= limit) s_rc(r, c) = -INFINITY;
        }
      } else {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s_rc); ++c)
          if (get<1>(c_rc(r, c)) - col0 >= limit) s_rc(r, c) = -INFINITY;
      }
    }
  }
}

}  // namespace hfa::sm90
