// The exact merge of partial attention results (hfa::merge_attention; flash decode's split results).
// With O_i, LSE_i a query row's output and log-sum-exp over key set i (the sets disjoint), the row
// over all the keys is
//   LSE = log sum_i exp(LSE_i),   O = sum_i exp(LSE_i - LSE) O_i,
// computed in fp32. A part with LSE_i = -inf saw no key: weight 0, its O is not read. A row whose
// every part saw no key gets O = 0, LSE = -inf.
//
// Few parts (num_parts <= kWarpRowMaxParts: context parallelism's blocks, flash decode at large
// batch): merge_rows_kernel, a warp per row and 4 rows per CTA; the lanes hold the parts' LSEs and
// every part's load of a row is issued before the sums, with no block-wide synchronization. A CTA
// per row, as below, spent most of its short life in its four __syncthreads: at 262k rows of 2
// parts (a 32k sequence over 2 GPUs) about 0.5 ms.
//
// Many parts: merge_kernel, one CTA per output row (b, token, head). The row's D columns are read
// 4 at a time by D / 4 threads, and the CTA's kGroups such groups take every kGroups-th part:
// flash decode's partial results come from L2, and a loop of one dependent load per part (the
// first version: a warp per row) took 12 us at 33 splits, as long as the split kernel's own 8k
// keys. The first 40 parts' O are loaded together with the LSEs, before the weights exist (a
// part's load does not depend on its weight; accumulate_part drops what a weight of 0 multiplies),
// so that a batch-1 decode step's merge waits for one L2 round trip; parts past them follow
// kUnroll at a time. Every read of a row's parts happens before its first write (a
// __syncthreads between), so out may be one of the parts.
//
// Each kernel's work on one row is a device function (merge_row_by_warp, merge_row_by_cta) that
// flash decode's split kernel also calls when it merges its splits inside its own grid
// (decode_merge.cuh: merge_splits_in_grid), so that both paths give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/merge/merge_problem.h"

namespace hfa::merge {

inline constexpr float kLog2e = 1.4426950408889634f;

// Four consecutive elements of T as floats (read through L2, as load4_early below), and back (8
// bytes for bf16/fp16, 16 for fp32).
template <typename T> __device__ __forceinline__ float4 load4(const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    return __ldcg(reinterpret_cast<const float4*>(src));
  } else {
    const uint2 raw = __ldcg(reinterpret_cast<const uint2*>(src));
    const T* e = reinterpret_cast<const T*>(&raw);
    return make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
  }
}
// load4, issued where it stands: an ordinary load whose value only a weight != 0 uses is sunk by
// the compiler below the weights' reductions (and predicated on the weight), which is the wait this
// is meant to avoid; a volatile asm stays in place. Through L2 (.cg): flash decode's merge in its
// split grid reads parts that other SMs wrote in the same kernel (below).
template <typename T> __device__ __forceinline__ float4 load4_early(const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(src));
    return v;
  } else {
    uint2 raw;
    asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];\n" : "=r"(raw.x), "=r"(raw.y) : "l"(src));
    const T* e = reinterpret_cast<const T*>(&raw);
    return make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
  }
}
template <typename T> __device__ __forceinline__ void store4(T* dst, float4 v) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    __align__(8) T quad[4] = {from_float<T>(v.x), from_float<T>(v.y), from_float<T>(v.z), from_float<T>(v.w)};
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(quad);
  }
}

inline constexpr int kMergeThreads = 128;
inline constexpr int kWarpRowMaxParts = 8;

// acc += w v for one part, whose O was loaded before its weight w was known: a part that saw no key
// (or a negligible one) has w = 0, and its O may hold anything (NaN), so it adds nothing. The
// arithmetic is that of loading only the parts of nonzero weight: the same bits either way.
__device__ __forceinline__ void accumulate_part(float4& acc, float w, float4 v) {
  if (w == 0.f) v = make_float4(0.f, 0.f, 0.f, 0.f);
  acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
}

// (b, token, head) of output row `row`, head fastest.
struct RowIndex {
  int b, token, head;
  __device__ RowIndex(const MergeProblem& p, int64_t row)
      : b(static_cast<int>(row / (static_cast<int64_t>(p.heads) * p.seqlen))),
        token(static_cast<int>((row / p.heads) % p.seqlen)),
        head(static_cast<int>(row % p.heads)) {}
};

// One output row merged by one warp (merge_rows_kernel; flash decode's merge in its split grid):
// the parts' LSEs one per lane, so num_parts <= kWarpRowMaxParts.
template <typename TPart, typename TOut, int D>
__device__ __forceinline__ void merge_row_by_warp(const MergeProblem& p, int64_t row, int lane) {
  constexpr int kPasses = (D + 127) / 128;  // 4 columns per lane a pass
  const RowIndex r(p, row);
  const float lse_lane = lane < p.num_parts
                             ? __ldcg(&p.lse_parts[lane * p.lse_part_stride + r.b * p.lse_batch_stride +
                                                   r.head * p.lse_head_stride + r.token * p.lse_row_stride])
                             : -INFINITY;
  const TPart* src = static_cast<const TPart*>(p.o_parts) + r.b * p.o_batch_stride +
                     r.token * p.o_row_stride + r.head * p.o_head_stride;
  // Every part's O is loaded before its weight is known, not only those of nonzero weight after
  // it. (ptxas issues these loads after the first shuffle, which waits for the LSE: they overlap
  // the rest of the reduction, not the LSE's round trip; forcing them before it measured no faster,
  // WORKLOG "Flash decode", session 52.)
  float4 v[kPasses][kWarpRowMaxParts];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int col = pass * 128 + 4 * lane;
#pragma unroll
    for (int s = 0; s < kWarpRowMaxParts; ++s)
      v[pass][s] = col < D && s < p.num_parts ? load4_early(src + s * p.o_part_stride + col)
                                              : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float mx = lse_lane;
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = mx == -INFINITY ? 0.f : exp2_approx((lse_lane - mx) * kLog2e);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float lse = mx == -INFINITY ? -INFINITY : mx + logf(sum);
  const float w_lane = mx == -INFINITY ? 0.f : exp2_approx((lse_lane - lse) * kLog2e);
  float w[kWarpRowMaxParts];
#pragma unroll
  for (int s = 0; s < kWarpRowMaxParts; ++s) w[s] = __shfl_sync(0xffffffffu, w_lane, s);  // 0 past num_parts

  TOut* dst = static_cast<TOut*>(p.out) + r.b * p.out_batch_stride + r.token * p.out_row_stride +
              r.head * p.out_head_stride;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int col = pass * 128 + 4 * lane;
    if (col >= D) break;  // D = 64: half the lanes
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kWarpRowMaxParts; ++s) accumulate_part(acc, w[s], v[pass][s]);
    store4(dst + col, acc);  // after this lane's reads of the same columns: out may be a part
  }
  if (p.lse && lane == 0)
    p.lse[r.b * p.lse_out_batch_stride + r.head * p.lse_out_head_stride + r.token * p.lse_out_row_stride] = lse;
}

template <typename TPart, typename TOut, int D>
__global__ void __launch_bounds__(kMergeThreads) merge_rows_kernel(MergeProblem p) {
  constexpr int kWarps = kMergeThreads / 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  wait_for_prerequisite_grid();  // as flash decode's dependent: its split results are complete
  if (row >= p.rows()) return;   // the whole warp
  merge_row_by_warp<TPart, TOut, D>(p, row, threadIdx.x % 32);
}

// The shared memory of merge_row_by_cta (a static array in merge_kernel; flash decode's split
// kernel lends it part of its K/V ring).
template <int D>
struct MergeRowStorage {
  static constexpr int kColThreads = D / 4, kGroups = kMergeThreads / kColThreads;
  float weights[kMaxMergeParts];
  float warp_partial[kMergeThreads / 32];
  float4 group_acc[kGroups][kColThreads];
};

// One output row merged by a CTA of kMergeThreads threads (merge_kernel; flash decode's merge in
// its split grid). The CTA's threads all call it; it begins and ends with no thread reading `st`
// that another may write next (a caller that loops over rows needs no barrier between them), and
// every read of the row's parts comes before its first write of out (a __syncthreads between),
// so out may be one of the parts.
template <typename TPart, typename TOut, int D>
__device__ __forceinline__ void merge_row_by_cta(const MergeProblem& p, int64_t row, MergeRowStorage<D>& st) {
  constexpr int kThreads = kMergeThreads, kWarps = kThreads / 32;
  constexpr int kColThreads = MergeRowStorage<D>::kColThreads, kGroups = MergeRowStorage<D>::kGroups;
  constexpr int kUnroll = 4;
  constexpr int kEarlyParts = 40, kEarly = kEarlyParts / kGroups;  // 5 / 10 / 20 a thread at D = 64 / 128 / 256
  constexpr int kLsePerThread = kMaxMergeParts / kThreads;
  static_assert(kThreads % kColThreads == 0 && kMaxMergeParts % kThreads == 0, "thread layout");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const RowIndex r(p, row);  // (b, token, head), head fastest
  const int head = r.head, token = r.token, b = r.b;
  const int group = threadIdx.x / kColThreads, c4 = threadIdx.x % kColThreads;
  const TPart* src = static_cast<const TPart*>(p.o_parts) + b * p.o_batch_stride +
                     token * p.o_row_stride + head * p.o_head_stride + 4 * c4;
  // The first kEarly parts of this thread's group, loaded beside the LSEs before their weights
  // are known: the row then waits for one L2 round trip, not one for the LSEs and one per
  // kGroups x kUnroll parts after them (flash decode's split counts, at most 33 at batch 1,
  // are all early at every head dim).
  float4 early[kEarly];
#pragma unroll
  for (int i = 0; i < kEarly; ++i) {
    const int s = group + i * kGroups;
    early[i] = s < p.num_parts ? load4_early(src + s * p.o_part_stride) : make_float4(0.f, 0.f, 0.f, 0.f);
  }

  // The block's max and sum of one value per thread (all threads take part).
  auto block_reduce = [&](float v, bool is_max) {
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) st.warp_partial[warp] = v;
    __syncthreads();
    v = st.warp_partial[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = is_max ? fmaxf(v, st.warp_partial[w]) : v + st.warp_partial[w];
    __syncthreads();  // warp_partial is reused by the next reduction
    return v;
  };
  const float* lse_row = p.lse_parts + b * p.lse_batch_stride + head * p.lse_head_stride +
                         token * p.lse_row_stride;
  float lse_s[kLsePerThread];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kLsePerThread; ++i) {
    const int s = threadIdx.x + kThreads * i;
    lse_s[i] = s < p.num_parts ? __ldcg(&lse_row[s * p.lse_part_stride]) : -INFINITY;
    mx = fmaxf(mx, lse_s[i]);
  }
  mx = block_reduce(mx, true);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kLsePerThread; ++i) sum += mx == -INFINITY ? 0.f : exp2_approx((lse_s[i] - mx) * kLog2e);
  sum = block_reduce(sum, false);
  const float lse = mx == -INFINITY ? -INFINITY : mx + logf(sum);
#pragma unroll
  for (int i = 0; i < kLsePerThread; ++i) {
    const int s = threadIdx.x + kThreads * i;
    if (s < p.num_parts) st.weights[s] = mx == -INFINITY ? 0.f : exp2_approx((lse_s[i] - lse) * kLog2e);
  }
  __syncthreads();

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kEarly; ++i) {
    const int s = group + i * kGroups;
    accumulate_part(acc, s < p.num_parts ? st.weights[s] : 0.f, early[i]);
  }
  // The parts past the early ones, in the same order (each group's parts by increasing index).
  for (int s0 = group + kEarly * kGroups; s0 < p.num_parts; s0 += kGroups * kUnroll) {
    float w[kUnroll];
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // the loads first, then the sums: kUnroll in flight
      const int s = s0 + u * kGroups;
      w[u] = s < p.num_parts ? st.weights[s] : 0.f;
      // a part that saw no key (or a negligible one) has weight 0: its O is not read
      v[u] = w[u] != 0.f ? load4(src + s * p.o_part_stride) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) accumulate_part(acc, w[u], v[u]);
  }
  st.group_acc[group][c4] = acc;
  __syncthreads();  // every read of the parts is done: out may alias one of them
  if (group == 0) {
#pragma unroll
    for (int g = 1; g < kGroups; ++g) {
      const float4 a = st.group_acc[g][c4];
      acc.x += a.x, acc.y += a.y, acc.z += a.z, acc.w += a.w;
    }
    store4(static_cast<TOut*>(p.out) + b * p.out_batch_stride + token * p.out_row_stride +
               head * p.out_head_stride + 4 * c4,
           acc);
  }
  if (p.lse && threadIdx.x == 0)
    p.lse[b * p.lse_out_batch_stride + head * p.lse_out_head_stride + token * p.lse_out_row_stride] = lse;
}

template <typename TPart, typename TOut, int D>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(MergeProblem p) {
  __shared__ MergeRowStorage<D> storage;
  wait_for_prerequisite_grid();  // as flash decode's dependent: its split results are complete
  merge_row_by_cta<TPart, TOut, D>(p, blockIdx.x, storage);  // a CTA per output row
}

}  // namespace hfa::merge
