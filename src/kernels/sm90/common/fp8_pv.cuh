// The second GEMM of FP8 attention, O += P V with e4m3 P and V (K7), and what it needs that the
// bf16 kernels do not:
//
//  - FP8 WGMMA reads both operands K-major. For P V the K dimension is the keys, but V arrives as
//    (keys, head_dim) rows with head_dim contiguous: it must be transposed in shared memory
//    (transpose_v_tile, run by the producer warpgroup's otherwise idle warps).
//  - The register A operand of an e4m3 WGMMA (k = 32) gives a thread 4 consecutive keys per row
//    and 16-key half (PTX: keys 4q .. 4q + 3 and 16 + 4q .., q = lane % 4), while S's fp32
//    accumulator gives it pairs (keys 2q, 2q + 1, 8 + 2q, 9 + 2q of every 16). Rather than
//    exchanging bytes across the quad, the keys are renamed: P V sums over keys, so any order
//    works if P's columns and V's rows are permuted alike. convert_to_fp8_a_operand packs a
//    thread's own accumulator values in register order, and transpose_v_tile writes key
//    [2q, 2q + 1, 2q + 8, 2q + 9][i] of each 16 to column 4q + i of the transposed tile. The
//    permutation costs nothing: the transpose writes every column anyway.
#pragma once

#include <cuda_fp8.h>

#include <cute/tensor.hpp>

#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::sm90 {

// Four fp32 values to four e4m3 bytes (saturating: P <= 2^8 never needs it, but inf must not
// become NaN), a first.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// P (S's accumulator after the softmax) into the e4m3 A operand (wgmma.cuh's
// make_a_operand_for<e4m3>), keys renamed as the header says. Per 32 keys the accumulator holds (key pair, row r / r + 8, 8-key group) = 16 values;
// register j of the operand takes rows r (j even) or r + 8 (j odd) of groups 0-1 (j < 2) or 2-3.
template <class AccTensor, class ATensor>
__device__ __forceinline__ void convert_to_fp8_a_operand(const AccTensor& acc, ATensor& a) {
  using namespace cute;
  static_assert(sizeof(typename ATensor::value_type) == 1, "an e4m3 operand expected");
  uint32_t* regs = reinterpret_cast<uint32_t*>(raw_pointer_cast(a.data()));
  CUTE_UNROLL
  for (int kb = 0; kb < size(acc) / 16; ++kb) {
    const int i = 16 * kb;
    regs[4 * kb + 0] = pack_e4m3x4(acc(i + 0), acc(i + 1), acc(i + 4), acc(i + 5));
    regs[4 * kb + 1] = pack_e4m3x4(acc(i + 2), acc(i + 3), acc(i + 6), acc(i + 7));
    regs[4 * kb + 2] = pack_e4m3x4(acc(i + 8), acc(i + 9), acc(i + 12), acc(i + 13));
    regs[4 * kb + 3] = pack_e4m3x4(acc(i + 10), acc(i + 11), acc(i + 14), acc(i + 15));
  }
}

// The column of the transposed tile that holds key `key` (within its tile): the renaming above.
__host__ __device__ constexpr int permuted_key_column(int key) {
  const int in16 = key % 16, q = (in16 % 8) / 2, half = in16 / 8, odd = in16 % 2;
  return key - in16 + 4 * q + 2 * half + odd;
}

// Shared-memory accesses by 32-bit shared addresses: the tiles' pointers come from the dynamic
// shared memory through integer alignment arithmetic (aligned_shared_storage), after which the
// compiler no longer knows they are shared and emits generic LD/ST (measured: k7 at d = 128,
// s = 16k, 510 -> 610 TFLOPS once the transpose used LDS/STS).
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t x;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(addr));
  return x;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, const uint4& x) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x.x), "r"(x.y),
               "r"(x.z), "r"(x.w)
               : "memory");
}

// The 4 x 4 byte transpose: word j of the result gathers byte j of a, b, c, d (8 PRMT for 4),
// produced in the order j ^ flip (flip in 0..3, per thread): the PRMT selectors that pick the
// low or the high half are swapped at run time instead of moving the results afterwards.
struct ByteTransposeSelectors {
  uint32_t pairs_lo, pairs_hi, words_lo, words_hi;
  __device__ explicit ByteTransposeSelectors(int flip)
      : pairs_lo(flip & 2 ? 0x7362 : 0x5140), pairs_hi(flip & 2 ? 0x5140 : 0x7362),
        words_lo(flip & 1 ? 0x7632 : 0x5410), words_hi(flip & 1 ? 0x5410 : 0x7632) {}
};
__device__ __forceinline__ void transpose_4x4_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                                    const ByteTransposeSelectors& sel,
                                                    uint32_t (&out)[4]) {
  const uint32_t lo_ab = __byte_perm(a, b, sel.pairs_lo), hi_ab = __byte_perm(a, b, sel.pairs_hi);
  const uint32_t lo_cd = __byte_perm(c, d, sel.pairs_lo), hi_cd = __byte_perm(c, d, sel.pairs_hi);
  out[0] = __byte_perm(lo_ab, lo_cd, sel.words_lo);
  out[1] = __byte_perm(lo_ab, lo_cd, sel.words_hi);
  out[2] = __byte_perm(hi_ab, hi_cd, sel.words_lo);
  out[3] = __byte_perm(hi_ab, hi_cd, sel.words_hi);
}

// One (BlockN keys x D) e4m3 V tile, as the TMA wrote it (TileLayout<.., BlockN, D>), into the
// (D x BlockN) K-major tile (TileLayout<.., D, BlockN>) that P V reads as its B operand, keys
// renamed (permuted_key_column). `thread` of `threads` (a multiple of 32) share the work in
// units of 16 keys x 4 columns: sixteen 4-byte loads (a warp's lanes read consecutive words of
// one row: no bank conflicts), 4 x 4 byte transposes, and four 16-byte stores, one per column:
// its 16 keys in renamed order are one 16-byte chunk of a transposed row. The 8 lanes of a
// quarter-warp (one store phase) write rows 4c + j of 8 consecutive c, which the swizzle puts in
// 2 bank groups (4-way conflicts) if all write the same j; lane pair p writes row j ^ p in its
// store j (a Latin square over the 4 pairs), so the 8 rows of a phase have 8 different row % 8.
template <int BlockN, int D>
__device__ __forceinline__ void transpose_v_tile(const uint8_t* v_ptr, uint8_t* vt_ptr, int thread,
                                                 int threads) {
  static_assert(BlockN % 16 == 0 && D % 32 == 0, "whole 16-key groups; 8 words per store phase");
  using Src = KMajorBytes<BlockN, D>;
  using Dst = KMajorBytes<D, BlockN>;
  const uint32_t v = static_cast<uint32_t>(__cvta_generic_to_shared(v_ptr));
  const uint32_t vt = static_cast<uint32_t>(__cvta_generic_to_shared(vt_ptr));
  constexpr int kWordsPerRow = D / 4, kUnits = (BlockN / 16) * kWordsPerRow;
  const int flip = (thread % 32 / 2) % 4;
  const ByteTransposeSelectors sel(flip);
  for (int u = thread; u < kUnits; u += threads) {
    const int word = u % kWordsPerRow, group = u / kWordsPerRow;
    const int col = 4 * word, key0 = 16 * group;
    // rows[j][m]: row col + (j ^ flip) of the transposed tile, word m = keys 2m, 2m + 1, 2m + 8,
    // 2m + 9 of the group.
    uint32_t rows[4][4];
    CUTE_UNROLL
    for (int m = 0; m < 4; ++m) {
      uint32_t w[4];
      CUTE_UNROLL
      for (int i = 0; i < 4; ++i)
        w[i] = ld_shared_u32(v + Src::offset(key0 + 2 * m + (i % 2) + 8 * (i / 2), col));
      uint32_t t[4];
      transpose_4x4_bytes(w[0], w[1], w[2], w[3], sel, t);
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) rows[j][m] = t[j];
    }
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j)
      st_shared_v4(vt + Dst::offset(col + (j ^ flip), key0),
                   make_uint4(rows[j][0], rows[j][1], rows[j][2], rows[j][3]));
  }
}

}  // namespace hfa::sm90
