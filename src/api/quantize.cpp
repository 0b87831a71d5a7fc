// The public entry point quantize_fp8(): validate, then launch the passes.
#include "api/validate.h"
#include "common/status_util.h"
#include "kernels/quantize_fp8/quantize_fp8.h"

namespace hfa {

Status quantize_fp8(const QuantizeFp8Args& args, cudaStream_t stream) {
  QuantizeProblem problem;
  HFA_RETURN_IF_ERROR(normalize_quantize(args, &problem));
  if (problem.batch == 0) return Status::Ok();
  DeviceInfo device;
  HFA_RETURN_IF_ERROR(query_device(&device));
  return launch_quantize_fp8(problem, stream);
}

}  // namespace hfa
