// K3's host interface, free of CuTe so the registry entry compiles as plain CUDA/C++.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k3 {

// Shared memory of the K3 skeleton: Q tile + Stages x (K tile + V tile), 64 x D elements of 2
// bytes each, the fp32 S/P tile (64 x 68), barriers, and 1024 bytes of alignment slack.
// 0 when it exceeds an H100 block's 227 KB (the configuration is then not built).
constexpr size_t smem_bytes(int head_dim, int stages) {
  const size_t tile = size_t{64} * head_dim * 2;
  const size_t bytes = (1 + 2 * size_t(stages)) * tile + 64 * 68 * 4 + 1024 + 1024;
  return bytes <= 232448 ? bytes : 0;
}

template <typename T, int D, int Stages>
cudaError_t launch(const FwdProblem& p, cudaStream_t stream);  // k3_hdim<D>.cu

}  // namespace hfa::k3
