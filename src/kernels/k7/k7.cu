// K7's registry entry: the FP8 (e4m3) forward.
#include "kernels/common/dispatch.h"
#include "kernels/k7/k7_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

struct K7Family {
  static constexpr const char* kName = "k7";
  static size_t smem_bytes(int head_dim) { return k7::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K7Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k7::launch_forward<T, D>(p, s); }
};

}  // namespace

KernelEntry k7_entry() {
  return make_entry<K7Family>(
      "K7: FP8 forward, K6's warp specialization and scheduling with e4m3 Q K^T and P V on WGMMA "
      "(V transposed in shared memory by the producer warpgroup, P packed to e4m3 in registers)",
      "e4m3 q/k/v with fp32 (batch, heads_kv) descales, bf16/fp16 out, head_dim " HFA_HEAD_DIMS_STRING
      ", causal, " HFA_SM90_SUPPORTS,
      /*auto_priority=*/50, /*fp8=*/true);
}

}  // namespace hfa
