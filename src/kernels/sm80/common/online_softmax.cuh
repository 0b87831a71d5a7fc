// One KV tile's step of the online softmax (FlashAttention-2, Algorithm 1, lines 8-10) on a warp's
// mma.sync score fragments (layout: mma.cuh): rows g and g + 8 of each 16-row tile, each row's
// scores spread over the four lanes of a quad. Shared by the FA2 forward and flash decode.
#pragma once

#include <cmath>

#include "kernels/common/numeric.cuh"
#include "kernels/common/quad_reduce.cuh"
#include "kernels/sm80/common/mma.cuh"

namespace hfa::sm80 {

constexpr float kLog2e = 1.4426950408889634f;  // the softmax runs in base 2 (exp2 is one MUFU op)
constexpr float kLn2 = 0.6931471805599453f;     // LSE back to natural log

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Online softmax over one tile: new running max per row, P = exp2(S * factor - max * factor)
// in place of the scores, the row sums (per lane; the quad's sum is taken at the end) and the
// accumulated O rescaled to the new max. The maxima are kept unscaled (fragment_mask.cuh: factor);
// -inf means the row has seen no key yet. Lazy rescaling: the reference max moves only when the
// tile's max exceeds it by more than 2^kLazyRescaleLog2 (P <= 2^8 otherwise; O and the row sum
// share the reference, so the softmax is the same), so that once a row has settled its warp skips
// the O rescale (D / 2 multiplies per row tile).
template <int MT, int NT, int OT>
__device__ __forceinline__ void online_softmax_tile(float (&s)[MT][NT][4], float (&row_max)[MT][2],
                                                    float (&row_sum)[MT][2], float (&o)[MT][OT][4],
                                                    float factor) {
  constexpr float kLazyRescaleLog2 = 8.f;
  float correction[MT][2];
  bool max_moved = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[mt][r];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
      mx = quad_max(mx);
      if (row_max[mt][r] != -INFINITY && (mx - row_max[mt][r]) * factor <= kLazyRescaleLog2)
        mx = row_max[mt][r];
      // A row with no visible key so far keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
      const float base = mx == -INFINITY ? 0.f : mx * factor;
      correction[mt][r] = mx == row_max[mt][r] && mx != -INFINITY
                              ? 1.f
                              : exp2_approx(fmaf(row_max[mt][r], factor, -base));
      max_moved = max_moved || mx != row_max[mt][r];
      row_max[mt][r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          s[mt][nt][2 * r + c] = exp2_approx(fmaf(s[mt][nt][2 * r + c], factor, -base));
          sum += s[mt][nt][2 * r + c];
        }
      row_sum[mt][r] = row_sum[mt][r] * correction[mt][r] + sum;
    }
  if (__any_sync(0xffffffffu, max_moved))
    for_each_fragment_element<MT, OT>(
        [&](int mt, int nt, int i) { o[mt][nt][i] *= correction[mt][i / 2]; });
}

// The end of a row's softmax (FlashAttention-2, Algorithm 1, lines 12-13): what O is multiplied
// by, and the LSE in log2 units. l: the row's sum (all four lanes' together); base: its max in
// log2 units (row_max times the exponent's factor); sink_log2: an attention sink's logit in log2
// units, or -inf for none. A sink joins the denominator, not O: O = acc / (l + 2^(sink - base)),
// taken against max(base, sink) so that neither term overflows. A row that saw no key (l = 0)
// gets O = 0 and LSE = -inf, or the sink's logit. The sink's test is uniform within a CTA (a head).
struct RowEnd {
  float o_scale, lse_log2;
};
__device__ __forceinline__ RowEnd finish_row(float l, float base, float sink_log2) {
  if (sink_log2 == -INFINITY)
    return l > 0.f ? RowEnd{1.f / l, base + log2f(l)} : RowEnd{0.f, -INFINITY};
  const float top = l > 0.f ? fmaxf(base, sink_log2) : sink_log2;
  const float keys = l > 0.f ? exp2f(base - top) : 0.f;  // 2^(base - top): l's terms in top's units
  const float total = l * keys + exp2f(sink_log2 - top);
  return RowEnd{keys / total, top + log2f(total)};
}

}  // namespace hfa::sm80
