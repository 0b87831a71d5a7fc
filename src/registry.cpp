#include "registry.h"

#include "hfa_build_config.h"

namespace hfa {

// HFA_BUILT(HFA_WITH_K6, a, b,) expands to "a, b," when the family was built and to nothing when
// not (its entry functions then do not exist).
#define HFA_BUILT(with, ...) HFA_BUILT_CAT(HFA_BUILT_, with)(__VA_ARGS__)
#define HFA_BUILT_CAT(a, b) HFA_BUILT_CAT2(a, b)
#define HFA_BUILT_CAT2(a, b) a##b
#define HFA_BUILT_1(...) __VA_ARGS__
#define HFA_BUILT_0(...)

const std::vector<KernelEntry>& registry() {
  // Explicit list (no static-initializer self-registration, which static linking can drop), of the
  // families this build has (HFA_KERNELS, CMakeLists.txt).
  static const std::vector<KernelEntry> entries = {
      HFA_BUILT(HFA_WITH_K1, k1_entry(),) HFA_BUILT(HFA_WITH_K2, k2_entry(),)
      HFA_BUILT(HFA_WITH_FA2, fa2_entry(),)
      HFA_BUILT(HFA_WITH_K3, k3_1_entry(), k3_2_entry(), k3_3_entry(),)
      HFA_BUILT(HFA_WITH_K4_QK, k4_qk_entry(),) HFA_BUILT(HFA_WITH_K4, k4_entry(),)
      HFA_BUILT(HFA_WITH_K5, k5_entry(),)
      HFA_BUILT(HFA_WITH_K6, k6_entry(), k6_no_pingpong_entry(), k6_no_overlap_entry(),)
      HFA_BUILT(HFA_WITH_K7, k7_entry(),) HFA_BUILT(HFA_WITH_K8, k8_entry(),)};
  return entries;
}

const KernelEntry* find_kernel(const std::string& name) {
  for (const KernelEntry& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

const std::vector<BackwardKernelEntry>& backward_registry() {
  static const std::vector<BackwardKernelEntry> entries = {
      HFA_BUILT(HFA_WITH_FA2, fa2_backward_entry(),) HFA_BUILT(HFA_WITH_BWD_SM90, bwd_sm90_backward_entry(),)};
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
