// The persistent kernels' tile order for variable-length batches (FwdProblem::varlen()).
//
// Why not PersistentTileScheduler: it walks (Q tile, head, batch) slots sized by max_seqlen_q,
// so a short sequence leaves most of its slots empty and each CTA's share of the real work
// depends on where they fall. Simulated on 16k tokens in 8-9 sequences of 100..4000 (d = 128,
// 16 heads, 132 CTAs), the busiest CTA had 1.14-1.24x the mean work without the causal mask and
// 1.24-1.40x with it; k6 measured 0.92x (non-causal) and 0.74x (causal) the TFLOPS of the dense
// batch at the mean length (docs/WORKLOG.md, "Variable-length batches").
//
// A first plan listed every sequence's Q tiles longest first across sequences, walked in the
// static snake rounds: balanced (1.01-1.05x simulated) but each round mixed ~8 sequences' tiles,
// so a (sequence, head)'s K/V was read by about one CTA at a time, from DRAM (causal: 0.80x
// FlashAttention-3). Now the plan (plan_varlen_tiles, one CTA) lists the sequences in descending
// order of their last Q tile's KV tiles, each sequence's Q tiles from its last to its first (under
// the causal mask, the most KV tiles first), and the CTAs take (entry, head)
// pairs from that list dynamically (an atomic counter in the plan, VarlenTileScheduler::fetch):
// the CTAs working at one time share one or two sequences' K/V through L2, and whoever is free
// takes the next tile (simulated 1.006-1.016x the mean work on the same batches; in static rounds
// this order gave 1.25-1.37x). Measured (H100, 16k tokens in 100..4000, against FlashAttention-3's
// varlen): causal 0.99-1.01x at d = 128 (from 0.80-0.82x) and 1.00-1.05x at d = 256; without the
// causal mask, where the old order already shared each sequence's K/V, 1-3% slower than it was
// (docs/WORKLOG.md, session 24, also for what was tried and dropped).
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "common/problem.h"
#include "common/workspace_pool.h"
#include "kernels/common/varlen.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"

namespace hfa::sm90 {

// The sort's keys: KV tiles of a sequence's last Q tile; sequences whose tiles visit more share
// the last bin (over 130k keys: all long, their order among themselves matters little).
constexpr int kVarlenPlanThreads = 1024, kVarlenKeyBins = 1024;

// The plan's most entries: each sequence adds at most one Q tile more than its share of
// total_q / block_m.
__host__ __device__ inline size_t varlen_plan_entries(const FwdProblem& p, int block_m) {
  return static_cast<size_t>(p.total_q) / block_m + 1 + static_cast<size_t>(p.batch);
}
// The plan's size in ints: the entry count, the tile counter, (batch, m_block) per entry, then
// scratch for the planning kernel: the sequences by rank and each sequence's first entry.
inline size_t varlen_plan_ints(const FwdProblem& p, int block_m) {
  return 2 + 2 * varlen_plan_entries(p, block_m) + 2 * static_cast<size_t>(p.batch);
}

// One CTA of kVarlenPlanThreads writes the plan: plan[0] = the number of Q tiles, plan[1] = 0 (the
// counter the main kernel's CTAs take tiles with), plan[2 + 2 i] and plan[3 + 2 i] the batch and
// Q tile of entry i. The sequences in descending order of their last Q tile's KV tiles (the
// Mask's range; a counting sort, equal keys in whatever order the atomics give), each one's
// tiles consecutive from its last to its first (under the causal mask the most KV tiles first;
// without it or with a window they are equal but for the first few). Device values of cu_seqlens
// that make sequences overlap could ask for more entries than varlen_plan_entries: those past it
// are dropped (their rows are not written), never stored past the plan.
template <class Mask>
__global__ void __launch_bounds__(kVarlenPlanThreads)
    plan_varlen_tiles(const __grid_constant__ FwdProblem p, int block_m, int block_n, int* plan) {
  static_assert(kVarlenPlanThreads == kVarlenKeyBins, "one bin per thread in the scan");
  using Scan = cub::BlockScan<int, kVarlenPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int bins[kVarlenKeyBins];
  __shared__ int carry;
  const int t = threadIdx.x;
  int* by_rank = plan + 2 + 2 * varlen_plan_entries(p, block_m);  // rank -> sequence
  int* first_entry = by_rank + p.batch;                            // sequence -> its first entry
  // Sequence b as the Mask sees it (only the lengths differ), and its Q tile count.
  auto view = [&](int b, int* tiles) {
    const SequenceSpan span = sequence_span(p, b);
    FwdProblem s = p;
    s.seqlen_q = span.seqlen_q;
    s.seqlen_k = span.seqlen_k;
    *tiles = (span.seqlen_q + block_m - 1) / block_m;
    return s;
  };
  auto key_of = [&](int b) {
    int tiles;
    const FwdProblem s = view(b, &tiles);
    if (tiles == 0) return 0;
    const KvRange r = Mask::range(s, (tiles - 1) * block_m, block_m, block_n);
    return min(max(r.end - r.begin, 0), kVarlenKeyBins - 1);
  };
  // 1. Ranks: count the keys, scan from the largest key down, scatter.
  bins[t] = 0;
  __syncthreads();
  for (int b = t; b < p.batch; b += kVarlenPlanThreads) atomicAdd(&bins[key_of(b)], 1);
  __syncthreads();
  {
    const int count = bins[kVarlenKeyBins - 1 - t];
    int before = 0, total = 0;
    Scan(scan).ExclusiveSum(count, before, total);
    __syncthreads();  // every count is read before any bin becomes an offset
    bins[kVarlenKeyBins - 1 - t] = before;
  }
  __syncthreads();
  for (int b = t; b < p.batch; b += kVarlenPlanThreads) by_rank[atomicAdd(&bins[key_of(b)], 1)] = b;
  __syncthreads();  // the CTA's global writes before its reads below
  // 2. Each sequence's first entry: the tile counts summed over the ranks before it, a rank per
  //    thread in chunks, with the carry between chunks.
  if (t == 0) carry = 0;
  __syncthreads();
  for (int r0 = 0; r0 < p.batch; r0 += kVarlenPlanThreads) {
    const int r = r0 + t;
    int tiles = 0;
    if (r < p.batch) view(by_rank[r], &tiles);
    int before = 0, total = 0;
    Scan(scan).ExclusiveSum(tiles, before, total);
    if (r < p.batch) first_entry[by_rank[r]] = carry + before;
    __syncthreads();  // every thread has read carry (and the scan's storage is free again)
    if (t == 0) carry += total;
    __syncthreads();
  }
  const int capacity = static_cast<int>(varlen_plan_entries(p, block_m));
  if (t == 0) {
    plan[0] = min(carry, capacity);
    plan[1] = 0;
  }
  // 3. The entries: a warp per sequence, its lanes over the tiles.
  const int warp = t / 32, lane = t % 32;
  for (int b = warp; b < p.batch; b += kVarlenPlanThreads / 32) {
    int tiles;
    view(b, &tiles);
    const int first = first_entry[b];
    for (int m = lane; m < tiles; m += 32) {
      const int at = first + (tiles - 1 - m);
      if (at >= capacity) continue;
      plan[2 + 2 * at] = b;
      plan[3 + 2 * at] = m;
    }
  }
}

// The main kernel's side: the plan's (entry, head) pairs, taken one at a time by whichever CTA's
// producer asks next (fetch: the plan's counter). Within each sequence's stretch of pair indices
// [first entry * heads, (first entry + tiles) * heads) the heads go in groups of
// `heads_per_group` (l2_heads_per_group, tile_scheduler.cuh), one group after another; in a
// group, entry by entry (the sequence's Q tiles from its last), the group's heads of one entry
// consecutive. So:
//  - without the causal mask, groups of one head: each (sequence, head)'s Q tiles together, as the
//    dense order has them (its tiles are equal work); a round of CTAs reads one or two heads' K/V,
//    from L2. (All heads of an entry together, as before: at one sequence of 16k keys and 16 heads
//    a round of 132 tiles covered ~8 Q tiles of every head, 128 MB of K/V, more than L2 holds.)
//  - with it, groups of as many heads as keep their K/V within the L2 budget: the longest Q tiles
//    of the group first, for balance (the dynamic assignment evens out the rest), while the CTAs
//    working at one time share the group's K/V through L2.
//    When the heads do not divide into whole groups, the smaller group comes first, so that a
//    sequence ends on a whole group's short tiles (as in DynamicTileScheduler, tile_scheduler.cuh).
// A sequence whose entries were cut by the plan's capacity (device cu_seqlens that overlap;
// plan_varlen_tiles) keeps one group of every head.
struct VarlenTileScheduler {
  const int* plan;
  const int* first_entry;  // the plan's scratch: sequence -> its first entry
  int* counter;
  int heads, entries, tile_count, heads_per_group;

  __host__ __device__ VarlenTileScheduler(int* plan_, const FwdProblem& p, int block_m,
                                          int heads_per_group_)
      : plan(plan_), first_entry(plan_ + 2 + 2 * varlen_plan_entries(p, block_m) + p.batch),
        counter(plan_ + 1), heads(p.heads_q), entries(plan_[0]), tile_count(plan_[0] * p.heads_q),
        heads_per_group(heads_per_group_ < 1 ? 1 : heads_per_group_) {}

  __host__ __device__ int tiles() const { return tile_count; }
  // The next pair's index (>= tiles(): none left). One thread per CTA asks.
  __device__ int fetch() const { return atomicAdd(counter, 1); }
  __host__ __device__ BlockCoord block_coord(int idx) const {
    int entry = idx / heads, head = idx - entry * heads;
    if (heads_per_group < heads) {
      // entry lies in the stretch of its sequence b; its first entry holds the last Q tile.
      const int b = plan[2 + 2 * entry];
      const int first = first_entry[b];
      const int tiles = plan[3 + 2 * first] + 1;
      if (first + tiles <= entries) {
        // The smaller group (heads % heads_per_group heads) first, as DynamicTileScheduler's.
        const int smaller = heads % heads_per_group;
        int in_group = idx - first * heads, heads_here = smaller, head_base = 0;
        if (in_group >= smaller * tiles) {
          const int r = in_group - smaller * tiles, group_span = tiles * heads_per_group;
          const int g = r / group_span;
          in_group = r - g * group_span;
          heads_here = heads_per_group;
          head_base = smaller + g * heads_per_group;
        }
        const int step = in_group / heads_here;
        entry = first + step;
        head = head_base + (in_group - step * heads_here);
      }
    }
    return BlockCoord{plan[3 + 2 * entry], head, plan[2 + 2 * entry]};
  }
};

// Plans p's tiles (plan_varlen_tiles) into a stream-ordered workspace and calls launch(int* plan),
// then frees the workspace on the stream.
template <class Mask, class Launch>
cudaError_t with_varlen_plan(const FwdProblem& p, int block_m, int block_n, cudaStream_t stream,
                             const Launch& launch) {
  int* plan = nullptr;
  cudaError_t err = workspace_alloc(&plan, varlen_plan_ints(p, block_m) * sizeof(int), stream);
  if (err != cudaSuccess) return err;
  plan_varlen_tiles<Mask><<<1, kVarlenPlanThreads, 0, stream>>>(p, block_m, block_n, plan);
  err = cudaGetLastError();
  if (err == cudaSuccess) err = launch(plan);
  const cudaError_t freed = workspace_free(plan, stream);
  return err != cudaSuccess ? err : freed;
}

}  // namespace hfa::sm90
