// quantize_fp8: bf16/fp16 Q, K, V -> e4m3 and descales, with the optional Hadamard transform of
// Q and K along head_dim and the optional mean-key subtraction (hfa.h, QuantizeFp8Args).
//
// A CTA (4 warps) owns one 128-row block of one (batch, head); a warp takes one row at a time,
// each lane d / 32 consecutive channels. The transform runs in registers: the Walsh-Hadamard
// butterflies whose partner channel is in the same lane are register pairs, the others one
// shuffle (lane ^ stride / (d / 32)). The rows are read twice (once for the block's amax, once
// to quantize; the second read mostly hits L2) rather than kept: at d = 256 a block is 64 KB.
//
// Passes: per-(batch, KV head) scales (block = false) need every block's amax before any value
// is quantized: pass 1 writes each block's amax to the workspace, pass 2 reduces its group's
// and quantizes. Block scales need one pass. The mean key (optional) is a pass before both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/hadamard.h"
#include "common/status_util.h"
#include "common/workspace_pool.h"
#include "kernels/quantize_fp8/quantize_fp8.h"

namespace hfa {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerBlock = kFp8ScaleBlock;  // 128
constexpr float kE4M3Max = 448.f;

enum class Pass {
  kAmax,              // block amax -> workspace (per-(batch, KV head) scales, pass 1)
  kQuantizeGroup,     // reduce the group's amaxes from the workspace, quantize (pass 2)
  kQuantizeBlock,     // block scales: amax, descale and quantize in one
};

struct RowsJob {
  QuantizeProblem::Tensor t;
  int batch_heads_per_group;  // heads sharing one per-(batch, KV head) scale (Q: heads_q / heads_kv)
  int blocks;                 // ceil(seqlen / 128)
  float* amax;                // workspace (batch, heads, blocks)
  const float* mean;          // (batch, heads, head_dim) or null
  uint64_t seed;
};

template <typename T>
__device__ __forceinline__ float to_f32(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return __bfloat162float(x);
}

// Row `row` of head `h` in batch `b`, this lane's E channels, transformed (mean, signs, WHT).
template <typename T, int D>
__device__ __forceinline__ void load_row(const RowsJob& job, int b, int h, int row, int lane,
                                         float (&x)[D / 32]) {
  constexpr int E = D / 32;
  const T* in = static_cast<const T*>(job.t.in) + b * job.t.in_batch_stride +
                row * job.t.in_row_stride + h * job.t.in_head_stride + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = to_f32(in[e]);
  if (job.mean) {
    const float* m = job.mean + (static_cast<int64_t>(b) * job.t.heads + h) * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] -= m[e];
  }
  if (!job.t.hadamard) return;
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] *= hadamard_sign(job.seed, lane * E + e);
  // Butterflies on channel pairs (c, c + s), c without bit s: (a, b) -> (a + b, a - b).
#pragma unroll
  for (int s = 1; s < E; s *= 2)
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (!(e & s)) {
        const float a = x[e], c = x[e + s];
        x[e] = a + c;
        x[e + s] = a - c;
      }
#pragma unroll
  for (int s = E; s < D; s *= 2) {
    const int lane_bit = s / E;
    const bool high = lane & lane_bit;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], lane_bit);
      x[e] = high ? other - x[e] : x[e] + other;
    }
  }
  constexpr float kNorm = 1.f / (D == 64 ? 8.f : D == 128 ? 11.313708498984761f : 16.f);
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] *= kNorm;
}

__device__ __forceinline__ float block_max(float v, float* shared) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared[w]);
  return m;
}

template <typename T, int D, Pass kPass>
__global__ void __launch_bounds__(kWarps * 32) quantize_rows_kernel(const RowsJob job) {
  constexpr int E = D / 32;
  __shared__ float warp_max[kWarps];
  const int block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = block * kRowsPerBlock;
  const int rows = max(0, min(kRowsPerBlock, job.t.seqlen - row0));

  float amax;
  if constexpr (kPass == Pass::kQuantizeGroup) {  // the max over the group's heads and blocks
    const int h0 = (h / job.batch_heads_per_group) * job.batch_heads_per_group;
    const int n = job.batch_heads_per_group * job.blocks;
    const float* a = job.amax + (static_cast<int64_t>(b) * job.t.heads + h0) * job.blocks;
    float m = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, a[i]);
    amax = block_max(m, warp_max);
  } else {
    float m = 0.f;
    for (int r = warp; r < rows; r += kWarps) {
      float x[E];
      load_row<T, D>(job, b, h, row0 + r, lane, x);
#pragma unroll
      for (int e = 0; e < E; ++e) m = fmaxf(m, fabsf(x[e]));
    }
    amax = block_max(m, warp_max);
  }
  if constexpr (kPass == Pass::kAmax) {
    if (threadIdx.x == 0) job.amax[(static_cast<int64_t>(b) * job.t.heads + h) * job.blocks + block] = amax;
    return;
  }
  // The descale: per block, or once per (batch, KV head) group.
  if (threadIdx.x == 0) {
    const bool writer = kPass == Pass::kQuantizeBlock ? block < job.blocks
                                                      : block == 0 && h % job.batch_heads_per_group == 0;
    const int dh = kPass == Pass::kQuantizeBlock ? h : h / job.batch_heads_per_group;
    if (writer)
      job.t.descale[b * job.t.descale_batch_stride + dh * job.t.descale_head_stride +
                    block * job.t.descale_block_stride] = amax / kE4M3Max;
  }
  const float inv = amax > 0.f ? kE4M3Max / amax : 0.f;
  for (int r = warp; r < rows; r += kWarps) {
    float x[E];
    load_row<T, D>(job, b, h, row0 + r, lane, x);
    __nv_fp8_storage_t* out = static_cast<__nv_fp8_storage_t*>(job.t.out) + b * job.t.out_batch_stride +
                              (row0 + r) * job.t.out_row_stride + h * job.t.out_head_stride + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = __nv_cvt_float_to_fp8(x[e] * inv, __NV_SATFINITE, __NV_E4M3);
  }
}

// mean[b][h][c] = the mean over rows of K[b, :, h, c] (fp32; 0 for an empty sequence).
template <typename T, int D>
__global__ void __launch_bounds__(256) mean_row_kernel(const QuantizeProblem::Tensor t, float* mean) {
  constexpr int kRowsAtOnce = 256 / D;
  __shared__ float partial[256];
  const int h = blockIdx.x, b = blockIdx.y;
  const int c = threadIdx.x % D, r0 = threadIdx.x / D;
  const T* in = static_cast<const T*>(t.in) + b * t.in_batch_stride + h * t.in_head_stride + c;
  float sum = 0.f;
  for (int r = r0; r < t.seqlen; r += kRowsAtOnce) sum += to_f32(in[r * t.in_row_stride]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x < D) {
    float total = 0.f;
    for (int i = 0; i < kRowsAtOnce; ++i) total += partial[i * D + threadIdx.x];
    mean[(static_cast<int64_t>(b) * t.heads + h) * D + c] = t.seqlen > 0 ? total / t.seqlen : 0.f;
  }
}

template <typename T, int D>
cudaError_t run_passes(const QuantizeProblem& p, float* workspace, cudaStream_t stream) {
  float* mean = nullptr;
  if (p.k.minus_mean) {
    mean = workspace;
    workspace += static_cast<int64_t>(p.batch) * p.heads_kv * D;
    mean_row_kernel<T, D><<<dim3(p.heads_kv, p.batch), 256, 0, stream>>>(p.k, mean);
  }
  const int group_q = p.heads_q / p.heads_kv;
  for (const QuantizeProblem::Tensor* t : {&p.q, &p.k, &p.v}) {
    RowsJob job{*t, t == &p.q ? group_q : 1, (t->seqlen + kRowsPerBlock - 1) / kRowsPerBlock,
                nullptr, t->minus_mean ? mean : nullptr, p.hadamard_seed};
    const dim3 grid(std::max(job.blocks, 1), t->heads, p.batch);
    if (t->block) {
      quantize_rows_kernel<T, D, Pass::kQuantizeBlock><<<grid, kWarps * 32, 0, stream>>>(job);
    } else {
      job.amax = workspace;
      workspace += static_cast<int64_t>(p.batch) * t->heads * std::max(job.blocks, 1);
      job.blocks = std::max(job.blocks, 1);  // an empty sequence: one block of amax 0
      quantize_rows_kernel<T, D, Pass::kAmax><<<grid, kWarps * 32, 0, stream>>>(job);
      quantize_rows_kernel<T, D, Pass::kQuantizeGroup><<<grid, kWarps * 32, 0, stream>>>(job);
    }
    if (cudaError_t err = cudaGetLastError()) return err;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t run_for_head_dim(const QuantizeProblem& p, float* workspace, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return run_passes<T, 64>(p, workspace, stream);
    case 128: return run_passes<T, 128>(p, workspace, stream);
    case 256: return run_passes<T, 256>(p, workspace, stream);
  }
  return cudaErrorInvalidValue;  // validation admits only these
}

}  // namespace

Status launch_quantize_fp8(const QuantizeProblem& p, cudaStream_t stream) {
  int64_t floats = p.k.minus_mean ? static_cast<int64_t>(p.batch) * p.heads_kv * p.head_dim : 0;
  for (const QuantizeProblem::Tensor* t : {&p.q, &p.k, &p.v})
    if (!t->block)
      floats += static_cast<int64_t>(p.batch) * t->heads *
                std::max(1, (t->seqlen + kRowsPerBlock - 1) / kRowsPerBlock);
  float* workspace = nullptr;
  if (floats > 0)
    HFA_RETURN_IF_ERROR(cuda_status(workspace_alloc(&workspace, floats * sizeof(float), stream),
                                    "allocating quantize_fp8's workspace"));
  const cudaError_t err = p.dtype == DType::kFP16 ? run_for_head_dim<__half>(p, workspace, stream)
                                                   : run_for_head_dim<__nv_bfloat16>(p, workspace, stream);
  const cudaError_t free_err = workspace ? workspace_free(workspace, stream) : cudaSuccess;
  HFA_RETURN_IF_ERROR(cuda_status(err, "launching quantize_fp8"));
  return cuda_status(free_err, "freeing quantize_fp8's workspace");
}

}  // namespace hfa
