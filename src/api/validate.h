// Argument validation and kernel selection. Everything here runs on the host before any launch;
// none of it touches the GPU, so CPU tests exercise every rule with a hand-made DeviceInfo.
#pragma once

#include "kernels/quantize_fp8/quantize_fp8.h"
#include "registry.h"

namespace hfa {

// Checks the rules that hold for every kernel (ranks, shapes, dtypes, strides, pointers, scale)
// and fills `problem`. The message of an error names the argument and the rule it broke.
Status normalize_forward(const ForwardArgs& args, FwdProblem* problem);

// True when the problem has no output elements (batch == 0 or seqlen_q == 0): nothing to launch.
bool is_empty(const FwdProblem& problem);

// The kernel named by args.kernel, or "auto"'s choice, after that kernel's own check() against
// `device`. Errors name the kernel and the rule.
Status select_kernel_for(const std::string& kernel_name, const FwdProblem& problem,
                         const DeviceInfo& device, const KernelEntry** kernel);

// The backward's rules (backward.cpp): lse required, the forward's rules for q/k/v/out/lse, and
// dout, dq, dk, dv shaped like out, q, k, v with q's dtype and a contiguous head_dim.
Status normalize_backward(const BackwardArgs& args, BwdProblem* problem);

// True when the backward has nothing to write (batch == 0, or seqlen_q == seqlen_k == 0).
bool is_empty(const BwdProblem& problem);

Status select_backward_kernel_for(const std::string& kernel_name, const BwdProblem& problem,
                                  const DeviceInfo& device, const BackwardKernelEntry** kernel);

// quantize_fp8's rules (QuantizeFp8Args; quantize.cpp): the forward's for q, k, v (bf16/fp16), head_dim 64, 128
// or 256, e4m3 outputs shaped like the inputs, fp32 descales shaped by `block`.
Status normalize_quantize(const QuantizeFp8Args& args, QuantizeProblem* problem);

// The current CUDA device, or kNoDevice.
Status query_device(DeviceInfo* device);

}  // namespace hfa
