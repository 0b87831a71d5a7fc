// Support rules every sm90a kernel shares (host side, no CuTe).
#pragma once

#include "common/problem.h"

namespace hfa::sm90 {

// sm_90a code runs on compute capability 9.0 only (H100, H200); TMA needs 16-byte aligned
// pointers and strides; the head dim must be instantiated; shared memory must fit.
Status check_kernel(const char* kernel, const FwdProblem& p, const DeviceInfo& device,
                    long long smem_bytes);

}  // namespace hfa::sm90
