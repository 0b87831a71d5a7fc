// Support rules that several kernels share. Each returns kUnsupported with a message naming the
// kernel, the argument and the rule.
#pragma once

#include <initializer_list>

#include "common/problem.h"

namespace hfa {

// The GPU's compute capability must be at least `min_cc` (e.g. 80 for sm_80).
Status check_min_arch(const char* kernel, const DeviceInfo& device, int min_cc);

// head_dim must be one of `dims` (the head dims this build instantiated).
Status check_head_dim(const char* kernel, const FwdProblem& p, std::initializer_list<int> dims);

// Q/K/V/O pointers 16-byte aligned and their batch/row/head strides multiples of 16 bytes
// (kernels that move 16-byte vectors need it).
Status check_16B_aligned(const char* kernel, const FwdProblem& p);
// The same rule for one tensor named `name` (e.g. the backward's dout, dq, dk, dv).
Status check_16B_operand(const char* kernel, const char* name, const void* ptr, int64_t batch_stride,
                         int64_t row_stride, int64_t head_stride, DType dtype);

// Grid dimensions y and z are limited to 65535 blocks.
Status check_grid_dim(const char* kernel, const char* what, long long blocks);

// Dynamic shared memory `bytes` must fit the device's per-block opt-in limit.
Status check_smem(const char* kernel, const DeviceInfo& device, long long bytes);

// A backward kernel's own operands (dout, dq, dk, dv: 16-byte aligned, as q, k, v) and its grids
// (CTA rows per KV head, query head, and batch entry or sequence).
Status check_backward_operands(const char* kernel, const BwdProblem& bp);

}  // namespace hfa
