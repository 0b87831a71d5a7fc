// Shared-memory tiles for the mma.sync kernels: a swizzled row-major layout, the cp.async copy
// that fills a tile from a (seqlen, head_dim) slice of global memory, the ldmatrix loads of A and
// B fragments in either orientation, and a warp-level GEMM over two tiles.
//
// Layout: a (Rows x Cols) tile of 2-byte elements, row-major, in 16-byte chunks of 8 elements.
// Chunk c of row r is stored at chunk position c ^ (r % 8). ldmatrix reads one chunk from each of
// 8 consecutive rows; the XOR puts those 8 chunks in 8 different 16-byte bank groups, so every
// ldmatrix (plain or transposed) and every 16-byte copy is free of bank conflicts.
#pragma once

#include <cstdint>

#include "kernels/sm80/common/mma.cuh"

namespace hfa::sm80 {

template <int Rows, int Cols>
struct SwizzledTile {
  static_assert(Cols % 64 == 0, "the XOR swizzle needs at least 8 chunks per row");
  static constexpr int kRows = Rows;
  static constexpr int kCols = Cols;
  static constexpr int kElems = Rows * Cols;
  static constexpr int kChunksPerRow = Cols / 8;

  // Element offset of (row, col); col % 8 stays inside the chunk.
  __device__ static int offset(int row, int col) {
    return row * Cols + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
  }
};

// Copies rows [row0, row0 + Rows) of a (seqlen, Cols) slice into `tile` with cp.async; rows at or
// past `rows_valid` become zeros (so masked keys multiply zeros, never stale data). All `Threads`
// threads of the CTA take part; the caller commits and waits.
template <class Tile, int Threads, typename T>
__device__ __forceinline__ void load_rows_async(T* tile, const T* gmem, int64_t row_stride,
                                                int row0, int rows_valid) {
  constexpr int kChunks = Tile::kRows * Tile::kChunksPerRow;
  static_assert(kChunks % Threads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < kChunks / Threads; ++i) {
    const int idx = threadIdx.x + i * Threads;
    const int r = idx / Tile::kChunksPerRow, c = idx % Tile::kChunksPerRow;
    const bool valid = row0 + r < rows_valid;
    const T* src = valid ? gmem + (row0 + r) * row_stride + c * 8 : gmem;
    cp_async_16(tile + Tile::offset(r, c * 8), src, valid);
  }
}

// ---- Fragment loads (one warp). m0/n0/k0 are the tile coordinates of the fragment's corner. -----

// A (16 x 16) at (m0, k0) of a tile stored [m][k].
template <class Tile, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(a, tile + Tile::offset(m0 + lane % 16, k0 + 8 * (lane / 16)));
}
// A (16 x 16) at (m0, k0) of a tile stored [k][m] (e.g. P^T from P stored [query][key]).
template <class Tile, typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* tile, int m0, int k0) {
  const int lane = threadIdx.x % 32, mat = lane / 8;
  ldmatrix_x4_trans(a, tile + Tile::offset(k0 + lane % 8 + 8 * (mat / 2), m0 + 8 * (mat % 2)));
}
// B of two n8 tiles (n0 and n0 + 8) x k16 at k0, from a tile stored [n][k] (e.g. K for Q K^T).
template <class Tile, typename T>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[2][2], const T* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  uint32_t r[4];
  ldmatrix_x4(r, tile + Tile::offset(n0 + lane % 8 + 8 * (lane / 16), k0 + 8 * ((lane / 8) % 2)));
  b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
}
// The same from a tile stored [k][n] (e.g. V for P V).
template <class Tile, typename T>
__device__ __forceinline__ void load_b_pair_trans(uint32_t (&b)[2][2], const T* tile, int n0,
                                                  int k0) {
  const int lane = threadIdx.x % 32, mat = lane / 8;
  uint32_t r[4];
  ldmatrix_x4_trans(r, tile + Tile::offset(k0 + lane % 8 + 8 * (mat % 2), n0 + 8 * (mat / 2)));
  b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
}

// Which way an operand is stored in its tile.
enum class Stored { kRowMajor, kTransposed };

// One k16 step of a warp GEMM: acc (16 MT x 8 NT, this warp's fragments) += A (16 MT x 16, rows
// from a_m0, k from k0) * B (16 x 8 NT, columns from b_n0, k from k0), both from shared memory.
//   A stored kRowMajor: tile [m][k];  kTransposed: tile [k][m].
//   B stored kRowMajor: tile [n][k] (B^T row-major, as K in Q K^T);  kTransposed: tile [k][n].
template <typename T, int MT, int NT, Stored AStore, Stored BStore, class TileA, class TileB>
__device__ __forceinline__ void warp_gemm_step(float (&acc)[MT][NT][4], const T* sA, int a_m0,
                                               const T* sB, int b_n0, int k0) {
  static_assert(NT % 2 == 0, "B is loaded in pairs of n8 tiles");
  uint32_t a[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if constexpr (AStore == Stored::kRowMajor)
      load_a<TileA>(a[mt], sA, a_m0 + 16 * mt, k0);
    else
      load_a_trans<TileA>(a[mt], sA, a_m0 + 16 * mt, k0);
  }
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32_t b[2][2];
    if constexpr (BStore == Stored::kRowMajor)
      load_b_pair<TileB>(b, sB, b_n0 + 16 * np, k0);
    else
      load_b_pair_trans<TileB>(b, sB, b_n0 + 16 * np, k0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mma_16816<T>(acc[mt][2 * np], a[mt], b[0]);
      mma_16816<T>(acc[mt][2 * np + 1], a[mt], b[1]);
    }
  }
}

// The whole GEMM: k over [0, K) in steps of 16.
template <typename T, int MT, int NT, int K, Stored AStore, Stored BStore, class TileA, class TileB>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const T* sA, int a_m0,
                                          const T* sB, int b_n0) {
  static_assert(K % 16 == 0, "k in steps of 16");
#pragma unroll 4  // fully unrolled, ptxas hoisted enough fragments to spill the d=128 backward on sm80
  for (int k0 = 0; k0 < K; k0 += 16)
    warp_gemm_step<T, MT, NT, AStore, BStore, TileA, TileB>(acc, sA, a_m0, sB, b_n0, k0);
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
}

// Writes this warp's fp32 fragments (rows m0 + 16 mt, columns n0 + 8 nt), rounded to T, into a
// tile: how P and dS reach the GEMMs that need them transposed, and how O is staged for 16-byte
// stores.
template <class Tile, typename T, int MT, int NT>
__device__ __forceinline__ void store_c(T* tile, const float (&acc)[MT][NT][4], int m0, int n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int row = m0 + 16 * mt + g, col = n0 + 8 * nt + 2 * q;
      *reinterpret_cast<uint32_t*>(tile + Tile::offset(row, col)) =
          pack2<T>(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<uint32_t*>(tile + Tile::offset(row + 8, col)) =
          pack2<T>(acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// Copies rows [0, rows_valid - row0) of a tile to global memory as 16-byte vectors (all threads).
template <class Tile, int Threads, typename T>
__device__ __forceinline__ void store_rows(T* gmem, int64_t row_stride, const T* tile, int row0,
                                           int rows_valid) {
  constexpr int kChunks = Tile::kRows * Tile::kChunksPerRow;
  for (int idx = threadIdx.x; idx < kChunks; idx += Threads) {
    const int r = idx / Tile::kChunksPerRow, c = idx % Tile::kChunksPerRow;
    if (row0 + r < rows_valid)
      *reinterpret_cast<uint4*>(gmem + (row0 + r) * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + Tile::offset(r, c * 8));
  }
}

}  // namespace hfa::sm80
