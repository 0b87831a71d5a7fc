// K5's registry entry: k5.
#include "kernels/common/dispatch.h"
#include "kernels/k4/k4_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {

namespace k5 {
template <typename T, int D>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k5_hdim<D>.cu
}  // namespace k5

namespace {

struct K5Family {
  static constexpr const char* kName = "k5";
  // K4's tiles and ring (k4_launch.h), so K4's shared memory.
  static size_t smem_bytes(int head_dim) { return k4::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K5Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k5::launch_forward<T, D>(p, s); }
};

}  // namespace

KernelEntry k5_entry() {
  return make_entry<K5Family>(
      "K5: warp specialization: a producer warpgroup issues every TMA, two consumer warpgroups run "
      "K4's WGMMA/softmax work; setmaxnreg 24 / 240",
      "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (mask only on diagonal tiles), "
      HFA_SM90_SUPPORTS,
      // 0.770x vs k4 0.737x cuDNN (geometric mean, same run): WORKLOG K5.
      /*auto_priority=*/30);
}

}  // namespace hfa
