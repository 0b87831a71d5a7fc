// K4.1's registry entry: k4_qk.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/status_util.h"
#include "hfa_build_config.h"
#include "kernels/k4_qk/k4_qk_launch.h"
#include "kernels/sm90/common/sm90_checks.h"
#include "registry.h"

namespace hfa {
namespace {

Status k4_qk_check(const FwdProblem& p, const DeviceInfo& device) {
  return sm90::check_kernel("k4_qk", p, device, static_cast<long long>(k4_qk::smem_bytes(p.head_dim)));
}

Status k4_qk_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
#define HFA_K4QK_LAUNCH(D)                                                                 \
  if (p.head_dim == D)                                                                      \
    err = bf16 ? k4_qk::launch<__nv_bfloat16, D>(p, stream) : k4_qk::launch<__half, D>(p, stream);
  HFA_FOR_EACH_HEAD_DIM(HFA_K4QK_LAUNCH)
#undef HFA_K4QK_LAUNCH
  return cuda_status(err, "launching k4_qk");
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
