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

#include "kernels/common/numeric.cuh"
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
// Each thread copies one chunk column, every kRowsPerPass-th row, through one running pointer:
// the step is made opaque to the compiler, which otherwise precomputes every copy's 64-bit address
// once and holds them (or spills them) across the caller's whole loop. kFullTileBranch: a tile
// wholly in range (all but a sequence's last) takes a branch without the per-row predicates and
// address selects (fewer instructions, but the second copy of the loop can cost a register).
template <class Tile, int Threads, bool kFullTileBranch = true, typename T>
__device__ __forceinline__ void load_rows_async(T* tile, const T* gmem, int64_t row_stride,
                                                int row0, int rows_valid) {
  static_assert(Threads % Tile::kChunksPerRow == 0, "a pass of all threads covers whole rows");
  constexpr int kRowsPerPass = Threads / Tile::kChunksPerRow;
  static_assert(Tile::kRows % kRowsPerPass == 0, "every thread copies the same number of chunks");
  const int r = threadIdx.x / Tile::kChunksPerRow, c = threadIdx.x % Tile::kChunksPerRow;
  int64_t step = kRowsPerPass * row_stride;
  asm volatile("" : "+l"(step));
  const T* src = gmem + (row0 + r) * row_stride + c * 8;
  if (kFullTileBranch && row0 + Tile::kRows <= rows_valid) {  // uniform across the CTA
#pragma unroll
    for (int i = 0; i < Tile::kRows / kRowsPerPass; ++i, src += step)
      cp_async_16(tile + Tile::offset(r + i * kRowsPerPass, c * 8), src);
  } else {
#pragma unroll
    for (int i = 0; i < Tile::kRows / kRowsPerPass; ++i, src += step) {
      const bool valid = row0 + r + i * kRowsPerPass < rows_valid;
      cp_async_16(tile + Tile::offset(r + i * kRowsPerPass, c * 8), valid ? src : gmem, valid);
    }
  }
}

// ---- Fragment loads (one warp) -------------------------------------------------------------------
//
// Each ldmatrix.x4 reads one 16 x 16 block of a tile. Lane l supplies the address of one 16-byte
// chunk, at row R + row_l and chunk C + chunk_l for the block's corner (R rows, C chunks of 8
// elements; R % 8 == 0, C even) and the lane's place in the block (row_l < 16, chunk_l < 2), which
// depends on the operand (FragmentKind). The swizzle makes the chunk's position nonlinear in C, but
// only through C % 8: with y = chunk_l ^ (row_l % 8) the byte offset is
//     2 Cols (R + row_l) + 16 (C & ~7) + 16 ((C % 8) ^ y).
// So a LaneOffsets holds, per lane, the address for each of the four C % 8 in {0, 2, 4, 6}
// ("phases"), and every load in a GEMM is one of them plus a term linear in R and C & ~7 that the
// unrolled loops make a constant: no per-load index arithmetic in the hot loops.

// How a fragment is read (mma.cuh has the fragment layouts):
//   kA:       A (16 x 16) from a tile stored [m][k]
//   kATrans:  A from a tile stored [k][m] (e.g. P^T from P stored [query][key])
//   kBPair:   B of two n8 tiles (n16 x k16) from a tile stored [n][k] (e.g. K for Q K^T)
//   kBPairTrans: the same from a tile stored [k][n] (e.g. V for P V)
// The block's rows are the tile's rows: m or n for kA/kBPair, k for the transposed kinds.
enum class FragmentKind { kA, kATrans, kBPair, kBPairTrans };

template <class Tile, FragmentKind Kind>
struct LaneOffsets {
  static constexpr bool kTransposed = Kind == FragmentKind::kATrans || Kind == FragmentKind::kBPairTrans;
  static constexpr uint32_t kRowBytes = 2 * Tile::kCols;
  uint32_t phase[4];

  // The block corner (row0, chunk0) is runtime (a warp's offset). chunk0 % 8 is folded into the
  // phases, which is exact as long as the compile-time chunk steps added later (at()) never carry
  // into it: warp offsets that are multiples of the warp's extent (a power of two) guarantee that.
  __device__ LaneOffsets(const void* tile, int row0, int chunk0) {
    const int lane = threadIdx.x % 32, mat = lane / 8;
    int row_l, chunk_l;
    switch (Kind) {
      case FragmentKind::kA:           row_l = lane % 16;                chunk_l = lane / 16; break;
      case FragmentKind::kATrans:      row_l = lane % 8 + 8 * (mat / 2); chunk_l = mat % 2;   break;
      case FragmentKind::kBPair:       row_l = lane % 8 + 8 * (mat / 2); chunk_l = mat % 2;   break;
      case FragmentKind::kBPairTrans:  row_l = lane % 8 + 8 * (mat % 2); chunk_l = mat / 2;   break;
    }
    const uint32_t base = smem_u32(tile) + kRowBytes * (row0 + row_l) + 16 * (chunk0 & ~7);
    const int y = chunk_l ^ (row_l % 8) ^ (chunk0 % 8);
#pragma unroll
    for (int p = 0; p < 4; ++p) phase[p] = base + 16 * ((2 * p) ^ y);
  }

  // Address of the block at (row0 + dr, chunk0 + dc), plus `bytes` (a runtime step that is a
  // multiple of 128 bytes for row-major k: 8 chunks, or of whole rows). dr and dc are constants
  // of the caller's unrolled loops (dc selects the phase): dr % 8 == 0, dc even.
  __device__ uint32_t at(int dr, int dc, uint32_t bytes) const {
    return phase[(dc % 8) / 2] + kRowBytes * dr + 16 * (dc & ~7) + bytes;
  }
  __device__ void load(uint32_t (&r)[4], int dr, int dc, uint32_t bytes = 0) const {
    if constexpr (kTransposed)
      ldmatrix_x4_trans(r, at(dr, dc, bytes));
    else
      ldmatrix_x4(r, at(dr, dc, bytes));
  }
  // kBPair / kBPairTrans: the B fragments of the two n8 tiles.
  __device__ void load_pair(uint32_t (&b)[2][2], int dr, int dc, uint32_t bytes = 0) const {
    uint32_t r[4];
    load(r, dr, dc, bytes);
    b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
  }
};

// Which way an operand is stored in its tile.
enum class Stored { kRowMajor, kTransposed };

// A warp GEMM over shared memory: acc (16 MT x 8 NT, this warp's fragments) += A (16 MT x K, rows
// from a_m0) * B (K x 8 NT, columns from b_n0).
//   A stored kRowMajor: tile [m][k];  kTransposed: tile [k][m].
//   B stored kRowMajor: tile [n][k] (B^T row-major, as K in Q K^T);  kTransposed: tile [k][n].
// a_m0 and b_n0 must be multiples of the warp's extent (16 MT and 8 NT; LaneOffsets). k runs in
// blocks of 64 (4 unrolled k16 steps, one per phase of the row-major operands), the blocks not
// unrolled: unrolling them spilled the d=128 forward and backward on sm90 and measured 3% slower.
template <typename T, int MT, int NT, int K, Stored AStore, Stored BStore, class TileA, class TileB,
          bool kUnrollK = false>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const T* sA, int a_m0,
                                          const T* sB, int b_n0) {
  static_assert(NT % 2 == 0, "B is loaded in pairs of n8 tiles");
  static_assert((MT & (MT - 1)) == 0 && (NT & (NT - 1)) == 0, "warp extents are powers of two");
  static_assert(K % 64 == 0, "k in blocks of 64");
  constexpr bool kATrans = AStore == Stored::kTransposed, kBTrans = BStore == Stored::kTransposed;
  using AOffsets = LaneOffsets<TileA, kATrans ? FragmentKind::kATrans : FragmentKind::kA>;
  using BOffsets = LaneOffsets<TileB, kBTrans ? FragmentKind::kBPairTrans : FragmentKind::kBPair>;
  const AOffsets a_off = kATrans ? AOffsets(sA, 0, a_m0 / 8) : AOffsets(sA, a_m0, 0);
  const BOffsets b_off = kBTrans ? BOffsets(sB, 0, b_n0 / 8) : BOffsets(sB, b_n0, 0);
#pragma unroll (kUnrollK ? K / 64 : 1)
  for (int k64 = 0; k64 < K; k64 += 64) {
    // Row-major operands step through chunks as k grows (16 bytes per 8 elements of k), transposed
    // ones through rows.
    const uint32_t a_step = kATrans ? AOffsets::kRowBytes * k64 : 2 * k64;
    const uint32_t b_step = kBTrans ? BOffsets::kRowBytes * k64 : 2 * k64;
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // k16 step k64 + 16 u
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kATrans)
          a_off.load(a[mt], 16 * u, 2 * mt, a_step);
        else
          a_off.load(a[mt], 16 * mt, 2 * u, a_step);
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[2][2];
        if constexpr (kBTrans)
          b_off.load_pair(b, 16 * u, 2 * np, b_step);
        else
          b_off.load_pair(b, 16 * np, 2 * u, b_step);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc[mt][2 * np], a[mt], b[0]);
          mma_16816<T>(acc[mt][2 * np + 1], a[mt], b[1]);
        }
      }
    }
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
  for_each_fragment_element<MT, NT>([&](int mt, int nt, int i) { acc[mt][nt][i] = 0.f; });
}

// Calls f(row, col, lo, hi) for each pair of adjacent columns of this warp's fp32 fragments
// (rows m0 + 16 mt, columns n0 + 8 nt): the lane's rows g and g + 8 of each 16-row tile, columns
// col and col + 1 of each n8 tile, in that order.
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_c_pair(const float (&acc)[MT][NT][4], int m0, int n0, F&& f) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int row = m0 + 16 * mt + g, col = n0 + 8 * nt + 2 * q;
      f(row, col, acc[mt][nt][0], acc[mt][nt][1]);
      f(row + 8, col, acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// Writes this warp's fp32 fragments (rows m0 + 16 mt, columns n0 + 8 nt), rounded to T, into a
// tile: how P and dS reach the GEMMs that need them transposed, and how O is staged for 16-byte
// stores.
template <class Tile, typename T, int MT, int NT>
__device__ __forceinline__ void store_c(T* tile, const float (&acc)[MT][NT][4], int m0, int n0) {
  for_each_c_pair(acc, m0, n0, [&](int row, int col, float lo, float hi) {
    *reinterpret_cast<uint32_t*>(tile + Tile::offset(row, col)) = pack2<T>(lo, hi);
  });
}

// Writes this warp's fp32 fragments (rows m0 + 16 mt, columns n0 + 8 nt) straight to global
// memory in G, rows at or past row_limit dropped (gmem: row 0, column 0): for a result kept in
// fp32 (the backward's fp32 gradients), which the staging of store_c + store_rows would round.
template <typename G, int MT, int NT>
__device__ __forceinline__ void store_c_rows(G* gmem, int64_t row_stride, const float (&acc)[MT][NT][4],
                                             int m0, int n0, int row_limit) {
  for_each_c_pair(acc, m0, n0, [&](int row, int col, float lo, float hi) {
    if (row < row_limit) store2<G>(gmem + row * row_stride + col, lo, hi);
  });
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
