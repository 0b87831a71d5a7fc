// The tile configuration every WGMMA forward kernel (K4, K5, K6) is built from: a Q tile of 64 rows
// per consumer warpgroup (two by default: 128 rows; K6 runs three at d = 64), BlockN-row K/V tiles
// in a Stages-deep TMA ring, the two GEMMs (S = Q K^T from shared memory, O += P V with P in
// registers and V read MN-major), and what the host passes (problem + three TMA descriptors).
//
// Also here, because all of them share it: the epilogue (O and LSE from registers to global
// memory) and the host launch (descriptors, shared-memory limit, grid from a tile scheduler).
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/common/numeric.cuh"
#include "kernels/sm90/common/element.cuh"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::sm90 {

// The GMMA atom of S = Q K^T for a (64 x N) slab per warpgroup, k = 16 per instruction. CuTe's
// selector covers N that are multiples of 64 (and 96, 192); other N are specialized in
// gmma_extended.cuh, which a kernel using them includes. The check keeps the selector from
// silently tiling N with a narrower atom.
template <typename E, int N, int D>
struct QkAtom {
  using type = decltype(cute::GMMA::ss_op_selector<E, E, float,
                                                   cute::Shape<cute::_64, cute::Int<N>, cute::Int<D>>>());
  static_assert(cute::size<1>(typename cute::MMA_Traits<type>::Shape_MNK{}) == N,
                "this tile width needs an extended GMMA shape: include sm90/common/gmma_extended.cuh");
};

// S = Q K^T (or S^T = K Q^T) on Warpgroups: a (64 x N) slab per warpgroup along M, k = D.
template <typename E, int N, int D, class Warpgroups>
using QkTiledMma = decltype(cute::make_tiled_mma(typename QkAtom<E, N, D>::type{}, Warpgroups{}));

// A GEMM whose A operand comes from registers (the softmax's P, or the backward's P^T and dS^T)
// and whose B is read from shared memory BMajor-major: (64 x N) per warpgroup, k = K. O += P V
// (B = V, MN-major; K-major for FP8, whose V is transposed), dV += P^T dO and dK += dS^T Q.
template <typename E, int N, int K, cute::GMMA::Major BMajor, class Warpgroups>
using RegisterATiledMma = decltype(cute::make_tiled_mma(
    cute::GMMA::rs_op_selector<E, E, float, cute::Shape<cute::_64, cute::Int<N>, cute::Int<K>>,
                               cute::GMMA::Major::K, BMajor>(),
    Warpgroups{}));

// How a kernel's O leaves: stored from registers (store_output), or staged in shared memory and
// stored by the TMA (staged_output.cuh), in staging tiles of its own or in the K and V ring stages
// of the tile's last KV tile (K6 at d = 256, where no 64 KB are left).
enum class OutputPath { kDirect, kOwnTiles, kRingStages };

// The O staging tiles of OutputPath::kOwnTiles: one (kStagedRows x D) tile per consumer
// warpgroup. Empty for the other paths.
template <typename E, int Elems>
struct OutputStaging {
  alignas(1024) E o[Elems];
};
template <typename E>
struct OutputStaging<E, 0> {};
struct NoOutputTma {};

template <typename T, int D, int BlockN, int Stages, OutputPath Output = OutputPath::kDirect,
          int ConsumerWarpgroups = 2>
struct AttentionConfig {
  using E = typename CutlassElement<T>::type;
  static constexpr int kConsumerWarpgroups = ConsumerWarpgroups;
  static constexpr int kBlockM = 64 * ConsumerWarpgroups, kBlockN = BlockN, kStages = Stages;
  static constexpr int kHeadDim = D;
  static constexpr OutputPath kOutput = Output;
  static constexpr bool kStageO = Output != OutputPath::kDirect;
  static_assert(Output != OutputPath::kRingStages || BlockN >= kStagedRows,
                "a ring stage must hold a warpgroup's O staging tile");
  static constexpr int kConsumerThreads = 128 * ConsumerWarpgroups;  // warpgroups along M
  using QLayout = TileLayout<E, kBlockM, D>;
  using KVLayout = TileLayout<E, kBlockN, D>;
  // V^T (D, kBlockN) over V's K-major tile: element (d, n) is V(n, d). GMMA reads it MN-major.
  using VtLayout = TransposedView<KVLayout, kBlockN, D>;
  using MmaQK = QkTiledMma<E, kBlockN, D, WarpgroupsAlongM<ConsumerWarpgroups>>;
  using MmaPV = RegisterATiledMma<E, D, kBlockN, cute::GMMA::Major::MN, WarpgroupsAlongM<ConsumerWarpgroups>>;
  using Pipeline = TmaPipeline<kStages>;
  // The Q buffer as a one-stage ring: a persistent kernel (K6) releases it after a tile's last
  // Q K^T so the producer can load the next tile's Q; single-tile kernels load it once.
  using QPipeline = TmaPipeline<1>;
  static constexpr int kQElems = kBlockM * D, kKVElems = kBlockN * D;

  struct SharedStorage {
    alignas(1024) E q[kQElems];
    alignas(1024) E k[kStages][kKVElems];
    alignas(1024) E v[kStages][kKVElems];
    typename Pipeline::SharedStorage pipeline;    // K4/K5: K and V tiles together; K6: K only
    typename Pipeline::SharedStorage pipeline_v;  // K6: V's own barriers (unused by K4/K5)
    typename QPipeline::SharedStorage q_pipeline;
    int q_tile_coord[3];  // K6: (m_block, head, batch) of the tile in q, published with it
    uint8_t wait_order[kConsumerThreads];  // K6 at d = 64: warpgroup_wait_after's slots (wgmma.cuh)
    OutputStaging<E, Output == OutputPath::kOwnTiles ? kBlockM * D : 0> o_staging;
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  struct Params {
    FwdProblem problem;
    TileTma<E, kBlockM, D> tma_q;
    TileTma<E, kBlockN, D> tma_k, tma_v;
    // K6 (else unused): the persistent scheduler's (head, batch) pairs per L2 group, or with
    // the dynamic orders (DynamicTileScheduler, VarlenTileScheduler) their heads per group.
    int tile_group;
    // K6 on a variable-length batch: the tile order plan_varlen_tiles wrote and the counter the
    // CTAs take its tiles with (varlen_scheduler.cuh); on a dense problem in the dynamic order,
    // DynamicTileScheduler's counter.
    int* tile_plan;
    std::conditional_t<kStageO, OutputTma<E, D>, NoOutputTma> tma_o;
  };
};

// The LSE of a thread's rows (lse, one per row of coord_rc) to global memory, if requested; rows
// past seqlen_q are dropped. One thread of each quad stores (the quad shares its rows).
template <class TC>
__device__ __forceinline__ void store_lse(const FwdProblem& p, const TC& coord_rc, const float* lse,
                                          int b, int h, int q0) {
  using namespace cute;
  if (!p.lse || threadIdx.x % 4 != 0) return;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(coord_rc); ++r) {
    const int qi = q0 + get<0>(coord_rc(r, 0));
    if (qi < p.seqlen_q)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] = lse[r];
  }
}

// O (fp32 fragment, times its row's factor: OnlineSoftmax::finalize) and LSE to global memory;
// rows past seqlen_q are dropped. o_rc / coord_rc: the thread's O fragment and its (row, col)
// coordinates as (rows, cols) views.
// A thread's columns sit at fixed offsets from its first one, so each row gets one pointer and
// every store an immediate offset from it (indexing by the column's int made ptxas build a 64-bit
// address per store: ~3 instructions each, 40% of k6's per-tile code at s = 512).
template <typename T, class TO, class TC>
__device__ __forceinline__ void store_output(const FwdProblem& p, const TO& o_rc,
                                             const float* row_factor, const TC& coord_rc,
                                             const float* lse, int b, int h, int q0) {
  using namespace cute;
  const int col0 = get<1>(coord_rc(0, 0));
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + col0;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(o_rc); ++r) {
    const int qi = q0 + get<0>(coord_rc(r, 0));
    if (qi >= p.seqlen_q) continue;
    T* orow = o + qi * p.o_row_stride;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(o_rc); c += 2) {  // a thread's column pairs are adjacent
      const int dc = get<1>(coord_rc(r, c)) - col0;  // a constant once unrolled
      T pair[2] = {from_float<T>(o_rc(r, c) * row_factor[r]),
                   from_float<T>(o_rc(r, c + 1) * row_factor[r])};
      *reinterpret_cast<uint32_t*>(orow + dc) = *reinterpret_cast<uint32_t*>(pair);
    }
    if (p.lse && threadIdx.x % 4 == 0)  // as store_lse, inside this loop (its qi test)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] = lse[r];
  }
}

// One round of quad_transpose, with the lane `lane_xor` away: a lane with `upper` set trades its
// x values for the partner's y values, the other lane its y values for the partner's x values.
__device__ __forceinline__ void quad_exchange(uint32_t& x0, uint32_t& y0, uint32_t& x1, uint32_t& y1,
                                              bool upper, int lane_xor) {
  uint32_t s0 = upper ? x0 : y0, s1 = upper ? x1 : y1;
  s0 = __shfl_xor_sync(0xffffffffu, s0, lane_xor);
  s1 = __shfl_xor_sync(0xffffffffu, s1, lane_xor);
  if (upper) {
    x0 = s0;
    x1 = s1;
  } else {
    y0 = s0;
    y1 = s1;
  }
}

// The 4 x 4 transpose of 32-bit values across a quad (lanes 4k .. 4k + 3): lane q's a[j] becomes
// lane j's a[q]. Two rounds: the 2 x 2 blocks' corners with the neighbouring lane, then the
// blocks with the lane two away.
__device__ __forceinline__ void quad_transpose(uint32_t (&a)[4], uint32_t quad) {
  quad_exchange(a[0], a[1], a[2], a[3], quad & 1, 1);
  quad_exchange(a[0], a[2], a[1], a[3], quad & 2, 2);
}

// One row r of a thread's (rows, cols) accumulator fragment, times f, to global memory as a
// 2-byte T in 16-byte pieces (store_fragment_rows_16B, store_output_16B): a quad's four threads
// share the row and hold column pairs 2q, 2q + 1 of every 8-column block; a quad_transpose per 4
// blocks hands thread q block q's 8 columns. out: the row at the thread's first piece (column
// col0 - 2q + 8q, col0 = the thread's first column, 2q). Every lane of the warp must call it (the
// shuffles); only rows in_range are stored.
template <typename T, class TA, class TC>
__device__ __forceinline__ void store_row_pieces_16B(T* out, const TA& acc_rc, const TC& coord_rc, int r,
                                                     float f, int col0, uint32_t quad, bool in_range) {
  using namespace cute;
  static_assert(sizeof(T) == 2, "two-byte outputs: 8 columns per 16 bytes");
  constexpr int kCols = decltype(size<1>(acc_rc))::value;
  static_assert(kCols % 8 == 0, "whole groups of four 8-column blocks");
  CUTE_UNROLL
  for (int g = 0; g < kCols / 8; ++g) {
    uint32_t a[4];
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {
      T pair[2] = {from_float<T>(acc_rc(r, 8 * g + 2 * j) * f), from_float<T>(acc_rc(r, 8 * g + 2 * j + 1) * f)};
      a[j] = *reinterpret_cast<uint32_t*>(pair);
    }
    quad_transpose(a, quad);
    const int dc = get<1>(coord_rc(r, 8 * g)) - col0;  // 32 g: a constant once unrolled
    if (in_range) *reinterpret_cast<uint4*>(out + dc) = make_uint4(a[0], a[1], a[2], a[3]);
  }
}

// The rows of a thread's (rows, cols) accumulator fragment, each times factor(r), to global memory
// as a 2-byte T in 16-byte pieces (store_row_pieces_16B); dst points at the tile's row 0, column 0
// (16-byte aligned, as are its rows: the sm90 checks require it of every output), rows at or past
// row_limit are dropped. 16-byte pieces instead of 4-byte ones, whose 32-byte sectors the L2 saw
// half-written twice (ncu's "uncoalesced global accesses"; k7's epilogue at d = 256, s = 512 spent
// a third of its consumers' time in that store queue). Every lane of the warp must call it: the
// shuffles run for dropped rows too (each quad's rows differ; the mask is the whole warp).
template <typename T, class TA, class TC, class RowFactor>
__device__ __forceinline__ void store_fragment_rows_16B(T* dst, int64_t row_stride, const TA& acc_rc,
                                                        const TC& coord_rc, int row_limit,
                                                        const RowFactor& factor) {
  const uint32_t quad = threadIdx.x % 4;
  const int col0 = cute::get<1>(coord_rc(0, 0));
  T* base = dst + (col0 - 2 * static_cast<int>(quad)) + 8 * quad;
  CUTE_UNROLL
  for (int r = 0; r < cute::size<0>(acc_rc); ++r) {
    const int row = cute::get<0>(coord_rc(r, 0));
    const bool in_range = row < row_limit;
    store_row_pieces_16B<T>(base + int64_t(in_range ? row : 0) * row_stride, acc_rc, coord_rc, r,
                            factor(r), col0, quad, in_range);
  }
}

// store_output in 16-byte pieces (store_row_pieces_16B), with each row's LSE stored in the same
// loop. (Not store_fragment_rows_16B with the LSE in a loop of its own: that form compiled to a
// differently scheduled epilogue that measured 3-4% slower at d = 128, s <= 1k in one H200 run.)
template <typename T, class TO, class TC>
__device__ __forceinline__ void store_output_16B(const FwdProblem& p, const TO& o_rc,
                                                 const float* row_factor, const TC& coord_rc,
                                                 const float* lse, int b, int h, int q0) {
  const uint32_t quad = threadIdx.x % 4;
  const int col0 = cute::get<1>(coord_rc(0, 0));
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + (col0 - 2 * quad) + 8 * quad;
  CUTE_UNROLL
  for (int r = 0; r < cute::size<0>(o_rc); ++r) {
    const int qi = q0 + cute::get<0>(coord_rc(r, 0));
    const bool in_range = qi < p.seqlen_q;
    store_row_pieces_16B<T>(o + int64_t(in_range ? qi : 0) * p.o_row_stride, o_rc, coord_rc, r,
                            row_factor[r], col0, quad, in_range);
    if (in_range && p.lse && quad == 0)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + qi * p.lse_row_stride] = lse[r];
  }
}

// Host side of every kernel on an AttentionConfig: descriptors, shared-memory limit, launch of
// `threads` per CTA on `grid` (from the kernel's tile scheduler).
template <class Config, class Kernel>
cudaError_t launch_attention(Kernel kernel, dim3 grid, int threads, typename Config::Params& params,
                             cudaStream_t stream) {
  const FwdProblem& p = params.problem;
  make_attention_tmas<typename Config::E, Config::kBlockM, Config::kBlockN, Config::kHeadDim>(
      p, &params.tma_q, &params.tma_k, &params.tma_v);
  if constexpr (Config::kStageO)
    params.tma_o = make_output_tma<typename Config::E, Config::kHeadDim>(
        p.o, p.q_rows(), p.heads_q, p.tma_batch(), p.o_row_stride, p.o_head_stride, p.o_batch_stride);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Config::kSmemBytes);
  if (err != cudaSuccess) return err;
  kernel<<<grid, threads, Config::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

// The launch of a persistent kernel (K6, K7) on `p`: one CTA per SM at most, the scheduler's L2
// grouping of (head, batch) pairs for K/V of `element_bytes`, then launch_attention.
// Params::tile_plan, for the kernels whose Params have one (k7's do not).
template <class P>
auto set_tile_plan(P& params, int* plan, int) -> decltype(params.tile_plan = plan, void()) {
  params.tile_plan = plan;
}
template <class P>
void set_tile_plan(P&, int*, long) {}

// tile_plan (Params::tile_plan, if the kernel takes one): a variable-length batch's tile order, or
// a dense problem's tile counter (DynamicTileScheduler). With one the tiles are taken dynamically,
// in groups of l2_heads_per_group (a dense problem: dynamic_order_group); without, in the static
// rounds' groups.
template <class Config, class Kernel>
cudaError_t launch_persistent(Kernel kernel, int threads, int element_bytes, long long l2_group_bytes,
                              const FwdProblem& p, cudaStream_t stream,
                              int* tile_plan = nullptr) {
  int device = 0, sm_count = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  typename Config::Params params{};
  params.problem = p;
  set_tile_plan(params, tile_plan, 0);
  // (With a variable-length batch: as many CTAs as max_seqlen_q's tiles for every sequence, a
  // bound on the planned tiles; the CTAs past them find none.)
  const int grid = PersistentTileScheduler::grid_size(p, Config::kBlockM, sm_count);
  params.tile_group =
      tile_plan == nullptr ? PersistentTileScheduler::group_size(p, Config::kBlockM, element_bytes,
                                                                 l2_group_bytes, grid)
      : p.varlen()         ? l2_heads_per_group(p, element_bytes, l2_group_bytes)
                           : dynamic_order_group(p, Config::kBlockM, Config::kBlockN, grid,
                                                 element_bytes, l2_group_bytes);
  return launch_attention<Config>(kernel, dim3(grid), threads, params, stream);
}

}  // namespace hfa::sm90
