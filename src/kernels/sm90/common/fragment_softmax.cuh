// The online softmax of FA2 run directly on WGMMA accumulator fragments (K4 and later): a thread
// holds 2 rows of S; row max and row sum are reduced across the 4 threads of a quad by shuffles.
// Works in base 2 (exp2 is one SFU instruction). kFoldScale: the scale * log2(e) multiply is
// folded into the exponent's FFMA when positive (exponent_factor) and the maxima are kept
// unscaled; otherwise (or with a zero or negative scale) scale_and_mask<kFoldScale> scales the
// scores first.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

#include "kernels/common/numeric.cuh"
#include "kernels/common/quad_reduce.cuh"

namespace hfa::sm90 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// kLazyRescale (K6): a row's reference max moves only when a tile's max exceeds it by more than
// kLazyRescaleLog2 (in the exponent's log2 units); otherwise P is taken against the old max
// (P <= 2^kLazyRescaleLog2, harmless for bf16/fp16 P and fp32 sums) and O keeps its scale. O and
// the row sum always share the reference max, so the result is the same softmax; the O rescale
// (one multiply per O element and tile) is skipped by every warp none of whose rows moved.
// kPOffsetLog2 (K7): P = exp2(s - max + kPOffsetLog2), so P lies in [0, 2^kPOffsetLog2] instead
// of [0, 1]; for e4m3 P (max 448, normals from 2^-6) 8 keeps every P <= 256 and moves the P that
// would be subnormal or flushed to zero into the normal range. The row sum carries the same
// factor, so O / sum and the LSE (finalize subtracts it) are unchanged.
// kTileFactor (K8): the scores' scale may change from tile to tile and, in kSegments equal runs
// of keys, within a tile (set_factors before each update_scores: K8's K descale comes per 128
// keys, and a 192-key tile spans parts of two such blocks, so it takes three 64-key segments).
// The running max is kept scaled (row_max * factor would mix scales), each segment's raw max is
// scaled once per row, and P is still one FFMA + exp2 per score, with its segment's factor.
// Needs kFoldScale.
template <int kRows, bool kFoldScale, bool kLazyRescale = false, int kPOffsetLog2 = 0,
          bool kTileFactor = false, int kSegments = 1>
struct OnlineSoftmax {
  static_assert(!kTileFactor || (kFoldScale && !kLazyRescale), "a per-tile factor is folded, not lazy");
  static_assert(kTileFactor || kSegments == 1, "segments of a tile are per-tile factors");
  static_assert(!(kLazyRescale && kPOffsetLog2 > 0), "a lazy reference lets P exceed 2^offset");
  static constexpr float kLazyRescaleLog2 = 8.f;
  float row_max[kRows];  // running max of the scores as update_scores gets them (quad-uniform)
  float row_sum[kRows];  // running sum of exp2(s - max): this thread's columns only, until finalize
  float factor;          // the scores' scale inside exp2 (1 when scale_and_mask applied it)
  float segment_factor[kSegments];  // kTileFactor: each segment's factor (set_factors)

  __device__ explicit OnlineSoftmax(float scale_log2)
      : factor(kFoldScale ? exponent_factor(scale_log2) : 1.f) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // s: (rows, cols) scores, masked with -inf (scale_and_mask); becomes P (unnormalized).
  // o: (rows, cols) output accumulator, rescaled by exp2(old max - new max).
  template <class TS, class TO>
  __device__ __forceinline__ void update(TS& s, TO& o) {
    float alpha[kRows];
    update_scores(s, alpha);
    rescale(o, alpha);
  }

  // The factors of the next update_scores (kTileFactor): scale * log2(e) of each segment of the
  // tile's keys (columns, in s's (rows, cols) view, c / (cols / kSegments)). A non-positive one
  // cannot be folded (the max of s * f is not max(s) * f): that segment's scores are scaled here
  // and its factor is 1. So this runs before the mask (scale_and_mask with a positive scale, 1):
  // -inf times a negative scale would be +inf.
  template <class TS>
  __device__ __forceinline__ void set_factors(TS& s, const float (&scale_log2)[kSegments]) {
    static_assert(kTileFactor);
    constexpr int kSegCols = cute::size<1>(typename std::decay_t<TS>::layout_type{}) / kSegments;
    bool all_positive = true;
    CUTE_UNROLL
    for (int g = 0; g < kSegments; ++g) {
      segment_factor[g] = exponent_factor(scale_log2[g]);
      all_positive &= scale_log2[g] > 0.f;
    }
    if (all_positive) return;  // one branch per tile, not one per segment; uniform across the CTA
    CUTE_UNROLL
    for (int g = 0; g < kSegments; ++g) {
      if (!(scale_log2[g] > 0.f)) {  // only for scale <= 0
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r)
          CUTE_UNROLL
          for (int c = g * kSegCols; c < (g + 1) * kSegCols; ++c) s(r, c) *= scale_log2[g];
      }
    }
  }

  // The factor inside exp2 of column c of a row of `cols` columns.
  __device__ __forceinline__ float factor_of(int c, int cols) const {
    if constexpr (kTileFactor) return segment_factor[c / (cols / kSegments)];
    return factor;
  }

  // The first half of update, for kernels that rescale O later (K6: O is still being accumulated
  // by the previous tile's P V while this runs). alpha: each row's exp2(old max - new max).
  template <class TS>
  __device__ __forceinline__ void update_scores(TS& s, float (&alpha)[kRows]) {
    using namespace cute;
    static_assert(size<0>(typename std::decay_t<TS>::layout_type{}) == kRows);
    if constexpr (kTileFactor) {  // row_max is kept scaled
      constexpr int kSegCols = decltype(size<1>(s))::value / kSegments;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        float tile_max = -INFINITY;
        CUTE_UNROLL
        for (int g = 0; g < kSegments; ++g) {
          float segment_max = -INFINITY;
          CUTE_UNROLL
          for (int c = g * kSegCols; c < (g + 1) * kSegCols; ++c) segment_max = fmaxf(segment_max, s(r, c));
          tile_max = fmaxf(tile_max, segment_max * segment_factor[g]);  // factors > 0
        }
        const float mx = fmaxf(row_max[r], quad_max(tile_max));
        const float m_safe = mx == -INFINITY ? 0.f : mx;
        alpha[r] = exp2_approx(row_max[r] - m_safe);
        row_max[r] = mx;
        exponentiate_row(s, r, m_safe, alpha[r]);
      }
    } else {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        float mx = running_max(s, r);
        if constexpr (kLazyRescale) {  // keep the reference max unless it grew by enough
          if (row_max[r] != -INFINITY && (mx - row_max[r]) * factor <= kLazyRescaleLog2) mx = row_max[r];
        }
        // The scaled max; no key seen yet: 0, to avoid -inf - -inf.
        const float m_safe = mx == -INFINITY ? 0.f : mx * factor;
        alpha[r] = exp2_approx(fmaf(row_max[r], factor, -m_safe));
        if constexpr (kLazyRescale) {
          if (mx == row_max[r] && mx != -INFINITY) alpha[r] = 1.f;  // exactly: O keeps its scale
        }
        row_max[r] = mx;
        exponentiate_row(s, r, m_safe, alpha[r]);
      }
    }
  }

  // update + rescale + the conversion to P, with the exponentials taken against the reference
  // max of the earlier tiles *before* this tile's max is known (K6 at d = 128, and on d = 64's
  // 192-row tiles): the SFU starts as soon as S lands instead of after the row max's compare
  // chain and shuffles, which sit on the critical path of the softmax that the other warpgroups'
  // GEMMs must cover. Whether that was allowed is read off the row sums: a thread's partial row
  // sum bounds each of its P, so if every one is <= 2^kLazyRescaleLog2 (= 256) no P exceeded
  // that and the tile is done -- O keeps its scale, no rescale, no max reduced at all (at
  // d = 128, 64 FMNMX and 4 shuffles per thread leave the common path). Otherwise (a sum above
  // 256, an inf or NaN, or a row that has seen no key yet) the warp takes the slow path: the
  // exact row max, and the rows whose max exceeds the reference by more than kLazyRescaleLog2 get
  // it as their new reference, their P again from the raw scores, and O and the row sum their
  // rescale.
  // A sum above 256 whose row did not move that far keeps its P (each P <= 2^8 still holds).
  // s: the raw scores (kept); p: s's (rows, cols) view of the P operand (same register order).
  // Needs a reference from an earlier tile (update_scores on the first).
  template <class TS, class TP, class TO>
  __device__ __forceinline__ void update_speculative(const TS& s, TP& p, TO& o) {
    using namespace cute;
    static_assert(kPOffsetLog2 == 0, "the sum test bounds P by 2^8 against the plain reference");
    constexpr float kSumLimit = 256.f;  // 2^kLazyRescaleLog2
    static_assert(kLazyRescaleLog2 == 8.f, "kSumLimit must be 2^kLazyRescaleLog2");
    float sum[kRows];
    bool check = false;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      sum[r] = row_exponentials(s, p, r, row_max[r] == -INFINITY ? 0.f : row_max[r] * factor);
      // A row that has seen no key has the reference 0 above, which could underflow every P of
      // the row: always checked.
      check |= !(sum[r] <= kSumLimit) || row_max[r] == -INFINITY;
    }
    if (__any_sync(0xffffffffu, check)) {  // warp-uniform; rare after the first tiles
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const float mx = running_max(s, r);
        // -inf limit while the row has seen no key: any key then moves it.
        const float limit = row_max[r] == -INFINITY ? -INFINITY : row_max[r] * factor + kLazyRescaleLog2;
        if (mx * factor <= limit) continue;  // this row keeps its reference and its P
        const float m_new = mx * factor;
        const float alpha = exp2_approx(fmaf(row_max[r], factor, -m_new));  // 0 from -inf
        row_max[r] = mx;
        sum[r] = row_exponentials(s, p, r, m_new);
        row_sum[r] *= alpha;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(o); ++c) o(r, c) *= alpha;
      }
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) row_sum[r] += sum[r];
  }

  // Row r of s becomes P = exp2(s * factor - m_safe + kPOffsetLog2) (the factor of c's segment
  // with kTileFactor); the row sum is rescaled by alpha and takes P's sum (this thread's columns).
  template <class TS>
  __device__ __forceinline__ void exponentiate_row(TS& s, int r, float m_safe, float alpha) {
    const float m_p = m_safe - static_cast<float>(kPOffsetLog2);
    constexpr int kCols = decltype(cute::size<1>(s))::value;
    float sum = 0.f;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      s(r, c) = exp2_approx(fmaf(s(r, c), factor_of(c, kCols), -m_p));
      sum += s(r, c);
    }
    row_sum[r] = row_sum[r] * alpha + sum;
  }

  // Row r's max over the running max and this tile's scores (quad-reduced: the 4 threads of a row).
  template <class TS>
  __device__ __forceinline__ float running_max(const TS& s, int r) const {
    float mx = row_max[r];
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(s); ++c) mx = fmaxf(mx, s(r, c));
    return quad_max(mx);
  }

  // Row r of P (p, as update_speculative's) = exp2(s * factor - m_scaled); returns this thread's
  // part of the row's sum.
  template <class TS, class TP>
  __device__ __forceinline__ float row_exponentials(const TS& s, TP& p, int r, float m_scaled) const {
    using Element = typename std::decay_t<TP>::value_type;
    float sum = 0.f;
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(s); ++c) {
      const float e = exp2_approx(fmaf(s(r, c), factor, -m_scaled));
      sum += e;
      p(r, c) = static_cast<Element>(e);
    }
    return sum;
  }

  template <class TO>
  __device__ __forceinline__ void rescale(TO& o, const float (&alpha)[kRows]) {
    using namespace cute;
    if constexpr (kLazyRescale) {  // warp-uniform: skip when none of the warp's rows moved
      bool moved = false;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) moved |= alpha[r] != 1.f;
      if (!__any_sync(0xffffffffu, moved)) return;
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r)
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= alpha[r];
  }

  // Each row's factor for O (1 / row sum; 0 for rows that saw no key: the l = 0 guard) and its
  // natural-log LSE (-inf for those rows). O itself is not touched: the epilogue applies the
  // factor as it converts (store_output), one multiply per element either way.
  // sink_log2: an attention sink's logit in log2 units (FwdProblem::sinks times log2(e)), or -inf
  // for none: exp2(sink_log2) joins the denominator (not O), so O = acc / (l + 2^(sink - m)) and
  // LSE = log of the whole denominator, taken against max(m, sink) so neither term overflows
  // (a row that saw no key: O = 0, LSE = the sink). Warp-uniform branch, once per tile.
  __device__ __forceinline__ void finalize(float (&inv)[kRows], float (&lse)[kRows],
                                           float sink_log2 = -INFINITY) const {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float l = quad_sum(row_sum[r]);
      const float m = kTileFactor ? row_max[r] : row_max[r] * factor;
      if (sink_log2 == -INFINITY) {
        inv[r] = l > 0.f ? 1.f / l : 0.f;
        lse[r] = l > 0.f ? (m + log2f(l) - static_cast<float>(kPOffsetLog2)) * kLn2 : -INFINITY;
      } else {
        const float top = l > 0.f ? fmaxf(m, sink_log2) : sink_log2;
        const float keys = l > 0.f ? exp2f(m - top) : 0.f;  // the keys' terms' factor
        const float total = l * keys + exp2f(sink_log2 - top + static_cast<float>(kPOffsetLog2));
        inv[r] = keys / total;
        lse[r] = (top + log2f(total) - static_cast<float>(kPOffsetLog2)) * kLn2;
      }
    }
  }
};

}  // namespace hfa::sm90
