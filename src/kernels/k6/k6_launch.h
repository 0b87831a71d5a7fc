// K6's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k6 {

// Keys per KV tile and ring depth per head dim (Q tile: 128 rows). The same as K4/K5 for now:
// the largest that fit 227 KB of shared memory and, with the next tile's S and this tile's P
// live at once (the intra-warpgroup overlap), 240 registers per consumer thread.
constexpr int block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }
constexpr int stages(int head_dim) { return head_dim <= 64 ? 5 : (head_dim <= 128 ? 3 : 2); }
constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{128} * head_dim * 2, kv = static_cast<size_t>(block_n(head_dim)) * head_dim * 2;
  const size_t bytes = q + 2 * stages(head_dim) * kv + 1024 + 1024;  // barriers, alignment slack
  return bytes <= 232448 ? bytes : 0;
}

// The ablation of the FA3 paper's Table 2: k6 with both overlaps, and with one switched off.
enum class Variant { kFull, kNoPingPong, kNoIntraWarpgroupOverlap };

template <typename T, int D, Variant V>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k6_hdim<D>.cu

}  // namespace hfa::k6
