// The launches of flash decode's kernels for one (dtype, head dim): instantiated per head dim
// in the generated decode_hdim<D>.cu files.
#pragma once

#include <atomic>

#include "kernels/decode/decode_kernel.cuh"

namespace hfa::flash_decode {

inline constexpr int kMaxDevices = 64;  // devices whose smem limit is remembered as raised

template <typename T, int D, bool kPaged>
cudaError_t launch_policy(const DecodeProblem& p, cudaStream_t stream) {
  using Shape = DecodeShape<D>;
  if (p.seqlen_new > 0) {
    const int chunks = p.seqlen_new * p.heads_kv * (D / 8);
    decode_append_kernel<T, D, kPaged><<<dim3(ceil_div(chunks, 128), p.batch), 128, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.packed_rows() == 0) return cudaSuccess;  // seqlen_q == 0: only the append
  const int m_blocks = ceil_div(p.packed_rows(), Shape::kRows);
  // The shared-memory limit is raised once per device (not per call: decode's host cost matters).
  auto* kernel = decode_split_kernel<T, D, kPaged>;
  static std::atomic<bool> smem_raised[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess && (device >= kMaxDevices || !smem_raised[device].load())) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(Shape::kSmemBytes));
    if (err == cudaSuccess && device < kMaxDevices) smem_raised[device].store(true);
  }
  if (err != cudaSuccess) return err;
  kernel<<<dim3(m_blocks * p.num_splits, p.heads_kv, p.batch), Shape::kThreads, Shape::kSmemBytes,
           stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess || p.num_splits == 1) return err;
  const long long rows = static_cast<long long>(p.batch) * p.seqlen_q * p.heads_q;
  decode_combine_kernel<T, D><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_head_dim(const DecodeProblem& p, cudaStream_t stream) {
  return p.paged() ? launch_policy<T, D, true>(p, stream) : launch_policy<T, D, false>(p, stream);
}

}  // namespace hfa::flash_decode
