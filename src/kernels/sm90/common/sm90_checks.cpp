#include "kernels/sm90/common/sm90_checks.h"

#include "common/status_util.h"
#include "hfa_build_config.h"
#include "kernels/common/kernel_checks.h"

namespace hfa::sm90 {

Status check_kernel(const char* kernel, const FwdProblem& p, const DeviceInfo& device,
                    long long smem_bytes) {
  if (device.cc() != 90)
    return make_error(StatusCode::kUnsupported,
                      "kernel \"%s\": needs a Hopper GPU (compute capability 9.0, sm_90a code); "
                      "device %d is %d.%d", kernel, device.device, device.cc_major, device.cc_minor);
  HFA_RETURN_IF_ERROR(check_head_dim(kernel, p, {HFA_HEAD_DIMS_INIT}));
  HFA_RETURN_IF_ERROR(check_16B_aligned(kernel, p));
  HFA_RETURN_IF_ERROR(check_grid_dim(kernel, "heads_q", p.heads_q));
  HFA_RETURN_IF_ERROR(check_grid_dim(kernel, "batch", p.batch));
  if (smem_bytes <= 0)
    return make_error(StatusCode::kUnsupported,
                      "head_dim: kernel \"%s\" has no configuration for head_dim %d (its shared "
                      "memory would exceed the 227 KB an H100 block can have)", kernel, p.head_dim);
  return check_smem(kernel, device, smem_bytes);
}

}  // namespace hfa::sm90
