// K2's registry entry: support rules and the (dtype, head_dim) dispatch.
#include "kernels/common/dispatch.h"
#include "kernels/common/kernel_checks.h"
#include "kernels/k2/k2_kernel.cuh"

namespace hfa {

// Defined in the generated k2_hdim<D>.cu files; declared here so this file compiles no kernel.
namespace k2 {
#define HFA_K2_DECLARE(D)                                                                  \
  extern template cudaError_t launch_forward<__nv_bfloat16, D>(const FwdProblem&, cudaStream_t); \
  extern template cudaError_t launch_forward<__half, D>(const FwdProblem&, cudaStream_t);
HFA_FOR_EACH_HEAD_DIM(HFA_K2_DECLARE)
#undef HFA_K2_DECLARE
}  // namespace k2

namespace {

size_t smem_bytes(int head_dim) {
#define HFA_K2_SMEM(D) if (head_dim == D) return k2::SmemLayout<D>::kBytes;
  HFA_FOR_EACH_HEAD_DIM(HFA_K2_SMEM)
#undef HFA_K2_SMEM
  return 0;
}

struct K2Family {
  static constexpr const char* kName = "k2";
  static Status check(const FwdProblem& p, const DeviceInfo& device) {
    HFA_RETURN_IF_ERROR(check_min_arch(kName, device, 80));
    HFA_RETURN_IF_ERROR(check_head_dim(kName, p, {HFA_HEAD_DIMS_INIT}));
    HFA_RETURN_IF_ERROR(check_16B_aligned(kName, p));
    HFA_RETURN_IF_ERROR(check_grid_dim(kName, "heads_q", p.heads_q));
    HFA_RETURN_IF_ERROR(check_grid_dim(kName, "batch", p.batch));
    return check_smem(kName, device, static_cast<long long>(smem_bytes(p.head_dim)));
  }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k2::launch_forward<T, D>(p, s); }
};

}  // namespace

KernelEntry k2_entry() {
  return make_entry<K2Family>(
      "fused FA2 forward on CUDA cores: Q tile in SMEM, KV streamed, online softmax, O in "
      "registers (fp32 FMA)",
      "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal, GQA/MQA, LSE; 16-byte aligned "
      "pointers and strides; sm80+",
      /*auto_priority=*/10);
}

}  // namespace hfa
