// K4's registry entry: k4.
#include "kernels/common/dispatch.h"
#include "kernels/k4/k4_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

struct K4Family {
  static constexpr const char* kName = "k4";
  static size_t smem_bytes(int head_dim) { return k4::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K4Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k4::launch_forward<T, D>(p, s); }
};

}  // namespace

KernelEntry k4_entry() {
  return make_entry<K4Family>(
      "K4.2: both GEMMs on WGMMA, online softmax on the accumulator fragment, P handed to P V in "
      "registers, V read MN-major; TMA mbarrier ring",
      "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (mask only on diagonal tiles), "
      HFA_SM90_SUPPORTS,
      /*auto_priority=*/20);
}

}  // namespace hfa
