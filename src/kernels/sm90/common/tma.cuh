// TMA loads of attention tiles (Q, K or V), written once for every sm90 kernel.
//
// The global tensor is viewed as (seqlen, head_dim, heads, batch) with the problem's strides, so
// one descriptor serves every (batch, head) and any non-packed layout (strides must be 16-byte
// multiples: check_16B_aligned). The shared-memory tile is 128-byte swizzled and K-major, the
// layout GMMA reads and that spreads a row's 16-byte chunks over all banks. Rows past seqlen are
// zero-filled by the hardware, which is how ragged last tiles are handled.
#pragma once

#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <type_traits>

#include "common/problem.h"

namespace hfa::sm90 {

// A (Rows, D) tile in swizzled K-major layout: 128-byte swizzle whenever a row has a multiple of
// 128 bytes (every bf16/fp16 tile; fp8 from D = 128), else 64-byte (fp8 at D = 64, a 192-key
// transposed V) or 32-byte (a 224-key transposed V: not used by a kernel yet). A ring of
// stages is Stages such tiles back to back (each 1024-byte aligned, as the swizzle requires).
template <typename Element, int Rows, int D>
using TileLayout = decltype(cute::tile_to_shape(
    std::conditional_t<(D * sizeof(Element)) % 128 == 0, cute::GMMA::Layout_K_SW128_Atom<Element>,
                       std::conditional_t<(D * sizeof(Element)) % 64 == 0, cute::GMMA::Layout_K_SW64_Atom<Element>,
                                          cute::GMMA::Layout_K_SW32_Atom<Element>>>{},
    cute::Shape<cute::Int<Rows>, cute::Int<D>>{}));

// The (Cols, Rows) transposed view of a (Rows, Cols) TileLayout tile: element (c, r) is the tile's
// (r, c). GMMA reads it MN-major: the forward's V^T for O += P V, and in the backward Q^T, dO^T, K^T
// and dS = (dS^T)^T, each over the K-major tile the TMA (or the softmax) wrote.
template <class Tile, int Rows, int Cols>
using TransposedView = decltype(cute::composition(
    Tile{}, cute::Layout<cute::Shape<cute::Int<Cols>, cute::Int<Rows>>,
                         cute::Stride<cute::Int<Rows>, cute::_1>>{}));

// Byte addressing of a TileLayout tile of 1-byte elements (Rows x RowBytes), for code that moves
// it with plain loads and stores (k7's V transpose): the swizzle atom is 8 rows x 128 bytes
// (RowBytes % 128 == 0; 16-byte chunk c of row r at chunk c ^ (r % 8)) or 8 rows x 64 bytes
// (other multiples of 64, e.g. k7's 192-key transposed V; chunk c at c ^ ((r % 8) / 2)) or 8 rows
// x 32 bytes (other multiples of 32, a 224-key transposed V; chunk c at c ^ ((r % 8) / 4)), as
// TileLayout picks them; atoms stack down the rows first, then across.
// A 4-byte word at a column that is a multiple of 4 never straddles a chunk. Tested against CuTe
// in tests/cpu.
template <int Rows, int RowBytes>
struct KMajorBytes {
  static_assert(RowBytes % 32 == 0, "no swizzle atom for this row length");
  static constexpr int kAtomBytes = RowBytes % 128 == 0 ? 128 : RowBytes % 64 == 0 ? 64 : 32;
  __host__ __device__ static constexpr int offset(int row, int col) {
    const int atom = row / 8 + (Rows / 8) * (col / kAtomBytes);
    const int r8 = row % 8, chunk = (col % kAtomBytes) / 16;
    const int swizzled = chunk ^ (r8 / (1024 / (8 * kAtomBytes)));  // r8, r8 / 2, r8 / 4
    return atom * 8 * kAtomBytes + r8 * kAtomBytes + swizzled * 16 + col % 16;
  }
};

// The dynamic shared memory of a kernel, 1024-byte aligned: the 128-byte swizzle
// pattern of TileLayout repeats every 1024 bytes and GMMA/TMA assume tiles start on one.
// kUniformBase (the default): aligned by an offset from smem_raw, so that the compiler still
// knows the storage is shared memory (plain accesses compile to LDS / STS rather than generic
// loads and stores) and ptxas keeps the base, and the WGMMA descriptors built from it, in uniform
// registers. false: aligned by integer arithmetic on the generic address (what every kernel did
// before 1627b16): the base is a per-thread register and each descriptor is moved to the uniform
// datapath where it is used (R2UR). k7's 192-key loop at d = 128 measured faster that way
// (k7_launch.h: uniform_storage_base).
template <class Storage, bool kUniformBase = true>
__device__ __forceinline__ Storage& aligned_shared_storage() {
  extern __shared__ char smem_raw[];
  if constexpr (kUniformBase) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    return *reinterpret_cast<Storage*>(smem_raw + ((1024u - addr % 1024u) % 1024u));
  } else {
    const uintptr_t p = (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023};
    return *reinterpret_cast<Storage*>(p);
  }
}

// Element addressing of a TileLayout tile (2-byte elements) for code that reads it with plain
// loads rather than GMMA. The 128-byte swizzle atom is 8 rows x 64 elements (1 KB): 16-byte chunk
// c of row r sits at chunk c ^ (r % 8). tile_to_shape stacks atoms down the rows first, then
// across head_dim. (Evaluating the CuTe layout directly would not do: its swizzle is applied by the
// smem pointer of a tensor, not by the layout.) Tested against CuTe in tests/cpu.
template <int Rows>
struct Sw128Rows {
  template <typename T>
  __host__ __device__ static T* chunk(T* base, int row, int c8) {
    const int atom = row / 8 + (Rows / 8) * (c8 / 8);
    return base + atom * 512 + (row % 8) * 64 + (((c8 % 8) ^ (row % 8)) * 8);
  }
};

// The (seqlen, head_dim, heads, batch) global view of one attention operand.
template <typename Element, int D>
__host__ __device__ auto attention_gmem_shape(int seqlen, int heads, int batch) {
  return cute::make_shape(seqlen, cute::Int<D>{}, heads, batch);
}

template <typename Element, int Rows, int D>
auto make_tile_tma(const void* ptr, int seqlen, int heads, int batch, int64_t row_stride,
                   int64_t head_stride, int64_t batch_stride) {
  using namespace cute;
  Tensor g = make_tensor(make_gmem_ptr(static_cast<const Element*>(ptr)),
                         attention_gmem_shape<Element, D>(seqlen, heads, batch),
                         make_stride(row_stride, _1{}, head_stride, batch_stride));
  return make_tma_copy(SM90_TMA_LOAD{}, g, TileLayout<Element, Rows, D>{},
                       Shape<Int<Rows>, Int<D>>{}, _1{});
}

// The type of a tile's TMA copy, for kernel Params.
template <typename Element, int Rows, int D>
using TileTma = decltype(make_tile_tma<Element, Rows, D>(nullptr, 1, 1, 1, 0, 0, 0));

// The three descriptors of a forward problem (Q tiles of BlockM rows, K/V tiles of BlockN rows).
// With seqlen_k == 0 no KV tile is ever loaded, but a descriptor must still be valid: K/V then
// get Q's (unused) descriptor shape.
template <typename Element, int BlockM, int BlockN, int D, class TmaQ, class TmaKV>
void make_attention_tmas(const FwdProblem& p, TmaQ* q, TmaKV* k, TmaKV* v) {
  *q = make_tile_tma<Element, BlockM, D>(p.q, p.q_rows(), p.heads_q, p.tma_batch(), p.q_row_stride,
                                         p.q_head_stride, p.q_batch_stride);
  if (p.k_rows() == 0) {
    *k = *v = make_tile_tma<Element, BlockN, D>(p.q, p.q_rows(), p.heads_q, p.tma_batch(),
                                                p.q_row_stride, p.q_head_stride, p.q_batch_stride);
    return;
  }
  *k = make_tile_tma<Element, BlockN, D>(p.k, p.k_rows(), p.heads_kv, p.tma_batch(), p.k_row_stride,
                                         p.k_head_stride, p.k_batch_stride);
  *v = make_tile_tma<Element, BlockN, D>(p.v, p.k_rows(), p.heads_kv, p.tma_batch(), p.v_row_stride,
                                         p.v_head_stride, p.v_batch_stride);
}

// Issues the TMA load of tile `tile` (rows [row_offset + tile * Rows, ...)) of (batch b, head h)
// into `smem` (one (Rows, D) tile), completing on `barrier`. Called by one thread. seqlen, heads,
// batch: the descriptor's view (FwdProblem::q_rows() ...); row_offset: a variable-length
// sequence's first row in the packed tensor (SequenceOffsets), whose tiles then start anywhere.
template <int Rows, int D, class Tma, class SmemTensor>
__device__ void load_tile(const Tma& tma, uint64_t& barrier, SmemTensor smem, int seqlen,
                          int heads, int batch, int h, int b, int tile, int row_offset = 0) {
  using namespace cute;
  Tensor m = tma.get_tma_tensor(make_shape(seqlen, Int<D>{}, heads, batch));
  Tensor g = local_tile(domain_offset(make_coord(row_offset, _0{}), m(_, _, h, b)),
                        Shape<Int<Rows>, Int<D>>{}, make_coord(tile, _0{}));
  auto cta = tma.get_slice(_0{});
  copy(tma.with(barrier), cta.partition_S(g), cta.partition_D(smem));
}

}  // namespace hfa::sm90
