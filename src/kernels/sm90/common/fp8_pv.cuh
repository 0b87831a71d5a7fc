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

#include "kernels/sm80/common/mma.cuh"
#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::sm90 {

// Two-level accumulation of O (K7, K8): Hopper's FP8 WGMMA does not add into its fp32
// accumulator in full precision. Each k-step aligns the products and the accumulator and keeps
// about 13 mantissa bits (SageAttention 2 measured the accumulator as 1-8-13; DeepSeek-V3 reports
// 14 bits for FP8 GEMMs), so once O holds the sum of many keys, every new product P V loses its
// low bits against O's magnitude -- always towards zero. With V of one sign (a mean offset, as
// real values have) the losses add up: O's relative RMS error was 7.5% over 4096 keys and 26%
// over 16k keys of U[0, 1) values (H100, hfa-bench --values uniform; 0.2% with this). Each
// tile's P V is therefore accumulated from zero into T (its 4 k-steps lose little against T's
// own magnitude) and added to O by FFMA, which also applies the rescale O would have had anyway:
// o = o * alpha + t, the same instruction count as o *= alpha. T costs O's registers again.
// t may cover a column block of o (k7 at d = 256: P V in halves): its columns are o's from
// col0 on, in the accumulator's (row, col) view (acc_rowcol: a thread's columns of each 8-column
// group in order, so o's first n/2 view columns are its first half of the head dim).
template <class ORowCol, class TRowCol, int kRows>
__device__ __forceinline__ void add_tile_to_output(ORowCol& o, const TRowCol& t, const float (&alpha)[kRows],
                                                   int col0 = 0) {
  using namespace cute;
  static_assert(decltype(size<0>(o))::value == kRows, "alpha per row of o");
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r)
    CUTE_UNROLL
    for (int c = 0; c < size<1>(t); ++c) o(r, col0 + c) = fmaf(o(r, col0 + c), alpha[r], t(r, c));
}

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

// One (BlockN keys x D) e4m3 V tile, as the TMA wrote it (KMajorBytes<BlockN, D>), into the
// (D x BlockN) K-major tile (KMajorBytes<D, BlockN>) that P V reads as its B operand, keys renamed
// (permuted_key_column). The work is split into units of 16 keys x 32 channels (512 bytes), a warp
// each (walked in slabs: VTransposeUnits), done as FlashAttention-3 does it: one ldmatrix.trans,
// four byte permutes, one stmatrix.
//
// ldmatrix.x4.trans.b16 reads matrices (keys 0-7 | 8-15) x (channels 0-15 | 16-31) of the unit,
// each an 8 x 8 block of 2-byte pairs (c, c + 1), and hands lane t (q = t % 4, p = t / 4) the
// pair of channels (2p, 2p + 1) of keys 2q and 2q + 1: bytes [k2q c, k2q c+1, k2q+1 c, k2q+1 c+1].
// Combining the matrices of keys 0-7 (a) and 8-15 (b) with PRMT 0x6420 gives channel 2p's bytes of
// keys 2q, 2q + 1, 2q + 8, 2q + 9, with 0x7531 channel 2p + 1's: exactly the renamed columns
// 4q .. 4q + 3 of transposed rows 2p and 2p + 1. stmatrix.x4 (not transposed) then writes register
// j of lane t to row t / 4, bytes 4q .. 4q + 3 of matrix j: each matrix is 8 transposed rows x 16
// keys. Lanes with p >= 4 swap their even and odd rows (the PRMT selectors are swapped, not the
// values), so matrix 0 holds rows 0, 2, 4, 6, 9, 11, 13, 15 and matrix 1 the others: 8 different
// row % 8 per matrix, which the swizzle puts in 8 different 16-byte bank groups (no conflicts;
// the ldmatrix side reads 8 consecutive keys of one chunk: none either).
template <int BlockN, int D>
struct VTransposeUnits {
  static_assert(BlockN % 32 == 0, "whole 32-byte swizzle atoms of transposed rows");
  static_assert(D % 32 == 0, "whole 32-channel units");
  using Src = KMajorBytes<BlockN, D>;
  using Dst = KMajorBytes<D, BlockN>;
  static constexpr int kKeyGroups = BlockN / 16, kUnits = kKeyGroups * (D / 32);
  static constexpr int kSrcAtom = Src::kAtomBytes, kDstAtom = Dst::kAtomBytes;

  // The row this lane addresses: for ldmatrix key 8 (matrix % 2) + l % 8 at channels
  // 16 (matrix / 2) ..; for stmatrix transposed row 16 (matrix / 2) + 2 (l % 8) + the parity
  // (matrix % 2, flipped for l % 8 >= 4), at the unit's 16 keys.
  __host__ __device__ static constexpr uint32_t load_key(uint32_t lane) {
    return 8 * (lane / 8 % 2) + lane % 8;
  }
  __host__ __device__ static constexpr uint32_t load_col(uint32_t lane) { return 16 * (lane / 16); }
  __host__ __device__ static constexpr uint32_t store_row(uint32_t lane) {
    return 16 * (lane / 16) + 2 * (lane % 8) + ((lane / 8 % 2) ^ (lane % 8 >= 4 ? 1u : 0u));
  }
  __host__ __device__ static constexpr uint32_t swizzle(uint32_t r8, int atom_bytes) {
    return r8 / (1024 / (8 * atom_bytes));  // 128-byte atoms: r8; 64: r8 / 2; 32: r8 / 4
  }

  // Src::offset(16 key_group + load_key, 32 col_group + load_col) and
  // Dst::offset(32 col_group + store_row, 16 key_group), written so that everything but one XOR
  // and the unit's linear part is a per-lane constant the loop hoists (a unit's address is a
  // handful of integer instructions; KMajorBytes::offset's divisions took about 30). Tested against
  // KMajorBytes in tests/cpu.
  __host__ __device__ static constexpr uint32_t src_offset(uint32_t lane, uint32_t key_group, uint32_t col_group) {
    const uint32_t col = 32 * col_group, r8 = lane % 8;
    const uint32_t chunk = (col % kSrcAtom) / 16 + lane / 16;  // (even) + 0 or 1: never carries
    return (2 * key_group + lane / 8 % 2) * 8 * kSrcAtom + BlockN * kSrcAtom * (col / kSrcAtom) +
           r8 * kSrcAtom + 16 * (chunk ^ swizzle(r8, kSrcAtom));
  }
  __host__ __device__ static constexpr uint32_t dst_offset(uint32_t lane, uint32_t key_group, uint32_t col_group) {
    const uint32_t row = store_row(lane), r8 = row % 8;
    const uint32_t chunk = (16 * key_group % kDstAtom) / 16;
    return (4 * col_group + row / 8) * 8 * kDstAtom + D * kDstAtom * (16 * key_group / kDstAtom) +
           r8 * kDstAtom + 16 * (chunk ^ swizzle(r8, kDstAtom));
  }
  // The same for unit u = key group + kKeyGroups * column group (the tests' numbering).
  __host__ __device__ static constexpr uint32_t src_offset(uint32_t lane, uint32_t unit) {
    return src_offset(lane, unit % kKeyGroups, unit / kKeyGroups);
  }
  __host__ __device__ static constexpr uint32_t dst_offset(uint32_t lane, uint32_t unit) {
    return dst_offset(lane, unit % kKeyGroups, unit / kKeyGroups);
  }

  // The units are walked in slabs: one column group's kSlabUnits consecutive key groups, starting
  // at a multiple of kSlabUnits (one destination swizzle atom's width). Within a slab unit j's
  // source offset is the first unit's plus j * 16 * kSrcAtom, and its destination offset the
  // slab's base plus (16 j) XOR a per-lane constant: a LOP3 and an add per unit besides the
  // ldmatrix, four PRMT and the stmatrix, where computing src_offset / dst_offset per unit took
  // about 22 integer instructions (two thirds of the loop; SASS at d = 256). The slabs are
  // numbered column group fastest: kColGroups (D / 32) is a power of two, so a slab's coordinates
  // are a shift and a mask (key group fastest divided by 3 at 192 keys: ~30 instructions per slab
  // of 4 units, half the transposers' instructions at d = 128 in ncu's source counters). Tested
  // against src_offset / dst_offset in tests/cpu.
  static constexpr int kSlabUnits = kDstAtom / 16;
  static_assert(kKeyGroups % kSlabUnits == 0, "whole slabs per column group");
  static constexpr int kColGroups = D / 32;
  static_assert((kColGroups & (kColGroups - 1)) == 0, "a power of two of column groups");
  static constexpr int kSlabs = kUnits / kSlabUnits;
  __host__ __device__ static constexpr uint32_t slab_key_group(uint32_t slab) {
    return slab / kColGroups * kSlabUnits;
  }
  __host__ __device__ static constexpr uint32_t slab_col_group(uint32_t slab) { return slab % kColGroups; }
  __host__ __device__ static constexpr uint32_t slab_first_unit(uint32_t slab) {
    return slab_key_group(slab) + kKeyGroups * slab_col_group(slab);
  }
  __host__ __device__ static constexpr uint32_t dst_chunk_xor(uint32_t lane) {
    return 16 * swizzle(store_row(lane) % 8, kDstAtom);
  }
  __host__ __device__ static constexpr uint32_t dst_slab_base(uint32_t lane, uint32_t slab) {
    // chunk 0 ^ x = x: a slab starts at a destination atom's first chunk
    return dst_offset(lane, slab_key_group(slab), slab_col_group(slab)) - dst_chunk_xor(lane);
  }
  __host__ __device__ static constexpr uint32_t src_slab_base(uint32_t lane, uint32_t slab) {
    return src_offset(lane, slab_key_group(slab), slab_col_group(slab));
  }
  __host__ __device__ static constexpr uint32_t src_in_slab(uint32_t slab_src, int j) {
    return slab_src + 16 * kSrcAtom * j;
  }
  __host__ __device__ static constexpr uint32_t dst_in_slab(uint32_t slab_dst, uint32_t chunk_xor, int j) {
    return slab_dst + ((16u * j) ^ chunk_xor);
  }
};

// kInFlight: units whose ldmatrix is out at once (1 or 2). Two hide the ldmatrix latency where
// the transposers limit the kernel (d = 256 with 24 registers); k7_launch.h says where it pays.
template <int BlockN, int D, int kInFlight>
__device__ __forceinline__ void transpose_v_tile(const uint8_t* v_ptr, uint8_t* vt_ptr, int thread,
                                                 int threads) {
  static_assert(kInFlight == 1 || kInFlight == 2, "one or two units in flight");
  using Units = VTransposeUnits<BlockN, D>;
  const uint32_t v = sm80::smem_u32(v_ptr);
  const uint32_t vt = sm80::smem_u32(vt_ptr);
  const uint32_t lane = thread % 32, warp = thread / 32, warps = threads / 32;
  const bool swapped = lane / 4 >= 4;
  const uint32_t sel_first = swapped ? 0x7531 : 0x6420, sel_second = swapped ? 0x6420 : 0x7531;
  const uint32_t chunk_xor = Units::dst_chunk_xor(lane);
  for (uint32_t slab = warp; slab < Units::kSlabs; slab += warps) {
    const uint32_t src = v + Units::src_slab_base(lane, slab);
    const uint32_t dst = vt + Units::dst_slab_base(lane, slab);
    // A fresh copy per slab: without it ptxas hoists the kSlabUnits values (16 j) ^ chunk_xor out
    // of the slab loop, and at d = 256 (24 registers) it spilled them: an LDL per unit.
    uint32_t slab_xor = chunk_xor;
    asm volatile("" : "+r"(slab_xor));
    uint32_t r[kInFlight][4];
    sm80::ldmatrix_x4_trans(r[0], Units::src_in_slab(src, 0));
    CUTE_UNROLL
    for (int j = 0; j < Units::kSlabUnits; ++j) {
      // With two in flight unit j + 1's ldmatrix goes out before unit j's permutes and store.
      if (kInFlight == 1 && j > 0) sm80::ldmatrix_x4_trans(r[0], Units::src_in_slab(src, j));
      if (kInFlight == 2 && j + 1 < Units::kSlabUnits)
        sm80::ldmatrix_x4_trans(r[(j + 1) % kInFlight], Units::src_in_slab(src, j + 1));
      const uint32_t(&u)[4] = r[j % kInFlight];
      stmatrix_x4(Units::dst_in_slab(dst, slab_xor, j),  //
                  __byte_perm(u[0], u[1], sel_first), __byte_perm(u[0], u[1], sel_second),
                  __byte_perm(u[2], u[3], sel_first), __byte_perm(u[2], u[3], sel_second));
    }
  }
}

}  // namespace hfa::sm90
