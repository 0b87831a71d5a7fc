// K3's registry entries: k3_1, k3_2, k3_3 (1, 2 and 5 pipeline stages).
#include "kernels/common/dispatch.h"
#include "kernels/k3/k3_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

template <int Stages>
struct K3Family {
  static constexpr const char* kName = Stages == 1 ? "k3_1" : (Stages == 2 ? "k3_2" : "k3_3");
  static size_t smem_bytes(int head_dim) { return k3::smem_bytes(head_dim, Stages); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K3Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k3::launch<T, D, Stages>(p, s); }
};

constexpr const char* kSupports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING
                                  " where shared memory allows, causal, " HFA_SM90_SUPPORTS;

}  // namespace

KernelEntry k3_1_entry() {
  return make_entry<K3Family<1>>("K2's CUDA-core compute with TMA loads through a 1-stage mbarrier "
                                 "pipeline (one issuing thread; K and V in separate slots)",
                                 kSupports, 0);
}
KernelEntry k3_2_entry() {
  return make_entry<K3Family<2>>("K2's CUDA-core compute with TMA loads through a 2-stage mbarrier "
                                 "pipeline (one issuing thread; K and V in separate slots)",
                                 kSupports, 0);
}
KernelEntry k3_3_entry() {
  return make_entry<K3Family<5>>("K2's CUDA-core compute with TMA loads through a 5-stage mbarrier "
                                 "pipeline (one issuing thread; K and V in separate slots)",
                                 kSupports, 0);
}

}  // namespace hfa
