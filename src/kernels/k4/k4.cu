// K4's registry entry: k4.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/status_util.h"
#include "kernels/common/dispatch.h"
#include "hfa_build_config.h"
#include "kernels/k4/k4_launch.h"
#include "kernels/sm90/common/sm90_checks.h"
#include "registry.h"

namespace hfa {
namespace {

Status k4_check(const FwdProblem& p, const DeviceInfo& device) {
  return sm90::check_kernel("k4", p, device, static_cast<long long>(k4::smem_bytes(p.head_dim)));
}

struct K4Launcher {
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k4::launch_forward<T, D>(p, s); }
};

Status k4_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  return cuda_status(dispatch_dtype_head_dim<K4Launcher>(p, stream), "launching k4");
}

}  // namespace

KernelEntry k4_entry() {
  KernelEntry e;
  e.name = "k4";
  e.description = "K4.2: both GEMMs on WGMMA, online softmax on the accumulator fragment, P handed "
                  "to P V in registers, V read MN-major; TMA mbarrier ring";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (mask only on diagonal tiles), "
               "GQA/MQA, LSE; 16-byte aligned pointers and strides; sm90a (H100/H200)";
  e.auto_priority = 20;
  e.check = k4_check;
  e.launch = k4_launch;
  return e;
}

}  // namespace hfa
