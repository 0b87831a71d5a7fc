#include "registry.h"

namespace hfa {

const std::vector<KernelEntry>& registry() {
  // Explicit list (no static-initializer self-registration, which static linking can drop).
  static const std::vector<KernelEntry> entries = {k1_entry(), k2_entry(), fa2_entry(), k3_1_entry(),
                                                     k3_2_entry(), k3_3_entry(), k4_qk_entry(),
                                                     k4_entry(), k5_entry(), k6_entry(),
                                                     k6_no_pingpong_entry(), k6_no_overlap_entry(),
                                                     k7_entry(), k8_entry()};
  return entries;
}

const KernelEntry* find_kernel(const std::string& name) {
  for (const KernelEntry& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

const std::vector<BackwardKernelEntry>& backward_registry() {
  static const std::vector<BackwardKernelEntry> entries = {fa2_backward_entry(), bwd_sm90_backward_entry()};
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
