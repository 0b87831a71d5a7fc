// The public entry points: forward(), select_kernel(), and the small TensorView helpers.
#include <cuda_runtime.h>

#include "api/validate.h"
#include "common/status_util.h"

namespace hfa {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kNoDevice: return "no device";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kCudaError: return "CUDA error";
  }
  return "unknown";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kE4M3: return "e4m3";
    case DType::kI32: return "int32";
  }
  return "unknown";
}

int size_of(DType dtype) {
  switch (dtype) {
    case DType::kFP32:
    case DType::kI32: return 4;
    case DType::kE4M3: return 1;
    default: return 2;
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return rank > 0 ? n : 0;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size() < kMaxRank ? shape.size() : kMaxRank);
  int i = 0;
  for (int64_t s : shape)
    if (i < t.rank) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> stride) {
  TensorView t = make_tensor(data, dtype, shape);
  int i = 0;
  for (int64_t s : stride)
    if (i < t.rank) t.stride[i++] = s;
  return t;
}

namespace {

// Validation and selection shared by forward() and select_kernel().
Status plan(const ForwardArgs& args, FwdProblem* problem, DeviceInfo* device,
            const KernelEntry** kernel) {
  HFA_RETURN_IF_ERROR(normalize_forward(args, problem));
  if (args.kernel != "auto" && !find_kernel(args.kernel))
    return select_kernel_for(args.kernel, *problem, *device, kernel);  // the unknown-name error
  if (is_empty(*problem)) return Status::Ok();
  HFA_RETURN_IF_ERROR(query_device(device));
  return select_kernel_for(args.kernel, *problem, *device, kernel);
}

}  // namespace

Status forward(const ForwardArgs& args, cudaStream_t stream) {
  FwdProblem problem;
  DeviceInfo device;
  const KernelEntry* kernel = nullptr;
  HFA_RETURN_IF_ERROR(plan(args, &problem, &device, &kernel));
  if (is_empty(problem)) return Status::Ok();
  return kernel->launch(problem, device, stream);
}

Status select_kernel(const ForwardArgs& args, std::string* kernel_name) {
  FwdProblem problem;
  DeviceInfo device;
  const KernelEntry* kernel = nullptr;
  HFA_RETURN_IF_ERROR(plan(args, &problem, &device, &kernel));
  if (kernel_name) *kernel_name = kernel ? kernel->name : "";
  return Status::Ok();
}

}  // namespace hfa
