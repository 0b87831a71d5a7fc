// Tile schedulers: which (Q tile, head, batch) a CTA computes. SingleTileScheduler: one CTA per
// tile (K3-K5). PersistentTileScheduler: one CTA per SM that walks many tiles (K6).
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"

namespace hfa::sm90 {

struct BlockCoord {
  int m_block, head, batch;
};

// One CTA per (Q tile, head, batch), straight from blockIdx.
struct SingleTileScheduler {
  static dim3 grid_shape(const FwdProblem& p, int block_m) {
    return dim3((p.seqlen_q + block_m - 1) / block_m, p.heads_q, p.batch);
  }
  __device__ BlockCoord block_coord() const {
    return BlockCoord{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                      static_cast<int>(blockIdx.z)};
  }
};

// Persistent CTAs (at most one per SM) take tiles idx = blockIdx.x, blockIdx.x + gridDim.x, ...
// of one order: (head, batch) pairs in groups of `group` (sized on the host so that a group's K/V
// stays in L2), and inside a group the Q tiles from last to first with the group's pairs
// interleaved. So one wave works on few heads (their K/V is read from DRAM about once), and with
// causal masking the longest tiles (the last Q tiles see the most keys) start first and the
// shortest fill the end, instead of a tail of long tiles.
struct PersistentTileScheduler {
  int m_blocks, pairs, heads, group;

  __host__ __device__ PersistentTileScheduler(const FwdProblem& p, int block_m, int group_)
      : m_blocks((p.seqlen_q + block_m - 1) / block_m), pairs(p.heads_q * p.batch),
        heads(p.heads_q), group(group_) {}

  __host__ __device__ int tiles() const { return m_blocks * pairs; }

  static dim3 grid_shape(const FwdProblem& p, int block_m, int group, int sm_count) {
    const int tiles = PersistentTileScheduler(p, block_m, group).tiles();
    return dim3(tiles < sm_count ? tiles : sm_count);
  }

  // (head, batch) pairs per group: as many as keep their K and V within `l2_bytes`.
  static int l2_group(const FwdProblem& p, int element_bytes, long long l2_bytes) {
    const long long kv_bytes = 2LL * p.seqlen_k * p.head_dim * element_bytes / p.group_size();
    const long long g = kv_bytes > 0 ? l2_bytes / kv_bytes : p.heads_q * p.batch;
    return static_cast<int>(g < 1 ? 1 : (g > p.heads_q * p.batch ? p.heads_q * p.batch : g));
  }

  __host__ __device__ BlockCoord block_coord(int idx) const {
    const int per_group = group * m_blocks;
    const int g = idx / per_group, j = idx - g * per_group;
    const int left = pairs - g * group;
    const int pairs_here = group < left ? group : left;  // the last group may be smaller
    const int m_from_last = j / pairs_here;
    const int pair = g * group + (j - m_from_last * pairs_here);
    return BlockCoord{m_blocks - 1 - m_from_last, pair % heads, pair / heads};
  }
};

}  // namespace hfa::sm90
