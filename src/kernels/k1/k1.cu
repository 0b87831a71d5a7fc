// K1: naive materialized attention (the worklog's "before" picture).
//
// Three kernels, one thread per output element, everything through global memory:
//   k1_scores   S = scale * Q K^T (fp32, causal entries written as -inf)     grid (sk/16, sq/16, B*H)
//   k1_softmax  P = softmax(S) in place, one thread per row, three passes   grid (sq/256, B*H)
//   k1_output   O = P V                                                      grid (d/16, sq/16, B*H)
// S is a (batch * heads_q, seqlen_q, seqlen_k) fp32 buffer: arithmetic intensity about 1 FLOP per
// byte, and memory that grows with seqlen^2, which is what every later kernel removes.
#include <cuda_runtime.h>

#include <cmath>

#include "common/status_util.h"
#include "kernels/common/kernel_checks.h"
#include "kernels/common/numeric.cuh"
#include "registry.h"

namespace hfa {
namespace {

constexpr int kTile = 16;          // 16 x 16 threads per block for scores and output
constexpr int kSoftmaxThreads = 256;

// Row i of (batch b, query head h) of an attention tensor.
template <typename T>
__device__ const T* row_ptr(const void* base, int64_t bs, int64_t rs, int64_t hs, int b, int i, int h) {
  return static_cast<const T*>(base) + b * bs + i * rs + h * hs;
}

template <typename T>
__global__ void k1_scores(FwdProblem p, float* S) {
  const int j = blockIdx.x * kTile + threadIdx.x;  // key
  const int i = blockIdx.y * kTile + threadIdx.y;  // query
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;
  const T* q = row_ptr<T>(p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, i, h);
  const T* k = row_ptr<T>(p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, j,
                          h / p.group_size());
  float acc = 0.f;
  for (int c = 0; c < p.head_dim; ++c) acc += to_float(q[c]) * to_float(k[c]);
  const bool masked = p.causal && j > i + p.causal_offset();
  S[(static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k + j] =
      masked ? -INFINITY : acc * p.softmax_scale;
}

__global__ void k1_softmax(FwdProblem p, float* S) {
  const int i = blockIdx.x * kSoftmaxThreads + threadIdx.x;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.seqlen_q) return;
  float* row = S + (static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k;
  float m = -INFINITY;
  for (int j = 0; j < p.seqlen_k; ++j) m = fmaxf(m, row[j]);
  float l = 0.f;
  if (m != -INFINITY)  // a row that sees no key keeps l = 0: P = 0, O = 0, LSE = -inf
    for (int j = 0; j < p.seqlen_k; ++j) l += __expf(row[j] - m);
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  for (int j = 0; j < p.seqlen_k; ++j) row[j] = l > 0.f ? __expf(row[j] - m) * inv_l : 0.f;
  if (p.lse)
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] =
        l > 0.f ? m + logf(l) : -INFINITY;
}

template <typename T>
__global__ void k1_output(FwdProblem p, const float* P) {
  const int c = blockIdx.x * kTile + threadIdx.x;  // head_dim column
  const int i = blockIdx.y * kTile + threadIdx.y;  // query
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.seqlen_q || c >= p.head_dim) return;
  const float* prow = P + (static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k;
  const int hk = h / p.group_size();
  float acc = 0.f;
  for (int j = 0; j < p.seqlen_k; ++j)
    acc += prow[j] * to_float(row_ptr<T>(p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                         b, j, hk)[c]);
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
  o[c] = from_float<T>(acc);
}

int64_t s_buffer_bytes(const FwdProblem& p) {
  return static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k * sizeof(float);
}

int ceil_div(int64_t a, int b) { return static_cast<int>((a + b - 1) / b); }

Status k1_check(const FwdProblem& p, const DeviceInfo& device) {
  HFA_RETURN_IF_ERROR(check_min_arch("k1", device, 80));
  HFA_RETURN_IF_ERROR(check_grid_dim("k1", "batch", static_cast<long long>(p.batch) * p.heads_q));
  HFA_RETURN_IF_ERROR(check_grid_dim("k1", "seqlen_q", ceil_div(p.seqlen_q, kTile)));
  return Status::Ok();
}

template <typename T>
Status k1_launch_typed(const FwdProblem& p, const DeviceInfo& device, cudaStream_t stream) {
  const int64_t bytes = s_buffer_bytes(p);
  if (bytes > device.free_memory)
    return make_error(StatusCode::kOutOfMemory,
                      "kernel \"k1\" materializes S in fp32: batch*heads_q*seqlen_q*seqlen_k*4 = "
                      "%.2f GiB, but the device has %.2f GiB free; use kernel \"k2\" or shorter "
                      "sequences", bytes / 1073741824.0, device.free_memory / 1073741824.0);
  float* S = nullptr;
  if (bytes > 0) {
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&S), bytes, stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return make_error(StatusCode::kOutOfMemory,
                        "kernel \"k1\" could not allocate its %.2f GiB S buffer: %s",
                        bytes / 1073741824.0, cudaGetErrorString(err));
    }
  }
  const int bh = p.batch * p.heads_q;
  const dim3 block(kTile, kTile);
  if (p.seqlen_k > 0)
    k1_scores<T><<<dim3(ceil_div(p.seqlen_k, kTile), ceil_div(p.seqlen_q, kTile), bh), block, 0, stream>>>(p, S);
  k1_softmax<<<dim3(ceil_div(p.seqlen_q, kSoftmaxThreads), bh), kSoftmaxThreads, 0, stream>>>(p, S);
  k1_output<T><<<dim3(ceil_div(p.head_dim, kTile), ceil_div(p.seqlen_q, kTile), bh), block, 0, stream>>>(p, S);
  Status launched = cuda_status(cudaGetLastError(), "launching k1");
  if (S) HFA_RETURN_IF_ERROR(cuda_status(cudaFreeAsync(S, stream), "freeing k1's S buffer"));
  return launched;
}

Status k1_launch(const FwdProblem& p, const DeviceInfo& device, cudaStream_t stream) {
  return p.dtype == DType::kBF16 ? k1_launch_typed<__nv_bfloat16>(p, device, stream)
                                 : k1_launch_typed<__half>(p, device, stream);
}

}  // namespace

KernelEntry k1_entry() {
  KernelEntry e;
  e.name = "k1";
  e.description = "naive: 3 kernels (scores, softmax, output), S materialized in GMEM (fp32), "
                  "one thread per element";
  e.supports = "bf16/fp16, any head_dim, causal, GQA/MQA, LSE; sm80+; S needs "
               "batch*heads*seqlen_q*seqlen_k*4 bytes";
  e.auto_priority = 0;  // a teaching baseline; "auto" never picks it
  e.check = k1_check;
  e.launch = k1_launch;
  return e;
}

}  // namespace hfa
