// K5's registry entry: k5.
#include "common/status_util.h"
#include "hfa_build_config.h"
#include "kernels/common/dispatch.h"
#include "kernels/k4/k4_launch.h"
#include "kernels/sm90/common/sm90_checks.h"
#include "registry.h"

namespace hfa {

namespace k5 {
template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k5_hdim<D>.cu
}  // namespace k5

namespace {

Status k5_check(const FwdProblem& p, const DeviceInfo& device) {
  // K4's tiles and ring (k4_launch.h), so K4's shared memory.
  return sm90::check_kernel("k5", p, device, static_cast<long long>(k4::smem_bytes(p.head_dim)));
}

struct K5Launcher {
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k5::launch_forward<T, D>(p, s); }
};

Status k5_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  return cuda_status(dispatch_dtype_head_dim<K5Launcher>(p, stream), "launching k5");
}

}  // namespace

KernelEntry k5_entry() {
  KernelEntry e;
  e.name = "k5";
  e.description = "K5: warp specialization: a producer warpgroup issues every TMA, two consumer "
                  "warpgroups run K4's WGMMA/softmax work; setmaxnreg 24 / 240";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (mask only on diagonal tiles), "
               "GQA/MQA, LSE; 16-byte aligned pointers and strides; sm90a (H100/H200)";
  e.auto_priority = 30;  // 0.770x vs k4 0.737x cuDNN (geometric mean, same run): WORKLOG K5
  e.check = k5_check;
  e.launch = k5_launch;
  return e;
}

}  // namespace hfa
