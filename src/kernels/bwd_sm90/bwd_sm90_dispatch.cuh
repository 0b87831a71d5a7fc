// bwd_sm90's launches: the main kernel of a head dim's arrangement (bwd_sm90_kernel.cuh, d = 64
// and 128; bwd_sm90_split_keys.cuh, d = 256) with its descriptors, grid and clusters, between the
// shared pre- and post-passes, and the dispatch over masks, scores and variable-length batches
// that the generated translation units (bwd_sm90_*hdim.cu.in) instantiate.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "kernels/bwd_sm90/bwd_sm90_kernel.cuh"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"
#include "kernels/bwd_sm90/bwd_sm90_split_keys.cuh"
#include "kernels/common/backward_passes.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/tensor_map.h"
#include "kernels/sm90/common/tma.cuh"

namespace hfa::bwd_sm90 {

template <typename T, int D, bool kDeterministic, bool kVarlen, class Mask, class Score>
cudaError_t launch_main(const BwdProblem& bp, cudaStream_t stream) {
  using Config = ConfigFor<T, D, kDeterministic, Mask>;
  using E = typename Config::E;
  static_assert(Config::kSmemBytes <= smem_bytes(D, kDeterministic, kLocalMask<Mask>),
                "bwd_sm90_launch.h's smem_bytes() must bound the kernel's");
  const FwdProblem& p = bp.fwd;
  typename Config::Params params{};
  params.problem = bp;
  // The descriptors span the tensors (a variable-length batch's packed rows as one batch
  // entry: q_rows() ...). With no query rows no Q block is loaded, but the descriptors must
  // still be valid: Q and dO then get K's shape.
  const bool no_queries = p.q_rows() == 0;
  const int rows_q = p.q_rows(), rows_k = p.k_rows(), tma_batch = p.tma_batch();
  params.tma_q = no_queries
      ? sm90::make_tile_tma<E, Config::kBlockM, D>(p.k, rows_k, p.heads_kv, tma_batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride)
      : sm90::make_tile_tma<E, Config::kBlockM, D>(p.q, rows_q, p.heads_q, tma_batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
  params.tma_do = no_queries
      ? params.tma_q
      : sm90::make_tile_tma<E, Config::kBlockM, D>(bp.dout, rows_q, p.heads_q, tma_batch, bp.do_row_stride, bp.do_head_stride, bp.do_batch_stride);
  params.tma_k = sm90::make_tile_tma<E, Config::kBlockN, D>(p.k, rows_k, p.heads_kv, tma_batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
  params.tma_v = sm90::make_tile_tma<E, Config::kBlockN, D>(p.v, rows_k, p.heads_kv, tma_batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
  // With CTA pairs (the deterministic mode) the KV-block axis is even: clusters of two along it.
  constexpr int kPair = Config::kCtaPairs ? 2 : 1;
  const int kv_blocks = ((p.seqlen_k + Config::kBlockN - 1) / Config::kBlockN + kPair - 1) / kPair * kPair;
  params.problem.kv_blocks_across_heads = kv_blocks_across_heads(bp);
  const bool across_heads = params.problem.kv_blocks_across_heads;
  const dim3 grid = across_heads ? dim3(p.heads_kv, kv_blocks, p.batch) : dim3(kv_blocks, p.heads_kv, p.batch);
  if (!no_queries) {
    constexpr bool kFixed = Config::kFixedPointDq;
    if (kFixed != bp.dq_fixed_point) return cudaErrorInvalidValue;  // the workspace is laid out for the other
    if (cudaError_t err = sm90::encode_accumulator_tensor_map(
            &params.dq_map, kFixed ? sm90::AccumulatorType::kU64 : sm90::AccumulatorType::kF32, bp.dq_accum, D,
            dq_plane_rows(bp), static_cast<uint64_t>(dq_planes(bp)), Config::kDqSlabCols, Config::kDqRows);
        err != cudaSuccess)
      return err;
  }
  auto launch = [&](dim3 g) {
    auto kernel = [] {
      if constexpr (D > 128) {
        return bwd_sm90_split_keys_kernel<T, Config, kVarlen, Mask, Score>;
      } else {
        return bwd_sm90_kernel<T, D, kDeterministic, kVarlen, Mask, Score>;
      }
    }();
    if constexpr (Config::kCtaPairs) {
      return launch_clusters_with_smem(kernel, g, across_heads ? dim3(1, 2, 1) : dim3(2, 1, 1), kThreads,
                                       Config::kSmemBytes, stream, params);
    } else {
      return launch_with_smem(kernel, g, kThreads, Config::kSmemBytes, stream, params);
    }
  };
  if (!bp.dq_in_launch_order) return launch(grid);
  // The deterministic mode in launch order: KV block j of every (KV head, batch entry) in launch
  // j, which the stream starts once launch j - 1 has completed (its dQ additions with it).
  if constexpr (kDeterministic) {
    return cudaErrorInvalidValue;  // launch order runs the default kernel (launch_policies)
  } else {
    for (int j = 0; j < kv_blocks; ++j) {
      params.problem.kv_block_offset = j;
      if (cudaError_t err = launch(dim3(1, p.heads_kv, p.batch)); err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }
}

// The main kernel's launch (descriptors, shared memory, one CTA per (KV block, KV head, batch or
// sequence)), between the shared pre- and post-passes, for one mask and score policy; kVarlen
// must be bp.fwd.varlen(). The arrangement of a head dim (bwd_sm90_launch.h): the keys as M up to
// d = 128, split between the warpgroups at d = 256; the deterministic mode's kernel may take
// other Q blocks (block_m).
template <typename T, int D, bool kVarlen, class Mask, class Score>
cudaError_t launch_policies(const BwdProblem& bp, cudaStream_t stream) {
  return launch_backward_passes<T, D>(bp, stream, [&]() -> cudaError_t {
    // The deterministic mode in launch order runs the default kernel (bwd_sm90_launch.h).
    return bp.dq_fixed_point ? launch_main<T, D, true, kVarlen, Mask, Score>(bp, stream)
                             : launch_main<T, D, false, kVarlen, Mask, Score>(bp, stream);
  });
}

template <typename T, int D, bool kVarlen, bool kLocal, bool kSoftcap>
cudaError_t launch_policies_for(const BwdProblem& bp, cudaStream_t stream) {
  return launch_policies<T, D, kVarlen, std::conditional_t<kLocal, sm90::LocalMask, sm90::AttentionMask>,
                         std::conditional_t<kSoftcap, sm90::SoftcapScore, sm90::PlainScore>>(bp, stream);
}

template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_variant(const BwdProblem& bp, cudaStream_t stream) {
  return launch_policies_for<T, D, false, kLocal, kSoftcap>(bp, stream);
}

template <typename T, int D>
cudaError_t launch_varlen(const BwdProblem& bp, cudaStream_t stream) {
  const FwdProblem& p = bp.fwd;
  if (p.local) return p.softcap > 0.f ? launch_policies_for<T, D, true, true, true>(bp, stream)
                                       : launch_policies_for<T, D, true, true, false>(bp, stream);
  return p.softcap > 0.f ? launch_policies_for<T, D, true, false, true>(bp, stream)
                         : launch_policies_for<T, D, true, false, false>(bp, stream);
}

// Dense and causal here; the window and softcap variants in bwd_sm90_variants_hdim<D>.cu, every
// variable-length batch in bwd_sm90_varlen_hdim<D>.cu.
template <typename T, int D>
cudaError_t launch_backward(const BwdProblem& bp, cudaStream_t stream) {
  const FwdProblem& p = bp.fwd;
  if (p.varlen()) return launch_varlen<T, D>(bp, stream);
  if (p.local) return p.softcap > 0.f ? launch_variant<T, D, true, true>(bp, stream)
                                       : launch_variant<T, D, true, false>(bp, stream);
  if (p.softcap > 0.f) return launch_variant<T, D, false, true>(bp, stream);
  return launch_policies<T, D, false, sm90::AttentionMask, sm90::PlainScore>(bp, stream);
}

}  // namespace hfa::bwd_sm90
