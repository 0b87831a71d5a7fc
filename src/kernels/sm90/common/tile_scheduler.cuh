// Tile schedulers: which (Q tile, head, batch) a CTA computes. A small duck-typed interface so a
// persistent scheduler (K6) can replace this one without touching the kernels:
//   static dim3 grid_shape(problem, block_m);  __device__ BlockCoord block_coord() const;
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

}  // namespace hfa::sm90
