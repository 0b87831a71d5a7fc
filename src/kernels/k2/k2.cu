// K2's registry entry: support rules and the (dtype, head_dim) dispatch.
#include "hfa_build_config.h"
#include "common/status_util.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/kernel_checks.h"
#include "kernels/k2/k2_kernel.cuh"
#include "registry.h"

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

Status k2_check(const FwdProblem& p, const DeviceInfo& device) {
  HFA_RETURN_IF_ERROR(check_min_arch("k2", device, 80));
  HFA_RETURN_IF_ERROR(check_head_dim("k2", p, {HFA_HEAD_DIMS_INIT}));
  HFA_RETURN_IF_ERROR(check_16B_aligned("k2", p));
  HFA_RETURN_IF_ERROR(check_grid_dim("k2", "heads_q", p.heads_q));
  HFA_RETURN_IF_ERROR(check_grid_dim("k2", "batch", p.batch));
  HFA_RETURN_IF_ERROR(check_smem("k2", device, static_cast<long long>(smem_bytes(p.head_dim))));
  return Status::Ok();
}

struct K2Launcher {
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k2::launch_forward<T, D>(p, s); }
};

Status k2_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  return cuda_status(dispatch_dtype_head_dim<K2Launcher>(p, stream), "launching k2");
}

}  // namespace

KernelEntry k2_entry() {
  KernelEntry e;
  e.name = "k2";
  e.description = "fused FA2 forward on CUDA cores: Q tile in SMEM, KV streamed, online softmax, "
                  "O in registers (fp32 FMA)";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal, GQA/MQA, LSE; "
               "16-byte aligned pointers and strides; sm80+";
  e.auto_priority = 10;
  e.check = k2_check;
  e.launch = k2_launch;
  return e;
}

}  // namespace hfa
