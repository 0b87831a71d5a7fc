// quantize_fp8's host interface: the validated problem (src/api/quantize.cpp fills it) and the
// launch (quantize_fp8.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hfa/hfa.h"

namespace hfa {

struct QuantizeProblem {
  // One tensor to quantize: the bf16/fp16 input, the e4m3 output ((batch, seqlen, heads) strides
  // in elements, head_dim contiguous), and its fp32 descales ((batch, head, block) strides; the
  // block stride is 0 for per-(batch, KV head) descales, whose head is the KV head).
  struct Tensor {
    const void* in = nullptr;
    void* out = nullptr;
    int64_t in_batch_stride = 0, in_row_stride = 0, in_head_stride = 0;
    int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;
    int seqlen = 0, heads = 0;
    float* descale = nullptr;
    int64_t descale_batch_stride = 0, descale_head_stride = 0, descale_block_stride = 0;
    bool block = false;      // one descale per 128 rows of each head
    bool hadamard = false;   // the transform along head_dim (Q and K)
    bool minus_mean = false; // subtract the (batch, head)'s mean row (K)
  };
  Tensor q, k, v;
  DType dtype = DType::kBF16;
  int batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  uint64_t hadamard_seed = 0;
};

// Launches the passes on `stream`; allocates (stream-ordered) and frees its workspace.
Status launch_quantize_fp8(const QuantizeProblem& p, cudaStream_t stream);

}  // namespace hfa
