// K4.1's registry entry: k4_qk.
#include "kernels/common/dispatch.h"
#include "kernels/k4_qk/k4_qk_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

struct K4QkFamily {
  static constexpr const char* kName = "k4_qk";
  static size_t smem_bytes(int head_dim) { return k4_qk::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K4QkFamily>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k4_qk::launch<T, D>(p, s); }
};

}  // namespace

KernelEntry k4_qk_entry() {
  return make_entry<K4QkFamily>(
      "K4.1: Q K^T on WGMMA (S laundered through SMEM), softmax and P V still on CUDA cores; "
      "K3.3's TMA pipeline",
      "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal, " HFA_SM90_SUPPORTS, 0);
}

}  // namespace hfa
