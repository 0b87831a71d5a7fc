// The CUTLASS element type of each CUDA element type: CuTe's TMA and GMMA atoms are written for
// cutlass::bfloat16_t / half_t, which share the bits of __nv_bfloat16 / __half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

namespace hfa::sm90 {

template <typename T> struct CutlassElement;
template <> struct CutlassElement<__nv_bfloat16> { using type = cutlass::bfloat16_t; };
template <> struct CutlassElement<__half> { using type = cutlass::half_t; };

}  // namespace hfa::sm90
