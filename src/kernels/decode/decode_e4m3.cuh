// Flash decode's pieces for an e4m3 KV cache (decode_kernel.cuh): each warp's keys converted
// exactly from e4m3 into an fp16 tile for the GEMMs, and a bf16 q converted into fp16 rows scaled
// by powers of two (the header of decode_kernel.cuh says why fp16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/numeric.cuh"
#include "kernels/decode/decode_shape.h"

namespace hfa::flash_decode {

// e4m3 cache: this warp's kKeys keys (rows key0 ...) of a staged tile (rows of D bytes) converted
// into a tile of fp16 in Tile's swizzled layout. Lane l converts the 8-byte pieces l, l + 32, ... of
// those rows: a quarter-warp reads 64 contiguous bytes and writes the 8 chunks of one swizzled row
// group, both free of bank conflicts by this count (yet ncu counted 22.6% of these stores'
// wavefronts as conflicts on an H200: WORKLOG, "Flash decode", session 43).
// The lane's addresses are computed once, in the constructor, and held in registers: left to
// itself, ptxas recomputed every piece's swizzled offset in every tile (d = 128: ~8 integer
// instructions per 8 bytes converted). That and the copies' held sources (load_tile) took the
// d = 128 loop from 1022 to 841 instructions for +1% (H200): the loop was bound by latency, not
// by issue (ncu then: issue slots 32% busy, 0.38 eligible warps per scheduler).
template <class Tile, int D, int kKeys>
struct E4m3Conversion {
  static constexpr int kPiecesPerRow = D / 8, kPieces = kKeys * kPiecesPerRow / 32;
  static constexpr int kRowsPerPiece = 32 / kPiecesPerRow;  // piece i + 1 lies this many rows below i
  // Pieces i and i + kPeriod lie 8 rows apart: the same swizzle, 8 rows' bytes further on.
  static constexpr int kPeriod = 8 / kRowsPerPiece;
  static_assert(kPiecesPerRow <= 32 && kPieces * 32 == kKeys * kPiecesPerRow && kPieces % kPeriod == 0,
                "whole pieces per lane, whole swizzle periods");
  uint32_t src;           // byte offset of the lane's piece 0 in a staged tile
  uint32_t dst[kPeriod];  // shared-window byte addresses of pieces 0 .. kPeriod - 1, converted

  // converted: the fp16 tile's shared-window address; key0: a multiple of 8 (the swizzle's rows).
  __device__ __forceinline__ E4m3Conversion(uint32_t converted, int key0, int lane) {
    const int r = key0 + lane / kPiecesPerRow, c = lane % kPiecesPerRow;
    src = r * D + c * 8;
#pragma unroll
    for (int k = 0; k < kPeriod; ++k) {
      dst[k] = converted + 2 * Tile::offset(r + k * kRowsPerPiece, c * 8);
      asm volatile("" : "+r"(dst[k]));  // held, not recomputed in the loop
    }
  }
  // staged: the staged tile's shared-window address. The pieces go in batches: kBatch loads, then
  // their conversions and stores, so that the loads' latency is paid once per batch rather than
  // once per piece (the asm statements keep their order; the staged and converted tiles are
  // disjoint). ncu, H200, d = 128 before batching: short-scoreboard stalls 44% of the cycles
  // between a warp's instructions, at 2 warps per scheduler; batched, the e4m3 sweep ran 1.07x
  // (b 64 x 16k 3.16 -> 3.56 TB/s; WORKLOG, "Flash decode", session 44). d = 256 batches fewer
  // pieces (registers: 241 of its 255).
  __device__ __forceinline__ void operator()(uint32_t staged) const {
    constexpr int kBatch = kPieces < (D == 256 ? 4 : 8) ? kPieces : (D == 256 ? 4 : 8);
    static_assert(kPieces % kBatch == 0, "whole batches");
#pragma unroll
    for (int i0 = 0; i0 < kPieces; i0 += kBatch) {
      uint2 raw[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(raw[k].x), "=r"(raw[k].y)
                     : "r"(staged + src + (i0 + k) * kRowsPerPiece * D) : "memory");
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = i0 + k;
        const uint4 h = e4m3x8_to<__half>(raw[k]);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst[i % kPeriod] + (i / kPeriod) * 16 * D),
                     "r"(h.x), "r"(h.y), "r"(h.z), "r"(h.w) : "memory");
      }
    }
  }
};

// A bf16 or fp16 cache's kernel converts nothing.
struct NoE4m3Conversion {
  __device__ __forceinline__ NoE4m3Conversion(uint32_t, int, int) {}
  __device__ __forceinline__ void operator()(uint32_t) const {}
};

// A bf16 Q tile (Tile's swizzled layout, kRows x D) converted in place into fp16, row r scaled by
// 2^e_r so that its largest magnitude lies in [2^14, 2^15) (fp16_row_exponent: a row of zeros or
// one holding an infinity is not scaled; a NaN does not count); unscale[r] = 2^-e_r.
// kThreads / kRows consecutive threads (lanes of one warp) take a row. The caller synchronizes
// before and after.
template <class Tile, int kRows, int D, int kThreads>
__device__ __forceinline__ void scale_q_rows_to_fp16(void* tile, float* unscale) {
  constexpr int kThreadsPerRow = kThreads / kRows, kChunksPerThread = D / 8 / kThreadsPerRow;
  static_assert(kThreadsPerRow * kRows == kThreads && kThreadsPerRow <= 32 && 32 % kThreadsPerRow == 0,
                "a row's threads are lanes of one warp");
  static_assert(kChunksPerThread * kThreadsPerRow * 8 == D, "whole 16-byte chunks per thread");
  const int r = threadIdx.x / kThreadsPerRow, j = threadIdx.x % kThreadsPerRow;
  uint4* chunks[kChunksPerThread];
  float v[kChunksPerThread][8];
  float mx = 0.f;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    chunks[i] = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(tile) +
                                         Tile::offset(r, (j + i * kThreadsPerRow) * 8));
    const uint4 raw = *chunks[i];
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      v[i][k] = __bfloat162float(e[k]);
      mx = fmaxf(mx, fabsf(v[i][k]));  // fmaxf drops a NaN: it stays NaN, scaled or not
    }
  }
#pragma unroll
  for (int off = kThreadsPerRow / 2; off > 0; off /= 2)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  const int e = fp16_row_exponent(mx);
  const float scale = ldexpf(1.f, e);
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    float scaled[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) scaled[k] = v[i][k] * scale;
    *chunks[i] = pack8<__half>(scaled);
  }
  if (j == 0) unscale[r] = ldexpf(1.f, -e);
}

}  // namespace hfa::flash_decode
