// SmOccupier (sm_occupier.h).
#include "check/sm_occupier.h"

#include <cuda_runtime.h>

#include <chrono>

#include "common/status_util.h"

namespace hfa::check {
namespace {

__global__ void occupy_kernel(volatile int* flag, volatile int* started) {
  extern __shared__ char held[];  // only held: it keeps other CTAs off this SM
  if (threadIdx.x == 0) {
    atomicAdd_system(const_cast<int*>(started), 1);
    while (*flag == 0) __nanosleep(1000);
    held[0] = 0;
  }
}

}  // namespace

Status SmOccupier::occupy(int free_sms) {
  HFA_RETURN_IF_ERROR(release());
  int device = 0, sms = 0, smem = 0;
  HFA_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
  HFA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
  HFA_RETURN_IF_ERROR(cuda_status(
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "shared memory"));
  const int ctas = sms - free_sms;
  if (ctas <= 0) return Status::Ok();
  if (!flag_) {
    void* host = nullptr;
    HFA_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(&host, 2 * sizeof(int), cudaHostAllocMapped), "flag"));
    flag_ = static_cast<volatile int*>(host);
    started_ = flag_ + 1;
    cudaStream_t stream = nullptr;
    HFA_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
    stream_ = stream;
  }
  *flag_ = 0;
  *started_ = 0;
  int *flag_dev = nullptr, *started_dev = nullptr;
  HFA_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev),
                                                           const_cast<int*>(flag_), 0), "flag"));
  started_dev = flag_dev + 1;
  HFA_RETURN_IF_ERROR(cuda_status(
      cudaFuncSetAttribute(occupy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem"));
  occupy_kernel<<<ctas, 32, smem, static_cast<cudaStream_t>(stream_)>>>(flag_dev, started_dev);
  HFA_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "launching the SM occupier"));
  running_ = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (*started_ < ctas) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      (void)release();
      return make_error(StatusCode::kCudaError, "SmOccupier: %d of %d CTAs started in 10 s",
                        static_cast<int>(*started_), ctas);
    }
  }
  return Status::Ok();
}

Status SmOccupier::release() {
  if (!running_) return Status::Ok();
  *flag_ = 1;
  running_ = false;
  return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "SmOccupier release");
}

SmOccupier::~SmOccupier() {
  (void)release();
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (flag_) cudaFreeHost(const_cast<int*>(flag_));
}

}  // namespace hfa::check
