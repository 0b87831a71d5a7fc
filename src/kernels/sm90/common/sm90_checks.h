// Support rules every sm90a kernel shares (host side, no CuTe).
#pragma once

#include "common/problem.h"

namespace hfa::sm90 {

// sm_90a code runs on compute capability 9.0 only (H100, H200); TMA needs 16-byte aligned
// pointers and strides; the head dim must be instantiated; shared memory must fit.
Status check_kernel(const char* kernel, const FwdProblem& p, const DeviceInfo& device,
                    long long smem_bytes);

// The check of a Family (kernels/common/dispatch.h) whose only own rule is its shared memory:
// Family::smem_bytes(head_dim), 0 when no configuration fits.
template <class Family>
Status check_family(const FwdProblem& p, const DeviceInfo& device) {
  return check_kernel(Family::kName, p, device, static_cast<long long>(Family::smem_bytes(p.head_dim)));
}

// What every sm90a kernel's --list line says after its own features.
#define HFA_SM90_SUPPORTS "GQA/MQA, LSE; 16-byte aligned pointers and strides; sm90a (H100/H200)"

}  // namespace hfa::sm90
