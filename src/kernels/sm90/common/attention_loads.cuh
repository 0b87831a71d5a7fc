// The producer's two jobs in every sm90 forward kernel: load the Q tile once, and fill the next
// stage of the K/V ring. K3 and K4 run them on thread 0; a producer warp (K5) runs the same calls.
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/sm90/common/pipeline.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::sm90 {

// Q tile `m_block` of (batch b, head h) into `smem`, completing on `barrier` (armed here).
template <int BlockM, int D, class QLayout, class Tma, class Element>
__device__ void load_q_tile(const Tma& tma, uint64_t& barrier, Element* smem, const FwdProblem& p,
                            int h, int b, int m_block) {
  using namespace cute;
  OnceBarrier::arm(barrier, BlockM * D * sizeof(Element));
  load_tile<BlockM, D>(tma, barrier, make_tensor(make_smem_ptr(smem), QLayout{}), p.seqlen_q,
                       p.heads_q, p.batch, h, b, m_block);
}

// Q tile `m_block` of (batch b, head h) into the Q buffer, treated as a one-stage ring
// (AttentionConfig::QPipeline): waits until the previous tile's Q was released. Advances `state`.
// fill_stage: shared-memory writes published with the Q tile (see TmaPipeline::producer_acquire).
// row_offset: a variable-length sequence's first row (load_tile); its b is then 0.
template <class QPipeline, int BlockM, int D, class QLayout, class Tma, class Element,
          class Fill = NoStageFill>
__device__ void load_q_stage(typename QPipeline::SharedStorage& q_pipeline,
                             typename QPipeline::State& state, const Tma& tma, Element* smem,
                             const FwdProblem& p, int h, int b, int m_block,
                             const Fill& fill_stage = Fill{}, int row_offset = 0) {
  using namespace cute;
  QPipeline::producer_acquire(q_pipeline, state, BlockM * D * sizeof(Element), fill_stage);
  load_tile<BlockM, D>(tma, QPipeline::full_barrier(q_pipeline, state),
                       make_tensor(make_smem_ptr(smem), QLayout{}), p.q_rows(), p.heads_q,
                       p.tma_batch(), h, b, m_block, row_offset);
  state.advance();
}

// The persistent kernels' Q stage (K6, K7): Q tile `bc` into the Q buffer (load_q_stage), with its
// coordinates written to `coord` and published with it, so the consumers read them from shared
// memory (published_tile) instead of recomputing them: four integer divisions fewer on their
// critical path between tiles. row_offset: a variable-length sequence's first row (then the TMA
// reads batch entry 0; coord still gets bc.batch).
template <class QPipeline, int BlockM, int D, class QLayout, class Tma, class Element>
__device__ void load_q_stage_of(typename QPipeline::SharedStorage& q_pipeline,
                                typename QPipeline::State& state, const Tma& tma, Element* smem,
                                const FwdProblem& p, const BlockCoord& bc, int (&coord)[3],
                                int row_offset = 0) {
  load_q_stage<QPipeline, BlockM, D, QLayout>(q_pipeline, state, tma, smem, p, bc.head,
                                              p.varlen() ? 0 : bc.batch, bc.m_block, [&] {
                                                coord[0] = bc.m_block;
                                                coord[1] = bc.head;
                                                coord[2] = bc.batch;
                                              }, row_offset);
}
// The coordinates load_q_stage_of published (after the wait on the Q stage). kFromLaneZero: each
// warp takes them from its lane 0 (three shuffles), so ptxas can prove them warp-uniform and keeps
// what derives from them (the KV loop's bounds, the ring's stage indices, the shared-memory
// descriptors' offsets) in uniform registers instead of moving it there (R2UR) at every use: in
// k7 d = 128's 192-key loop R2UR 28 -> 8 and VIADD 65 -> 52 per tile. Which kernels take it is
// their policy (k7_launch.h: broadcast_tile_coord); k6 measured the same either way.
template <bool kFromLaneZero = false>
__device__ __forceinline__ BlockCoord published_tile(const int (&coord)[3]) {
  if constexpr (kFromLaneZero)
    return BlockCoord{__shfl_sync(0xffffffffu, coord[0], 0), __shfl_sync(0xffffffffu, coord[1], 0),
                      __shfl_sync(0xffffffffu, coord[2], 0)};
  return BlockCoord{coord[0], coord[1], coord[2]};
}
// A value the producer's one thread (lane 0: the warp's other lanes have returned) read from
// global memory, passed through a shuffle of that lane alone. ptxas then knows it is warp-uniform
// and keeps it, and the tile coordinates computed from it, in uniform registers, as it does the
// dense kernels' (from blockIdx and the parameters); the TMA issues need them there. Without it,
// k6's varlen producer moved each coordinate with R2UR at every TMA load (278 R2UR in its loop at
// d = 128) and spilled 196 bytes at its 24 registers; with it, none (ptxas, cuobjdump).
__device__ __forceinline__ int producer_uniform(int x) { return __shfl_sync(1u, x, 0); }

// A dynamically scheduled kernel's last Q stage carries no tile but this marker (m_block -1).
// The check takes the value from lane 0 (every lane of the warp must call it), so ptxas can prove
// the loop it ends warp-uniform: read per lane, the consumers' whole tile loop counted as
// divergent, and ptxas built every WGMMA descriptor in ordinary registers and moved it with R2UR
// (k6 d = 256 causal, dynamic order: 4 R2UR, 2 IMAD and 2 VIADD per HGMMA, 9% more instructions
// than the static rounds' kernel; ncu, WORKLOG session 29).
__device__ __forceinline__ void publish_end_of_tiles(int (&coord)[3]) { coord[0] = -1; }
__device__ __forceinline__ bool is_end_of_tiles(const int (&coord)[3]) {
  return __shfl_sync(0xffffffffu, coord[0], 0) < 0;
}

// K and V tile `tile` of (batch b, KV head hk) into the ring stage `state` points at, once that
// stage is empty; one full barrier expects both tiles' bytes. Advances `state`.
// k_ring / v_ring: the first of the ring's stages, each BlockN x D elements.
template <class Pipeline, int BlockN, int D, class KVLayout, class Tma, class Element>
__device__ void load_kv_tiles(typename Pipeline::SharedStorage& pipeline,
                              typename Pipeline::State& state, const Tma& tma_k, const Tma& tma_v,
                              Element* k_ring, Element* v_ring, const FwdProblem& p, int hk, int b,
                              int tile) {
  using namespace cute;
  constexpr int kStageElems = BlockN * D;
  Pipeline::producer_acquire(pipeline, state, 2 * kStageElems * sizeof(Element));
  uint64_t& bar = Pipeline::full_barrier(pipeline, state);
  load_tile<BlockN, D>(tma_k, bar, make_tensor(make_smem_ptr(k_ring + state.index * kStageElems), KVLayout{}),
                       p.seqlen_k, p.heads_kv, p.batch, hk, b, tile);
  load_tile<BlockN, D>(tma_v, bar, make_tensor(make_smem_ptr(v_ring + state.index * kStageElems), KVLayout{}),
                       p.seqlen_k, p.heads_kv, p.batch, hk, b, tile);
  state.advance();
}

// One tile (K or V) into the stage `state` points at of a ring with its own barriers (K6 keeps
// K and V in separate rings so that K_j can be released as soon as S_j = Q K_j^T has landed,
// while V_j is still needed). Does not advance `state`: the K and V rings move together.
// row_offset: a variable-length sequence's first key (load_tile); its b is then 0.
// fill_stage: shared-memory writes published with the tile (TmaPipeline::producer_acquire).
template <class Pipeline, int BlockN, int D, class KVLayout, class Tma, class Element,
          class Fill = NoStageFill>
__device__ void load_ring_tile(typename Pipeline::SharedStorage& pipeline,
                               const typename Pipeline::State& state, const Tma& tma,
                               Element* ring, const FwdProblem& p, int hk, int b, int tile,
                               int row_offset = 0, const Fill& fill_stage = Fill{}) {
  using namespace cute;
  constexpr int kStageElems = BlockN * D;
  Pipeline::producer_acquire(pipeline, state, kStageElems * sizeof(Element), fill_stage);
  load_tile<BlockN, D>(tma, Pipeline::full_barrier(pipeline, state),
                       make_tensor(make_smem_ptr(ring + state.index * kStageElems), KVLayout{}),
                       p.k_rows(), p.heads_kv, p.tma_batch(), hk, b, tile, row_offset);
}

}  // namespace hfa::sm90
