// The launches of flash decode's kernels for one (dtype, head dim): instantiated per head dim
// in the generated decode_hdim<D>.cu files.
#pragma once

#include <atomic>

#include "kernels/decode/decode_kernel.cuh"
#include "kernels/merge/merge.h"

namespace hfa::flash_decode {

inline constexpr int kMaxDevices = 64;  // devices whose facts below are remembered

// What the launches need to know of the current device, found once per device and kernel (not per
// call: decode's host cost matters): whose shared-memory limit was raised, and whether the device
// takes programmatic dependent launches (compute capability 9.0 and newer).
struct DeviceOnce {
  std::atomic<bool> smem_raised[kMaxDevices] = {};
  std::atomic<int> major[kMaxDevices] = {};  // 0: not read yet
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

static_assert(kDecodeMaxSplits <= kMaxMergeParts, "one merge takes every split");

// The splits' fp32 partial results (DecodeProblem::o_partial, lse_partial: (num_splits, batch,
// seqlen_q, heads_q[, head_dim]), packed) as a merge into q's dtype, out and lse.
inline MergeProblem split_results(const DecodeProblem& p) {
  MergeProblem m;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
  m.num_parts = p.num_splits;
  m.batch = p.batch, m.seqlen = p.seqlen_q, m.heads = p.heads_q, m.head_dim = p.head_dim;
  m.o_parts = p.o_partial;
  m.part_dtype = DType::kFP32;
  m.o_part_stride = rows * p.head_dim;
  m.o_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q * p.head_dim;
  m.o_row_stride = static_cast<int64_t>(p.heads_q) * p.head_dim;
  m.o_head_stride = p.head_dim;
  m.lse_parts = p.lse_partial;
  m.lse_part_stride = rows;
  m.lse_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q;
  m.lse_head_stride = 1;
  m.lse_row_stride = p.heads_q;
  m.out = p.o;
  m.out_dtype = p.dtype;
  m.out_batch_stride = p.o_batch_stride, m.out_row_stride = p.o_row_stride, m.out_head_stride = p.o_head_stride;
  m.lse = p.lse;
  m.lse_out_batch_stride = p.lse_batch_stride, m.lse_out_head_stride = p.lse_head_stride;
  m.lse_out_row_stride = p.lse_row_stride;
  return m;
}

// The split kernel of one policy (decode_split_kernel's template arguments); *major: the device's
// compute capability major, for the merge's launch.
template <typename T, typename Tc, int D, bool kPaged, bool kLargePages, bool kVariants>
cudaError_t launch_split_kernel(const DecodeProblem& p, cudaStream_t stream, int* major) {
  using Shape = DecodeShape<D, sizeof(Tc) == 1, kPaged, kLargePages>;
  const int m_blocks = ceil_div(p.packed_rows(), Shape::kRows);
  auto* kernel = decode_split_kernel<T, Tc, D, kPaged, kLargePages, kVariants>;
  static DeviceOnce once;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = device_major(device, once, major);
  if (err == cudaSuccess && (device >= kMaxDevices || !once.smem_raised[device].load())) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(Shape::kSmemBytes));
    if (err == cudaSuccess && device < kMaxDevices) once.smem_raised[device].store(true);
  }
  if (err != cudaSuccess) return err;
  kernel<<<dim3(m_blocks * p.num_splits, p.heads_kv, p.batch), Shape::kThreads, Shape::kSmemBytes,
           stream>>>(p);
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
  // Windows, softcap and sinks in their own kernel (decode_kernel.cuh: kVariants).
  const cudaError_t err = p.variants() ? launch_split_kernel<T, Tc, D, kPaged, kLargePages, true>(p, stream, &major)
                                       : launch_split_kernel<T, Tc, D, kPaged, kLargePages, false>(p, stream, &major);
  if (err != cudaSuccess || p.num_splits == 1) return err;
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
