// The launches of flash decode's kernels for one (dtype, head dim): instantiated per head dim
// in the generated decode_hdim<D>.cu files.
#pragma once

#include <atomic>

#include "kernels/decode/decode.h"
#include "kernels/decode/decode_kernel.cuh"
#include "kernels/merge/merge.h"

namespace hfa::flash_decode {

inline constexpr int kMaxDevices = 64;  // devices whose facts below are remembered

// What the launches need to know of the current device, found once per device and kernel (not per
// call: decode's host cost matters): whose shared-memory limit was raised, whether the device
// takes programmatic dependent launches (compute capability 9.0 and newer), and how many CTAs of
// the kernel it holds at once (a cooperative launch's limit).
struct DeviceOnce {
  std::atomic<bool> smem_raised[kMaxDevices] = {};
  std::atomic<int> major[kMaxDevices] = {};          // 0: not read yet
  std::atomic<int> resident_ctas[kMaxDevices] = {};  // 0: not read yet; -1: no cooperative launch
};

inline cudaError_t device_major(int device, DeviceOnce& once, int* major) {
  if (device < kMaxDevices && once.major[device].load() > 0) {
    *major = once.major[device].load();
    return cudaSuccess;
  }
  cudaError_t err = cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess && device < kMaxDevices) once.major[device].store(*major);
  return err;
}

// CTAs of `kernel` (its block size and dynamic shared memory set) that the device holds at once,
// or -1 if it takes no cooperative launch.
inline cudaError_t resident_ctas(const void* kernel, int threads, size_t smem, int device, DeviceOnce& once, int* ctas) {
  if (device < kMaxDevices && (*ctas = once.resident_ctas[device].load()) != 0) return cudaSuccess;
  int cooperative = 0, per_sm = 0, sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return err;
  *ctas = cooperative && per_sm > 0 ? per_sm * sms : -1;
  if (device < kMaxDevices) once.resident_ctas[device].store(*ctas);
  return cudaSuccess;
}

static_assert(kDecodeMaxSplits <= kMaxMergeParts, "one merge takes every split");

// The split kernel of one policy (decode_split_kernel's template arguments); *major: the device's
// compute capability major, for the merge's launch. With splits whose CTAs the device holds all at
// once, a cooperative launch in which the split kernel merges its own partial results
// (DecodeProblem::merge_in_grid): one launch per step instead of two, the launches being most of
// a step's host cost (~4-5 us each on the H100's host: multi-split rows 10.6 -> 5.6 us); *merged
// says so. Otherwise (one split; more CTAs than fit, as waves_split or a forced num_splits make;
// more output rows than the grid has warps or CTAs to merge them, merge_rows_per_cta; a device
// that holds fewer than its occupancy says, e.g. shared under MPS) a plain launch, and the merge
// kernel after it.
template <typename T, typename Tc, int D, bool kPaged, bool kLargePages, bool kVariants>
cudaError_t launch_split_kernel(const DecodeProblem& p, cudaStream_t stream, int* major, bool* merged) {
  using Shape = DecodeShape<D, sizeof(Tc) == 1, kPaged, kLargePages>;
  const int m_blocks = ceil_div(p.packed_rows(), Shape::kRows);
  auto* kernel = decode_split_kernel<T, Tc, D, kPaged, kLargePages, kVariants>;
  static DeviceOnce once;
  *merged = false;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = device_major(device, once, major);
  if (err == cudaSuccess && (device >= kMaxDevices || !once.smem_raised[device].load())) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(Shape::kSmemBytes));
    if (err == cudaSuccess && device < kMaxDevices) once.smem_raised[device].store(true);
  }
  if (err != cudaSuccess) return err;
  const dim3 grid(m_blocks * p.num_splits, p.heads_kv, p.batch);
  if (p.num_splits > 1 && merge_in_grid_allowed()) {
    int resident = 0;
    err = resident_ctas(reinterpret_cast<const void*>(kernel), Shape::kThreads, Shape::kSmemBytes, device, once, &resident);
    if (err != cudaSuccess) return err;
    const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
    if (ctas <= resident && rows <= ctas * merge_rows_per_cta(p.num_splits, Shape::kThreads)) {
      DecodeProblem in_grid = p;
      in_grid.merge_in_grid = true;
      cudaLaunchConfig_t config = {};
      config.gridDim = grid;
      config.blockDim = dim3(Shape::kThreads);
      config.dynamicSmemBytes = Shape::kSmemBytes;
      config.stream = stream;
      cudaLaunchAttribute attribute[1];
      attribute[0].id = cudaLaunchAttributeCooperative;
      attribute[0].val.cooperative = 1;
      config.attrs = attribute;
      config.numAttrs = 1;
      err = cudaLaunchKernelEx(&config, kernel, in_grid);
      if (err != cudaErrorCooperativeLaunchTooLarge) {
        *merged = err == cudaSuccess;
        return err;
      }
      cudaGetLastError();  // (not sticky) fewer CTAs fit now than the occupancy said: two kernels
    }
  }
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// T: q's dtype; Tc: the cache's (T, or __nv_fp8_storage_t for e4m3); kLargePages: DecodeShape's.
template <typename T, typename Tc, int D, bool kPaged, bool kLargePages = false>
cudaError_t launch_policy(const DecodeProblem& p, cudaStream_t stream) {
  if (p.seqlen_new > 0) {
    const int chunks = p.seqlen_new * p.heads_kv * static_cast<int>(D * sizeof(Tc) / 16);
    decode_append_kernel<Tc, D, kPaged><<<dim3(ceil_div(chunks, 128), p.batch), 128, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.packed_rows() == 0) return cudaSuccess;  // seqlen_q == 0: only the append
  int major = 0;
  bool merged = false;
  // Windows, softcap and sinks in their own kernel (decode_kernel.cuh: kVariants).
  const cudaError_t err = p.variants() ? launch_split_kernel<T, Tc, D, kPaged, kLargePages, true>(p, stream, &major, &merged)
                                       : launch_split_kernel<T, Tc, D, kPaged, kLargePages, false>(p, stream, &major, &merged);
  if (err != cudaSuccess || p.num_splits == 1 || merged) return err;
  // The merge of the splits' partial results, launched as the split kernel's programmatic
  // dependent on sm90 (it waits for the split grid in the kernel: merge_kernel.cuh); in stream
  // order before.
  return merge::launch(split_results(p), stream, /*as_dependent=*/major >= 9);
}

template <typename T, int D>
cudaError_t launch_head_dim(const DecodeProblem& p, cudaStream_t stream) {
  using E4M3 = __nv_fp8_storage_t;
  const bool large = large_pages<D>(p);
  if (p.fp8_cache()) {
    if (!p.paged()) return launch_policy<T, E4M3, D, false>(p, stream);
    return large ? launch_policy<T, E4M3, D, true, true>(p, stream) : launch_policy<T, E4M3, D, true>(p, stream);
  }
  if (!p.paged()) return launch_policy<T, T, D, false>(p, stream);
  return large ? launch_policy<T, T, D, true, true>(p, stream) : launch_policy<T, T, D, true>(p, stream);
}

}  // namespace hfa::flash_decode
