// Tile schedulers: which (Q tile, head, batch) a CTA computes. SingleTileScheduler: one CTA per
// tile (K3-K5). PersistentTileScheduler: one CTA per SM that walks many tiles in static rounds
// (K6, K7). DynamicTileScheduler: the same order taken from a counter, in L2-sized head groups
// whose size a host simulation of the walk picks (dynamic_order_group, tile_scheduler.cu; K6 and K7
// on long causal rows and sliding windows). Variable-length batches: varlen_scheduler.cuh.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "common/workspace_pool.h"

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

// Persistent CTAs (at most one per SM) walk one order of all tiles in rounds of gridDim.x tiles,
// in snake order: in round r, CTA c takes tile r * grid + c when r is even and
// r * grid + (grid - 1 - c) when r is odd.
//
// The order: (head, batch) pairs in groups of `group`, and inside a group the Q tiles from last
// to first with the group's pairs interleaved. So one round works on few heads (their K/V is read
// from DRAM about once and then served from L2), and with causal masking the longest tiles (the
// last Q tiles see the most keys) start first. Inside a group the rounds are sorted by length, so
// the snake gives every CTA a long and a short tile in turn: plain striding (c, c + grid, ...)
// gave CTA 0 the longest tile of every round, 2.3x the average work at d = 256, s = 16k.
// A group must span many rounds for that (group_size() sees to it).
struct PersistentTileScheduler {
  int m_blocks, pairs, heads, group;

  __host__ __device__ PersistentTileScheduler(const FwdProblem& p, int block_m, int group_)
      : m_blocks((p.seqlen_q + block_m - 1) / block_m), pairs(p.heads_q * p.batch),
        heads(p.heads_q), group(group_) {}

  __host__ __device__ int tiles() const { return m_blocks * pairs; }
  __host__ __device__ int rounds(int grid) const { return (tiles() + grid - 1) / grid; }
  // The tile CTA `cta` takes in `round` (may be >= tiles() in the last round: none).
  __host__ __device__ static int tile_index(int round, int cta, int grid) {
    return round * grid + (round % 2 == 0 ? cta : grid - 1 - cta);
  }

  static int grid_size(const FwdProblem& p, int block_m, int sm_count) {
    const int tiles = PersistentTileScheduler(p, block_m, 1).tiles();
    return tiles < sm_count ? tiles : sm_count;
  }

  // (head, batch) pairs per group.
  //  - Without causal masking, or with few Q tiles per pair (< 32): 1. Each pair's tiles are then
  //    consecutive, so a round's CTAs share their pair's K/V through L2 at the same time (tiles
  //    are equal, or too short to unbalance the CTAs). Grouping pairs at s = 512 (4 Q tiles
  //    each) spread a pair's tiles over rounds: ncu measured a 51% L2 hit rate and DRAM 50% busy.
  //  - Causal with long sequences: as many as keep their K and V within `l2_bytes`, and more if
  //    needed for 16 rounds of `grid` tiles per group: the snake balances only within rounds
  //    sorted by length, and each group boundary restarts the sort (simulated at d = 128,
  //    s = 16k: 3 pairs per group left the busiest CTA at 1.21x the mean work, 16 pairs 1.002x).
  //    But never more than grid / 4 pairs, so that each pair's K/V is still read by about four
  //    CTAs of a round at once, which start together and stream it in the same order: they share
  //    it through L2 even when the group's K/V outgrows L2 (with all 128 pairs in one group at
  //    d = 128, s = 2048 causal, one CTA per pair per round, k6 ran at 329 TFLOPS instead of 476).
  static constexpr int kMinRoundsPerCausalGroup = 16;
  static constexpr int kMinCtasPerPair = 4;
  // 32, not 16: at s = 2048 (16 Q tiles of 128) causal, pair-by-pair order measured +9.5% at
  // d = 64 and +7% at d = 256 over groups (+0.5% at d = 128), once k6's epilogue got short.
  static constexpr int kMinTilesForCausalGroups = 32;
  static int group_size(const FwdProblem& p, int block_m, int element_bytes, long long l2_bytes,
                        int grid) {
    const long long pairs = static_cast<long long>(p.heads_q) * p.batch;
    const long long m_blocks = (p.seqlen_q + block_m - 1) / block_m;
    if (!p.causal || m_blocks < kMinTilesForCausalGroups) return 1;
    const long long kv_bytes = 2LL * p.seqlen_k * p.head_dim * element_bytes / p.group_size();
    long long g = kv_bytes > 0 ? l2_bytes / kv_bytes : pairs;
    long long for_rounds =
        (kMinRoundsPerCausalGroup * static_cast<long long>(grid) + m_blocks - 1) / m_blocks;
    if (for_rounds > grid / kMinCtasPerPair) for_rounds = grid / kMinCtasPerPair;
    if (g < for_rounds) g = for_rounds;
    if (g < 1) g = 1;
    return static_cast<int>(g > pairs ? pairs : g);
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

// Heads per scheduler group for the dynamic orders (DynamicTileScheduler below, and
// VarlenTileScheduler, varlen_scheduler.cuh): without the causal mask 1 (each head's Q tiles
// together); with it, as many whole GQA groups of query heads as keep their K/V at seqlen_k keys
// (with a variable-length batch: max_seqlen_k) within l2_bytes, at least one group, at most every
// head. The static rounds cannot group this tightly (PersistentTileScheduler::group_size: their
// balance needs 16 rounds per group); taking tiles dynamically needs no such balance.
inline int l2_heads_per_group(const FwdProblem& p, int element_bytes, long long l2_bytes) {
  if (!p.causal) return 1;
  const long long kv_head_bytes = 2LL * p.seqlen_k * p.head_dim * element_bytes;
  long long kv_heads = kv_head_bytes > 0 ? l2_bytes / kv_head_bytes : p.heads_kv;
  if (kv_heads < 1) kv_heads = 1;
  if (kv_heads > p.heads_kv) kv_heads = p.heads_kv;
  return static_cast<int>(kv_heads) * p.group_size();
}

// PersistentTileScheduler's order (groups of (head, batch) pairs, each group's Q tiles from the
// last, its pairs interleaved), but taken dynamically: each CTA's producer takes the next tile
// index from a counter in global memory (fetch, one atomicAdd per tile) when its Q stage is free,
// so the groups can be as small as L2 wants (l2_heads_per_group) and the longest-first order
// within a group does the balancing. For dense problems under the causal mask with long rows,
// where the static rounds' 16-round groups read far more K/V per round than L2 holds (at
// d = 128, s = 16k: 17 heads, 136 MB; WORKLOG, "Dense causal in the dynamic order").
// One difference: the smaller group (pairs % group pairs) comes first, not last, so the walk
// ends on a whole group's shortest tiles. With the small group last, its longest tiles start in
// the final wave and the busiest CTA ends late (simulated, tests/cpu: 1.05x the mean work at
// d = 128, s = 16k, 16 heads in groups of 3; 1.16x at d = 256, s = 8k, 2 x 8 heads; small group
// first: 1.004x and 1.04x).
struct DynamicTileScheduler : PersistentTileScheduler {
  int* counter;  // zero at launch (with_tile_counter)

  __host__ __device__ DynamicTileScheduler(int* counter_, const FwdProblem& p, int block_m,
                                           int group_)
      : PersistentTileScheduler(p, block_m, group_), counter(counter_) {}
  // The next tile's index (>= tiles(): none left). One thread per CTA asks.
  __device__ int fetch() const { return atomicAdd(counter, 1); }
  __host__ __device__ BlockCoord block_coord(int idx) const {
    const int first = pairs % group;  // the smaller group's pairs (0: every group is whole)
    int pairs_here = first, pair_base = 0, j = idx;
    if (idx >= first * m_blocks) {
      const int per_group = group * m_blocks, r = idx - first * m_blocks;
      const int g = r / per_group;
      j = r - g * per_group;
      pairs_here = group;
      pair_base = first + g * group;
    }
    const int m_from_last = j / pairs_here;
    const int pair = pair_base + (j - m_from_last * pairs_here);
    return BlockCoord{m_blocks - 1 - m_from_last, pair % heads, pair / heads};
  }
};

// The group size for DynamicTileScheduler on a dense problem (tile_scheduler.cu). Under the
// causal mask or a sliding window: of the sizes L2 allows (whole GQA groups), the largest whose
// walk ends within 0.5% of the most even one. How the last group's tiles fall on the CTAs depends
// on the size when a group has few tiles next to the grid, or when its tiles differ in length:
// simulated (dynamic_order_imbalance), the busiest CTA does 1.04x the mean work in L2's groups of
// 3 and 1.004x in groups of 2 at d = 256, causal, s = 8k, 2 x 8 heads; 1.03x (groups of 6) and
// 1.001x (4) at s = 4k, 4 x 8 heads; with a window of 4096 at 16k, head by head (what windows took
// before) 1.025x at d = 128 and 1.044x at d = 256, in groups of 8 1.001x and 1.007x. Without a
// mask: 1 (equal tiles; each head's together). Remembered per shape, so a launch simulates once;
// past 2^17 simulated tiles (~5 ms of host time), L2's size.
int dynamic_order_group(const FwdProblem& p, int block_m, int block_n, int grid, int element_bytes,
                        long long l2_bytes);
// The busiest of `grid` CTAs' work over the mean when they take DynamicTileScheduler's walk in
// groups of `group` pairs, each tile going to whichever CTA is free first; a tile costs the KV
// tiles it visits plus one (its Q load, prologue and epilogue, about one KV tile's time).
double dynamic_order_imbalance(const FwdProblem& p, int block_m, int block_n, int grid, int group);

// A zeroed int in a stream-ordered workspace for launch(int* counter), freed on the stream after
// it (DynamicTileScheduler's counter).
template <class Launch>
cudaError_t with_tile_counter(cudaStream_t stream, const Launch& launch) {
  int* counter = nullptr;
  cudaError_t err = workspace_alloc(&counter, sizeof(int), stream);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(counter, 0, sizeof(int), stream);
  if (err == cudaSuccess) err = launch(counter);
  const cudaError_t freed = workspace_free(counter, stream);
  return err != cudaSuccess ? err : freed;
}

}  // namespace hfa::sm90
