// A model of how Hopper's FP8 tensor cores accumulate, and the bounds it puts on what that does to
// attention. The check's yardstick for e4m3 inputs (forward_row_fp8_baseline) accumulates Q K^T
// and P V in fp32; the FP8 WGMMA does not. What is known of it (DeepSeek-V3: "around 14 bits" kept
// in FP8 GEMMs on H800; SageAttention 2: a 1-8-13 "FP22" accumulator; our own measurements with
// torch._scaled_mm and k7, WORKLOG K7 session 47, whose errors on terms of one sign add up as a
// truncation's do, not as rounding's would):
// each k-step of an e4m3 WGMMA (k = 32) aligns its products and the accumulator to the largest
// magnitude among them and keeps 13 mantissa bits below that, dropping the rest. So every product
// of a step, and the accumulator itself, loses less than one quantum q = 2^(e - 13) (2^e <= the
// step's largest magnitude), towards zero.
//
// fp8_dot_emulated computes a dot product the way the model says, so that tests can hold the
// bounds against it.
#pragma once

namespace hfa::reference {

inline constexpr int kFp8KStep = 32;                // e4m3 WGMMA: k = 32 per instruction
inline constexpr int kFp8AccumulatorBits = 13;       // kept below the step's largest magnitude
inline constexpr double kFp8AccumulatorUlp = 1.0 / (1 << kFp8AccumulatorBits);

// Keys per fresh P V accumulator in hfa's FP8 kernels: each KV tile's P V goes into an accumulator
// of its own that is then added to O in fp32 (two-level accumulation, fp8_pv.cuh). A kernel with
// wider tiles (or one that accumulates onto O) needs a larger value here.
inline constexpr int kFp8PvTileKeys = 128;

// The dot product sum_c a[c] b[c] (n terms, accumulated from zero in order, kFp8KStep at a time):
// how far the model's result may be from the exact one. Each dropped remainder lies in [0, q) of
// its term's magnitude; taken as uniform there, the error has mean -sum sign(term) q / 2 and
// variance sum q^2 / 12, and the bound is |mean| + kFp8ErrorSigmas standard deviations. Terms of
// one sign lose together (the mean, up to half the worst case); terms of mixed signs mostly cancel
// (the deviation). A worst case (every term losing a whole quantum) would be 5-10x looser on
// N(0, 1) inputs, which would leave the check of O without teeth.
inline constexpr double kFp8ErrorSigmas = 6;
double fp8_dot_error_bound(const double* a, const double* b, int n);

// The model's result itself: each step's terms and accumulator truncated toward zero.
double fp8_dot_emulated(const double* a, const double* b, int n);

// P V of one output channel c, O_c = sum_j P_j v_jc with P the row's final probabilities:
// sum_p_abs_v = sum_j P_j |v_jc|. A bound on the error of O_c from the tensor cores' accumulation of
// P V in tiles of at most kFp8PvTileKeys keys (any alignment of the tiles), P in e4m3 included.
// Each k-step of 32 keys loses (32 + 1) x 2^-13 of its largest magnitude, which is at most the sum
// of P |v| over the 128 keys that end with the step; a key lies in at most 4 such windows.
constexpr double fp8_pv_error_bound(double sum_p_abs_v) {
  constexpr double kPRounding = 1 + 0x1p-4;  // P rounded to e4m3 is at most this much larger
  return (kFp8KStep + 1) * (kFp8PvTileKeys / kFp8KStep) * kPRounding * kFp8AccumulatorUlp * sum_p_abs_v;
}

}  // namespace hfa::reference
