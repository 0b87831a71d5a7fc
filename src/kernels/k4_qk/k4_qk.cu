// K4.1's registry entry: k4_qk.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/status_util.h"
#include "kernels/common/dispatch.h"
#include "hfa_build_config.h"
#include "kernels/k4_qk/k4_qk_launch.h"
#include "kernels/sm90/common/sm90_checks.h"
#include "registry.h"

namespace hfa {
namespace {

Status k4_qk_check(const FwdProblem& p, const DeviceInfo& device) {
  return sm90::check_kernel("k4_qk", p, device, static_cast<long long>(k4_qk::smem_bytes(p.head_dim)));
}

struct K4QkLauncher {
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k4_qk::launch<T, D>(p, s); }
};

Status k4_qk_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  return cuda_status(dispatch_dtype_head_dim<K4QkLauncher>(p, stream), "launching k4_qk");
}

}  // namespace

KernelEntry k4_qk_entry() {
  KernelEntry e;
  e.name = "k4_qk";
  e.description = "K4.1: Q K^T on WGMMA (S laundered through SMEM), softmax and P V still on CUDA "
                  "cores; K3.3's TMA pipeline";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal, GQA/MQA, LSE; 16-byte "
               "aligned pointers and strides; sm90a (H100/H200)";
  e.check = k4_qk_check;
  e.launch = k4_qk_launch;
  return e;
}

}  // namespace hfa
