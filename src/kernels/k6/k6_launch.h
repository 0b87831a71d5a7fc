// K6's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include "common/problem.h"
#include "kernels/k4/k4_launch.h"

namespace hfa::k6 {

// K4's tiles and ring depths (k4_launch.h): 128 x 128 x 5 stages at d = 64, 128 x 128 x 3 at
// d = 128, 128 x 64 x 2 at d = 256. With the intra-warpgroup overlap the next tile's S and this
// tile's P are live at once; they still fit 240 registers. A 192-key tile at d = 64 was measured
// and not kept (WORKLOG, K6).
using k4::block_n;
using k4::smem_bytes;
using k4::stages;

// The ablation of the FA3 paper's Table 2: k6 with both overlaps, and with one switched off.
enum class Variant { kFull, kNoPingPong, kNoIntraWarpgroupOverlap };

template <typename T, int D, Variant V>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k6_hdim<D>.cu

}  // namespace hfa::k6
