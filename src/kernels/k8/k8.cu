// K8's registry entry: the FP8 forward with block quantization. The kernel is K7's
// (src/kernels/k7/k7_kernel.cuh) with the BlockDescale policy: Q's descale per 128-row tile and
// K's per 128 keys (ForwardArgs::q_block_descale, k_block_descale), as quantize_fp8(block = true)
// writes them; V keeps its (batch, heads_kv) descale.
#include "kernels/common/dispatch.h"
#include "kernels/k7/k7_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

struct K8Family {
  static constexpr const char* kName = "k8";
  static size_t smem_bytes(int head_dim) { return k7::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K8Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) {
    return k7::launch_forward<T, D, k7::BlockDescale>(p, s);
  }
};

}  // namespace

KernelEntry k8_entry() {
  return make_entry<K8Family>(
      "K8: FP8 forward with block quantization, K7 with a Q descale per 128-row tile and a K "
      "descale per 128 keys (inputs from quantize_fp8: block scales, optional Hadamard transform)",
      "e4m3 q/k/v with fp32 q_block_descale/k_block_descale and (batch, heads_kv) v_descale, "
      "bf16/fp16 out, head_dim " HFA_HEAD_DIMS_STRING ", causal, " HFA_SM90_SUPPORTS,
      /*auto_priority=*/50, /*fp8=*/true, /*fp8_block_scales=*/true);
}

}  // namespace hfa
