#include "kernels/common/sink_grad.h"

#include "kernels/common/backward_workspace.h"
#include "kernels/common/varlen.cuh"

namespace hfa {
namespace {

constexpr int kSinkGradThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;

// One CTA per query head.
__global__ void __launch_bounds__(kSinkGradThreads) backward_sink_grad_kernel(BwdProblem bp) {
  const FwdProblem& p = bp.fwd;
  const int h = blockIdx.x;
  const float sink2 = p.sinks[h * p.sinks_stride] * kLog2e;
  float sum = 0.f;
  for (int b = 0; b < p.batch; ++b) {  // batch entries, or a variable-length batch's sequences
    int q_begin = 0, seqlen_q = p.seqlen_q;
    if (p.varlen()) {
      const SequenceSpan span = sequence_span(p, b);
      q_begin = span.q_begin;
      seqlen_q = span.seqlen_q;
    }
    const float2* stats = reinterpret_cast<const float2*>(bp.row_stats) + workspace_rows(bp, b, h, q_begin, p.varlen()).stats;
    for (int row = threadIdx.x; row < seqlen_q; row += kSinkGradThreads) {
      const float2 st = stats[row];  // (LSE2, D); a row that saw no key has LSE = sink, D = 0
      sum += exp2f(sink2 - st.x) * st.y;
    }
  }
  __shared__ float partial[kSinkGradThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int n = kSinkGradThreads / 2; n > 0; n /= 2) {
    if (threadIdx.x < n) partial[threadIdx.x] += partial[threadIdx.x + n];
    __syncthreads();
  }
  if (threadIdx.x == 0) bp.dsinks[h * bp.dsinks_stride] = -partial[0];
}

}  // namespace

cudaError_t launch_backward_sink_grad(const BwdProblem& bp, cudaStream_t stream) {
  if (bp.fwd.heads_q == 0) return cudaSuccess;
  backward_sink_grad_kernel<<<bp.fwd.heads_q, kSinkGradThreads, 0, stream>>>(bp);
  return cudaGetLastError();
}

}  // namespace hfa
