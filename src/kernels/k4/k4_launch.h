// K4's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k4 {

// Keys per KV tile and ring depth per head dim: the largest that fit 227 KB of shared memory
// (Q tile 128 x d + stages x (K + V tiles)) and 255 registers (S and O fragments).
constexpr int block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }
constexpr int stages(int head_dim) { return head_dim <= 64 ? 5 : (head_dim <= 128 ? 3 : 2); }
constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{128} * head_dim * 2, kv = static_cast<size_t>(block_n(head_dim)) * head_dim * 2;
  const size_t bytes = q + 2 * stages(head_dim) * kv + 1024 + 1024;  // barriers, alignment slack
  return bytes <= 232448 ? bytes : 0;
}

template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k4_hdim<D>.cu

}  // namespace hfa::k4
