// Element conversions for the CUDA-core kernels (any architecture): scalar and 16-byte vectors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hfa {

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// 2^x in one MUFU.EX2. exp2f compiles to ex2.approx.f32, whose subnormal handling adds three
// instructions around the MUFU op; the .ftz form flushes results below 2^-126 to 0, which a
// softmax probability (at most 1, summed with others) never notices. exp2_approx(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The softmax's exponent is exp2(s * scale_log2 - max). With a positive scale the multiply folds
// into that FFMA, exp2(fma(s, factor, -max * factor)), with the row max taken over the raw scores
// (the max of the scaled scores is the scaled max). A zero or negative scale (allowed, if odd)
// breaks that (and 0 * -inf is NaN), so kernels scale those scores first and use factor 1.
__device__ __forceinline__ float exponent_factor(float scale_log2) {
  return scale_log2 > 0.f ? scale_log2 : 1.f;
}

// A 16-byte vector holds 8 elements of a 2-byte type.
inline constexpr int kElemsPer16B = 8;

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_float(e[i]);
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&in)[8]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = from_float<T>(in[i]);
  return raw;
}

}  // namespace hfa
