// The kernel registry: name -> {description, supports(problem, device), launch(problem, stream)}.
// Every ladder kernel contributes one KernelEntry from its own folder; registry.cpp lists them.
#pragma once

#include <string>
#include <vector>

#include "common/problem.h"

namespace hfa {

// The score variants (ForwardArgs / BackwardArgs: window_left/right, softcap, sinks) a kernel
// takes. The API refuses a variant, naming its argument, for a kernel that does not take it.
struct VariantSupport {
  bool window = false, softcap = false, sinks = false, varlen = false;
};

struct KernelEntry {
  std::string name;
  std::string description;  // one line, for --list
  std::string supports;     // one line, for --list
  // "auto" runs the supporting kernel with the highest priority; 0 = never chosen by "auto".
  int auto_priority = 0;
  // Takes e4m3 Q/K/V (and only those); false: bf16/fp16. The API enforces it before check().
  bool fp8 = false;
  // e4m3 kernels: takes block descales (k8) instead of per-(batch, KV head) ones (k7). Enforced
  // by the API before check(), like fp8.
  bool fp8_block_scales = false;
  VariantSupport variants;  // enforced by the API before check(), like fp8
  // Ok if the kernel can run `problem` on `device`; otherwise kUnsupported with a message that
  // names the argument and the rule. Must not touch the GPU.
  Status (*check)(const FwdProblem& problem, const DeviceInfo& device) = nullptr;
  // Launches on `stream`. Called only after check() passed, with batch, seqlen_q > 0.
  Status (*launch)(const FwdProblem& problem, const DeviceInfo& device, cudaStream_t stream) = nullptr;
};

// A backward kernel: the same contract on a BwdProblem. launch() allocates its own workspace
// (stream-ordered) and fills bp.dq_accum / bp.row_stats in its copy of the problem.
struct BackwardKernelEntry {
  std::string name;
  std::string description;
  std::string supports;
  int auto_priority = 0;
  // Optional: this problem's priority instead of auto_priority, for a kernel measured slower than
  // another on some problems (bwd_sm90's deterministic mode at head_dim 64).
  int (*auto_priority_for)(const BwdProblem& problem) = nullptr;
  VariantSupport variants;  // enforced by the API before check()
  Status (*check)(const BwdProblem& problem, const DeviceInfo& device) = nullptr;
  Status (*launch)(const BwdProblem& problem, const DeviceInfo& device, cudaStream_t stream) = nullptr;
};

// All kernels of this build, in ladder order.
const std::vector<KernelEntry>& registry();
const KernelEntry* find_kernel(const std::string& name);
const std::vector<BackwardKernelEntry>& backward_registry();
const BackwardKernelEntry* find_backward_kernel(const std::string& name);

// Each kernel folder defines its entry.
KernelEntry k1_entry();
KernelEntry fa2_entry();
BackwardKernelEntry fa2_backward_entry();
BackwardKernelEntry bwd_sm90_backward_entry();
KernelEntry k2_entry();
KernelEntry k3_1_entry();
KernelEntry k3_2_entry();
KernelEntry k3_3_entry();
KernelEntry k4_qk_entry();
KernelEntry k4_entry();
KernelEntry k5_entry();
KernelEntry k6_entry();
KernelEntry k6_no_pingpong_entry();
KernelEntry k6_no_overlap_entry();
KernelEntry k7_entry();
KernelEntry k8_entry();

}  // namespace hfa
