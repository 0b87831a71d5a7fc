// The public backward entry point: validate, pick the kernel, launch.
#include "api/validate.h"
#include "common/status_util.h"
#include "kernels/common/sink_grad.h"

namespace hfa {

Status backward(const BackwardArgs& args, cudaStream_t stream) {
  BwdProblem problem;
  HFA_RETURN_IF_ERROR(normalize_backward(args, &problem));
  DeviceInfo device;
  const BackwardKernelEntry* kernel = nullptr;
  if (args.kernel != "auto" && !find_backward_kernel(args.kernel))
    return select_backward_kernel_for(args.kernel, problem, device, &kernel);  // unknown name
  if (is_empty(problem)) {  // no gradient but the sinks' (0: no rows)
    if (!problem.dsinks) return Status::Ok();
    return cuda_status(launch_backward_sink_grad(problem, stream), "launching the sinks' gradient");
  }
  HFA_RETURN_IF_ERROR(query_device(&device));
  HFA_RETURN_IF_ERROR(select_backward_kernel_for(args.kernel, problem, device, &kernel));
  return kernel->launch(problem, device, stream);
}

Status select_backward_kernel(const BackwardArgs& args, std::string* kernel_name) {
  BwdProblem problem;
  HFA_RETURN_IF_ERROR(normalize_backward(args, &problem));
  DeviceInfo device;
  const BackwardKernelEntry* kernel = nullptr;
  if (args.kernel == "auto" || find_backward_kernel(args.kernel)) HFA_RETURN_IF_ERROR(query_device(&device));
  HFA_RETURN_IF_ERROR(select_backward_kernel_for(args.kernel, problem, device, &kernel));
  if (kernel_name) *kernel_name = kernel->name;
  return Status::Ok();
}

}  // namespace hfa
