// Element conversions for the CUDA-core kernels (any architecture): scalar and 16-byte vectors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace hfa {

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }

// 2^x in one MUFU.EX2. exp2f compiles to ex2.approx.f32, whose subnormal handling adds three
// instructions around the MUFU op; the .ftz form flushes results below 2^-126 to 0, which a
// softmax probability (at most 1, summed with others) never notices. exp2_approx(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) in one MUFU.TANH (sm75+): relative error about 2^-11, below the bf16/fp16 rounding of
// the inputs it is applied to (softcap's scores); tanh_approx(+-inf) = +-1.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh'(x) = 1 - tanh^2(x) given t = tanh_approx(x), to t's relative precision (2^-11): as
// 4 e / (1 + e)^2 with e = exp(-2 |x|), where 1 + e = 2 / (1 + |tanh x|), so e (1 + |t|)^2; one
// ex2 and three multiply-adds. 1 - t * t instead errs by up to 2 t^2 2^-11 absolute, which is
// most of the value once |t| nears 1 (the softcap backward's dS = P (dP - D) tanh'(.) failed the
// tolerance rule by that; an exact reciprocal of 1 + e cost the softcap backward 15%).
// tanh_derivative(+-inf, +-1) = 0.
__device__ __forceinline__ float tanh_derivative(float x, float t) {
  const float e = exp2_approx(-2.f * 1.4426950408889634f * fabsf(x));
  const float u = 1.f + fabsf(t);
  return e * u * u;
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

// Eight values to dst (16-byte aligned) in G: a 16-byte store for bf16/fp16, two for fp32 (the
// backward's gradients in either, BwdProblem::grads_fp32).
template <typename G>
__device__ __forceinline__ void store8(G* dst, const float (&in)[8]) {
  if constexpr (std::is_same_v<G, float>) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(in[0], in[1], in[2], in[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(in[4], in[5], in[6], in[7]);
  } else {
    *reinterpret_cast<uint4*>(dst) = pack8<G>(in);
  }
}

// dst[0..1] += (a, b) in fp32 atomics: one 8-byte atomic on sm90 (half the L2 atomic operations),
// two 4-byte ones before. dst must be 8-byte aligned.
__device__ __forceinline__ void atomic_add_pair(float* dst, float a, float b) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// Two adjacent values to dst (aligned to their size) in G: one 4-byte store, or 8 for fp32.
template <typename G>
__device__ __forceinline__ void store2(G* dst, float a, float b) {
  if constexpr (std::is_same_v<G, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else {
    const G pair[2] = {from_float<G>(a), from_float<G>(b)};
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(pair);
  }
}

// Eight e4m3 values (element 0 in the lowest byte) as eight values of T in a 16-byte vector. Exact:
// every e4m3 value, subnormals included, is an fp16 and a bf16 value (NaN stays NaN). On sm89 and
// newer each pair is one cvt.rn.f16x2.e4m3x2; bf16 goes on through fp32 (exact at each step).
template <typename T>
__device__ __forceinline__ uint4 e4m3x8_to(uint2 in) {
  uint4 out;
  uint32_t* o = &out.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>(((i < 2 ? in.x : in.y) >> (16 * (i % 2))) & 0xFFFFu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    if constexpr (std::is_same_v<T, __half>) {
      o[i] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    } else {
      const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(h)));
      o[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
  return out;
}

}  // namespace hfa
