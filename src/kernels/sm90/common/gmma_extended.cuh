// GMMA atoms for S = Q K^T tiles whose key count is not a multiple of 64 (k6: 80 keys at
// d = 256; 176 at d = 128 was measured and not kept). WGMMA takes any N that is a multiple of 8,
// but CuTe's atom selector only knows the extended N values when
// CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED is defined, and those headers double a translation unit's
// compile time (measured: 36 s -> 74 s for k6_hdim128). So they are included here, only by the
// kernel that uses such a tile (k6), and the atoms are named explicitly instead of changing what
// the selector returns elsewhere.
#pragma once

#include <cute/arch/mma_sm90_gmma_ext.hpp>
#include <cute/atom/mma_traits_sm90_gmma_ext.hpp>

#include "kernels/sm90/common/attention_config.cuh"

namespace hfa::sm90 {

#define HFA_EXTENDED_QK_ATOM(N, E, NAME)                                              \
  template <int D>                                                                    \
  struct QkAtom<E, N, D> {                                                            \
    using type = cute::SM90::GMMA::NAME<cute::GMMA::Major::K, cute::GMMA::Major::K>; \
  };
HFA_EXTENDED_QK_ATOM(80, cute::bfloat16_t, MMA_64x80x16_F32BF16BF16_SS)
HFA_EXTENDED_QK_ATOM(80, cute::half_t, MMA_64x80x16_F32F16F16_SS)
#undef HFA_EXTENDED_QK_ATOM

}  // namespace hfa::sm90
