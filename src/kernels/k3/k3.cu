// K3's registry entries: k3_1, k3_2, k3_3 (1, 2 and 5 pipeline stages).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/status_util.h"
#include "kernels/common/dispatch.h"
#include "hfa_build_config.h"
#include "kernels/k3/k3_launch.h"
#include "kernels/sm90/common/sm90_checks.h"
#include "registry.h"

namespace hfa {
namespace {

template <int Stages>
Status k3_check(const FwdProblem& p, const DeviceInfo& device) {
  static const std::string name = "k3_" + std::to_string(Stages == 5 ? 3 : Stages);
  return sm90::check_kernel(name.c_str(), p, device,
                            static_cast<long long>(k3::smem_bytes(p.head_dim, Stages)));
}

template <int Stages>
struct K3Launcher {
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k3::launch<T, D, Stages>(p, s); }
};

template <int Stages>
Status k3_launch(const FwdProblem& p, const DeviceInfo&, cudaStream_t stream) {
  return cuda_status(dispatch_dtype_head_dim<K3Launcher<Stages>>(p, stream), "launching k3");
}

template <int Stages>
KernelEntry k3_entry(const char* name, const char* depth) {
  KernelEntry e;
  e.name = name;
  e.description = std::string("K2's CUDA-core compute with TMA loads through a ") + depth +
                  " mbarrier pipeline (one issuing thread; K and V in separate ring slots)";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING " where shared memory allows, causal, "
               "GQA/MQA, LSE; 16-byte aligned pointers and strides; sm90a (H100/H200)";
  e.check = k3_check<Stages>;
  e.launch = k3_launch<Stages>;
  return e;
}

}  // namespace

KernelEntry k3_1_entry() { return k3_entry<1>("k3_1", "1-stage"); }
KernelEntry k3_2_entry() { return k3_entry<2>("k3_2", "2-stage"); }
KernelEntry k3_3_entry() { return k3_entry<5>("k3_3", "5-stage"); }

}  // namespace hfa
