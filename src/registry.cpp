#include "registry.h"

#include "hfa_build_config.h"

namespace hfa {

const std::vector<KernelEntry>& registry() {
  // Explicit list (no static-initializer self-registration, which static linking can drop), of the
  // families this build has (HFA_KERNELS, CMakeLists.txt).
  static const std::vector<KernelEntry> entries = [] {
    std::vector<KernelEntry> e;
#if HFA_WITH_K1
    e.push_back(k1_entry());
#endif
#if HFA_WITH_K2
    e.push_back(k2_entry());
#endif
#if HFA_WITH_FA2
    e.push_back(fa2_entry());
#endif
#if HFA_WITH_K3
    e.insert(e.end(), {k3_1_entry(), k3_2_entry(), k3_3_entry()});
#endif
#if HFA_WITH_K4_QK
    e.push_back(k4_qk_entry());
#endif
#if HFA_WITH_K4
    e.push_back(k4_entry());
#endif
#if HFA_WITH_K5
    e.push_back(k5_entry());
#endif
#if HFA_WITH_K6
    e.insert(e.end(), {k6_entry(), k6_no_pingpong_entry(), k6_no_overlap_entry()});
#endif
#if HFA_WITH_K7
    e.push_back(k7_entry());
#endif
#if HFA_WITH_K8
    e.push_back(k8_entry());
#endif
    return e;
  }();
  return entries;
}

const KernelEntry* find_kernel(const std::string& name) {
  for (const KernelEntry& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

const std::vector<BackwardKernelEntry>& backward_registry() {
  static const std::vector<BackwardKernelEntry> entries = [] {
    std::vector<BackwardKernelEntry> e;
#if HFA_WITH_FA2
    e.push_back(fa2_backward_entry());
#endif
#if HFA_WITH_BWD_SM90
    e.push_back(bwd_sm90_backward_entry());
#endif
    return e;
  }();
  return entries;
}

const BackwardKernelEntry* find_backward_kernel(const std::string& name) {
  for (const BackwardKernelEntry& e : backward_registry())
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<KernelInfo> list_backward_kernels() {
  std::vector<KernelInfo> out;
  for (const BackwardKernelEntry& e : backward_registry())
    out.push_back({e.name, e.description, e.supports, false, false, e.variants.window,
                   e.variants.softcap, e.variants.sinks, e.variants.varlen});
  return out;
}

std::vector<KernelInfo> list_kernels() {
  std::vector<KernelInfo> out;
  for (const KernelEntry& e : registry())
    out.push_back({e.name, e.description, e.supports, e.fp8, e.fp8_block_scales, e.variants.window,
                   e.variants.softcap, e.variants.sinks, e.variants.varlen});
  return out;
}

}  // namespace hfa
