// The forward's O written through shared memory and a TMA store (K6), instead of each thread
// storing its accumulator fragment to global memory.
//
// Why: a thread's O fragment is 4-byte pairs scattered over two rows, so direct stores take
// D / 4 store instructions per thread, each warp instruction writing 16 bytes into each of 8 rows
// (half sectors). At s = 512 the consumers sat in those stores long enough that k6 without any O
// store ran 20% (d = 128) to 31% (d = 256) faster (docs/WORKLOG.md, K6 seventh pass). Staged, a
// warpgroup writes its 64 x D rows to a swizzled shared-memory tile with stmatrix (D / 16
// instructions per thread, conflict-free), and one thread hands the tile to the TMA engine, which
// stores it asynchronously (rows past seqlen_q are clipped by the tensor map) while the warpgroup
// starts its next tile.
//
// Each consumer warpgroup stages into one tile (kStagedRows x D, TileLayout: 128-byte swizzled, as
// the TMA loads use): its own (AttentionConfig's OutputPath::kOwnTiles), or at d = 256 a K or V
// ring stage that k6 holds for it (kRingStages). Protocol per tile, per warpgroup:
//   thread 0 waits until its previous store has read the tile (bulk_wait_read);
//   warpgroup barrier; everyone stages its fragment; fence.proxy.async (generic writes before
//   the async-proxy read); warpgroup barrier; thread 0 issues the store and commits the group.
// Before the CTA exits, thread 0 waits for its stores (finish_staged_output).
#pragma once

#include <cutlass/arch/barrier.h>

#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/sm90/common/bulk_reduce.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::sm90 {

constexpr int kStagedRows = 64;         // one consumer warpgroup's rows of the Q tile
constexpr int kStagedOutputBarrier = 2;  // named barrier ids 2, 3 (WarpgroupTurns has 0, 1)

// The TMA store of (kStagedRows, D) O tiles into O viewed as (seqlen_q, D, heads, batch).
template <typename Element, int D>
auto make_output_tma(void* ptr, int seqlen, int heads, int batch, int64_t row_stride,
                     int64_t head_stride, int64_t batch_stride) {
  using namespace cute;
  Tensor g = make_tensor(make_gmem_ptr(static_cast<Element*>(ptr)),
                         attention_gmem_shape<Element, D>(seqlen, heads, batch),
                         make_stride(row_stride, _1{}, head_stride, batch_stride));
  return make_tma_copy(SM90_TMA_STORE{}, g, TileLayout<Element, kStagedRows, D>{},
                       Shape<Int<kStagedRows>, Int<D>>{}, _1{});
}
template <typename Element, int D>
using OutputTma = decltype(make_output_tma<Element, D>(nullptr, 1, 1, 1, 0, 0, 0));

// Four 8 x 8 matrices of 16-bit elements to shared memory: lane l gives the address of row l % 8
// of matrix l / 8; register i holds this thread's pair of matrix i (row lane / 4, columns
// 2 (lane % 4) and + 1), which is the layout of an accumulator fragment's 8-column blocks.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_address, uint32_t r0, uint32_t r1,
                                            uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_address), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  T pair[2] = {from_float<T>(lo), from_float<T>(hi)};
  return *reinterpret_cast<uint32_t*>(pair);
}

// Addresses in a staging tile (TileLayout, 128-byte swizzle; Sw128Rows is the reference): 16-byte
// chunk c of row r sits at byte (r / 8) * 1024 + (r % 8) * 128 + ((c % 8) ^ (r % 8)) * 16 of its
// 64-column slab, the slabs kStagedRows * 128 bytes apart. The XOR touches bits 4-6 only, which
// no other term has, so a chunk's offset is the row's base XOR (c % 8) * 16 plus its slab's
// offset: one register per thread and an immediate per store (precomputed per-store addresses
// were hoisted out of the KV loop by ptxas, and spilled). Tested against Sw128Rows in tests/cpu.
__host__ __device__ constexpr uint32_t staged_row_base(int row) {
  return (row / 8) * 1024 + (row % 8) * (128 + 16);
}
// TileRows: the rows of the whole tile (its slabs' height), when the 64 rows are a part of it.
template <int TileRows = kStagedRows>
__host__ __device__ constexpr uint32_t staged_chunk_offset(uint32_t row_base, int c8) {
  return (row_base ^ ((c8 % 8) * 16)) + (c8 / 8) * (TileRows * 128);
}

// The staging of one warpgroup's 64 x D fragment: pair(h, c) is this thread's packed pair of
// 16-bit elements (h, c) and (h, c + 1) of the fragment in row-column form (element (h, 2 j + e) at
// row 8 h + lane / 4 of the warp's 16 rows, column 8 j + 2 (lane % 4) + e), written into the
// warpgroup's staging tile. wg_thread: 0..127 in the warpgroup. TileRows: the rows of a
// TileLayout tile whose 64 rows from `tile` on these are (the backward's dS^T: one warpgroup's 64
// keys of a 128-key tile).
template <int D, int TileRows = kStagedRows, class Element, class PairOf>
__device__ __forceinline__ void stage_pairs(Element* tile, PairOf&& pair, int wg_thread) {
  static_assert(D % 16 == 0 && sizeof(Element) == 2);
  const int lane = wg_thread % 32;
  const int m = lane / 8;  // the matrix whose row this lane addresses: (row half, column block)
  const int row = (wg_thread / 32) * 16 + (m % 2) * 8 + lane % 8;
  // Matrices 2 and 3 are the next 8-column block: c = j + 1 for even j is (j % 8) ^ 1, no carry.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint32_t row_base = staged_row_base(row) ^ ((m / 2) * 16);
  CUTE_UNROLL
  for (int j = 0; j < D / 8; j += 2)  // column blocks j and j + 1
    stmatrix_x4(base + staged_chunk_offset<TileRows>(row_base, j), pair(0, 2 * j), pair(1, 2 * j), pair(0, 2 * j + 2),
                pair(1, 2 * j + 2));
}

// One warpgroup's fp32 O fragment (o_rc: 2 rows x D / 4 columns per thread, stage_pairs' form),
// times its row's factor, converted to T, into the warpgroup's staging tile.
template <typename T, int D, int TileRows = kStagedRows, class Element, class TO>
__device__ __forceinline__ void stage_output(Element* tile, const TO& o_rc, const float* row_factor,
                                             int wg_thread) {
  stage_pairs<D, TileRows>(tile, [&](int h, int c) {
    return pack_pair<T>(o_rc(h, c) * row_factor[h], o_rc(h, c + 1) * row_factor[h]);
  }, wg_thread);
}

// The whole staged store of one warpgroup's rows [row_block * kStagedRows, ...) of (batch b,
// head h); warpgroup: 0 or 1 (its barrier id), wg_thread: 0..127. row_offset: a variable-length
// sequence's first row in the packed O (then b is ignored). The tensor map clips rows only at
// the end of O: with a variable-length batch, a block that reaches past its sequence's end would
// overwrite the next sequence's rows, so such blocks must take the direct store (store_output).
template <typename T, int D, class Tma, class Element, class TO>
__device__ __forceinline__ void store_output_staged(const Tma& tma, Element* tile, const TO& o_rc,
                                                    const float* row_factor, const FwdProblem& p,
                                                    int b, int h, int row_block, int warpgroup,
                                                    int wg_thread, int row_offset = 0) {
  using namespace cute;
  using Barrier = cutlass::arch::NamedBarrier;
  if (wg_thread == 0) bulk_wait_read<0>();  // the previous tile's store has read the tile
  Barrier::sync(128, kStagedOutputBarrier + warpgroup);
  stage_output<T, D>(tile, o_rc, row_factor, wg_thread);
  fence_proxy_async_shared();
  Barrier::sync(128, kStagedOutputBarrier + warpgroup);
  if (wg_thread == 0) {
    Tensor m_o = tma.get_tma_tensor(make_shape(p.q_rows(), Int<D>{}, p.heads_q, p.tma_batch()));
    Tensor g_o = local_tile(domain_offset(make_coord(row_offset, _0{}), m_o(_, _, h, p.varlen() ? 0 : b)),
                            Shape<Int<kStagedRows>, Int<D>>{}, make_coord(row_block, _0{}));
    Tensor s_o = make_tensor(make_smem_ptr(tile), TileLayout<Element, kStagedRows, D>{});
    auto cta = tma.get_slice(_0{});
    copy(tma, cta.partition_S(s_o), cta.partition_D(g_o));
    bulk_commit_group();
  }
}

// Before the CTA exits: the issuing thread's stores have read shared memory and completed.
__device__ __forceinline__ void finish_staged_output(int wg_thread) {
  if (wg_thread == 0) bulk_wait<0>();
}

}  // namespace hfa::sm90
