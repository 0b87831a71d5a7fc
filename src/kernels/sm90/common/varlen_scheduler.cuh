// The persistent kernels' tile order for variable-length batches (FwdProblem::varlen()).
//
// Why not PersistentTileScheduler: it walks (Q tile, head, batch) slots sized by max_seqlen_q,
// so a short sequence leaves most of its slots empty and each CTA's share of the real work
// depends on where they fall. Simulated on 16k tokens in 8-9 sequences of 100..4000 (d = 128,
// 16 heads, 132 CTAs), the busiest CTA had 1.14-1.24x the mean work without the causal mask and
// 1.24-1.40x with it; k6 measured 0.92x (non-causal) and 0.74x (causal) the TFLOPS of the dense
// batch at the mean length (docs/WORKLOG.md, "Variable-length batches").
//
// Instead a small planning kernel (plan_varlen_tiles, one CTA) lists the batch's real Q tiles
// (sequence, Q tile) in descending order of the KV tiles each visits (its Mask's range: with the
// causal mask a tile's position, without it its sequence's length), by a counting sort on that
// count; the main kernel walks (list entry, head) in the snake rounds of PersistentTileScheduler.
// Longest first over all sequences: simulated 1.01-1.05x the mean work on the same batches.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "common/problem.h"
#include "kernels/common/varlen.cuh"
#include "kernels/sm90/common/mask.cuh"
#include "kernels/sm90/common/tile_scheduler.cuh"

namespace hfa::sm90 {

// The sort's keys: KV tiles per Q tile; tiles that visit more share the last bin (sequences of
// over 130k keys: all long, their order among themselves matters little).
constexpr int kVarlenPlanThreads = 1024, kVarlenKeyBins = 1024;

// The plan's size in ints: the entry count, then (batch, m_block) per entry. Each sequence adds
// at most one Q tile more than its share of total_q / block_m.
inline size_t varlen_plan_ints(const FwdProblem& p, int block_m) {
  return 2 + 2 * (static_cast<size_t>(p.total_q) / block_m + 1 + static_cast<size_t>(p.batch));
}

// One CTA of kVarlenPlanThreads: plan[0] = the number of Q tiles, plan[2 + 2 i] and
// plan[3 + 2 i] the batch and Q tile of entry i, most KV tiles first. A warp per sequence, its
// lanes over the sequence's Q tiles; the order within one key is whatever the atomics give (each
// tile's result does not depend on where it runs).
template <class Mask>
__global__ void __launch_bounds__(kVarlenPlanThreads)
    plan_varlen_tiles(const __grid_constant__ FwdProblem p, int block_m, int block_n, int* plan) {
  static_assert(kVarlenPlanThreads == kVarlenKeyBins, "one bin per thread in the scan");
  using Scan = cub::BlockScan<int, kVarlenPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int bins[kVarlenKeyBins];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  bins[t] = 0;
  __syncthreads();
  auto for_each_tile = [&](auto&& f) {
    for (int b = warp; b < p.batch; b += kVarlenPlanThreads / 32) {
      const SequenceSpan span = sequence_span(p, b);
      FwdProblem s = p;  // the lengths are all Mask::range reads
      s.seqlen_q = span.seqlen_q;
      s.seqlen_k = span.seqlen_k;
      const int n = (s.seqlen_q + block_m - 1) / block_m;
      for (int m = lane; m < n; m += 32) {
        const KvRange r = Mask::range(s, m * block_m, block_m, block_n);
        f(b, m, min(max(r.end - r.begin, 0), kVarlenKeyBins - 1));
      }
    }
  };
  for_each_tile([&](int, int, int key) { atomicAdd(&bins[key], 1); });
  __syncthreads();
  // Exclusive prefix sums from the largest key down: thread t holds bin kVarlenKeyBins - 1 - t.
  const int count = bins[kVarlenKeyBins - 1 - t];
  int before = 0, total = 0;
  Scan(scan).ExclusiveSum(count, before, total);
  __syncthreads();  // every count is read before any bin becomes an offset
  bins[kVarlenKeyBins - 1 - t] = before;
  if (t == 0) plan[0] = total;
  __syncthreads();
  for_each_tile([&](int b, int m, int key) {
    const int at = atomicAdd(&bins[key], 1);
    plan[2 + 2 * at] = b;
    plan[3 + 2 * at] = m;
  });
}

// The main kernel's side: PersistentTileScheduler's interface (rounds, tile_index, tiles,
// block_coord) over the plan's (entry, head) pairs, the heads of one entry consecutive (they
// share the sequence's rows: GQA's query heads also its K/V).
struct VarlenTileScheduler {
  const int* plan;
  int heads, tile_count;

  __device__ VarlenTileScheduler(const int* plan_, int heads_)
      : plan(plan_), heads(heads_), tile_count(plan_[0] * heads_) {}

  __device__ int tiles() const { return tile_count; }
  __device__ int rounds(int grid) const { return (tile_count + grid - 1) / grid; }
  __device__ static int tile_index(int round, int cta, int grid) {
    return PersistentTileScheduler::tile_index(round, cta, grid);
  }
  __device__ BlockCoord block_coord(int idx) const {
    const int entry = idx / heads;
    return BlockCoord{plan[3 + 2 * entry], idx - entry * heads, plan[2 + 2 * entry]};
  }
};

// Plans p's tiles (plan_varlen_tiles) into a stream-ordered workspace and calls
// launch(const int* plan), then frees the workspace on the stream.
template <class Mask, class Launch>
cudaError_t with_varlen_plan(const FwdProblem& p, int block_m, int block_n, cudaStream_t stream,
                             const Launch& launch) {
  int* plan = nullptr;
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&plan),
                                    varlen_plan_ints(p, block_m) * sizeof(int), stream);
  if (err != cudaSuccess) return err;
  plan_varlen_tiles<Mask><<<1, kVarlenPlanThreads, 0, stream>>>(p, block_m, block_n, plan);
  err = cudaGetLastError();
  if (err == cudaSuccess) err = launch(static_cast<const int*>(plan));
  const cudaError_t freed = cudaFreeAsync(plan, stream);
  return err != cudaSuccess ? err : freed;
}

}  // namespace hfa::sm90
