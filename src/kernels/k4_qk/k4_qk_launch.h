// K4.1's host interface (no CuTe).
#pragma once

#include "kernels/k3/k3_launch.h"

namespace hfa::k4_qk {

// K3.3's ring depth where it fits (d <= 128); 2 stages at d = 256.
constexpr int stages_for(int head_dim) { return head_dim <= 128 ? 5 : 2; }
constexpr size_t smem_bytes(int head_dim) { return k3::smem_bytes(head_dim, stages_for(head_dim)); }

template <typename T, int D>
cudaError_t launch(const FwdProblem& p, cudaStream_t stream);  // k4_qk_hdim<D>.cu

}  // namespace hfa::k4_qk
