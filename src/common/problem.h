// The validated, normalized form of ForwardArgs that kernels consume. Plain data, passed to
// kernels by value. Strides are in elements; head_dim is contiguous.
#pragma once

#include <cstdint>

#include "hfa/hfa.h"

// Helpers callable from both host code and kernels.
#if defined(__CUDACC__)
#define HFA_HOST_DEVICE __host__ __device__
#else
#define HFA_HOST_DEVICE
#endif

namespace hfa {

struct FwdProblem {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // may be null: not requested

  DType dtype = DType::kBF16;      // of q, k, v
  DType out_dtype = DType::kBF16;  // of o: dtype, except for e4m3 inputs (bf16 or fp16 then)
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;

  // (batch, seqlen, heads) strides of each tensor.
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  // (batch, heads_q, seqlen_q) strides of lse.
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;

  float softmax_scale = 1.0f;
  bool causal = false;

  // Sliding window (ForwardArgs::window_left/right), normalized by the API: `local` when a window
  // other than the causal mask is in force; then causal is false, window_left and window_right
  // are in [0, kUnboundedWindow] (an unbounded side is kUnboundedWindow, which no query's window
  // reaches past), and query i sees key j iff
  // i + causal_offset() - window_left <= j <= i + causal_offset() + window_right.
  // A window of (-1, 0) is normalized to causal, (-1, -1) to neither.
  bool local = false;
  int window_left = 0, window_right = 0;
  // ForwardArgs::softcap: scores are softcap * tanh(softmax_scale * q.k / softcap) when > 0.
  float softcap = 0.f;
  // ForwardArgs::sinks: fp32 (heads_q) logits added to each row's softmax denominator, or null.
  const float* sinks = nullptr;
  int64_t sinks_stride = 0;

  // e4m3 inputs: fp32 (batch, heads_kv) dequantization factors (ForwardArgs::q_descale ...).
  struct Descale {
    const float* data = nullptr;
    int64_t batch_stride = 0, head_stride = 0;
    HFA_HOST_DEVICE float at(int b, int hk) const { return data[b * batch_stride + hk * head_stride]; }
  };
  Descale q_descale, k_descale, v_descale;
  // e4m3 inputs with block quantization (ForwardArgs::q_block_descale, k_block_descale): fp32
  // (batch, heads, ceil(seqlen / kFp8ScaleBlock)); then q_descale and k_descale are empty.
  struct BlockDescale {
    const float* data = nullptr;
    int64_t batch_stride = 0, head_stride = 0, block_stride = 0;
    HFA_HOST_DEVICE float at(int b, int h, int block) const {
      return data[b * batch_stride + h * head_stride + block * block_stride];
    }
  };
  BlockDescale q_block_descale, k_block_descale;
  bool fp8_block_scales = false;  // the block descales were given (k8's inputs)

  // Variable-length batches (ForwardArgs::cu_seqlens_q ...): sequence b's queries are rows
  // [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of the packed q and o (total_q rows), its keys rows
  // [cu_seqlens_k[b], ...) of k and v (total_k rows), the first seqused_k[b] of them when given.
  // Then batch is the number of sequences, seqlen_q and seqlen_k are max_seqlen_q/k (bounds of
  // every sequence's), every batch stride (lse's too) is 0 and lse is (heads_q, total_q).
  // Kernels see one sequence as a dense problem of its own through sequence_view()
  // (kernels/common/varlen.cuh).
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  const int* seqused_k = nullptr;
  int total_q = 0, total_k = 0;

  // The bound an unbounded window side is normalized to (larger than any seqlen_q + seqlen_k
  // the API accepts for a window: it checks that).
  static constexpr int kUnboundedWindow = 1 << 30;

  HFA_HOST_DEVICE bool varlen() const { return cu_seqlens_q != nullptr; }
  // The rows and batch entries of the TMA views of q / o and k / v: a variable-length batch's
  // packed tensors are one batch entry of total_q (total_k) rows.
  HFA_HOST_DEVICE int q_rows() const { return varlen() ? total_q : seqlen_q; }
  HFA_HOST_DEVICE int k_rows() const { return varlen() ? total_k : seqlen_k; }
  HFA_HOST_DEVICE int tma_batch() const { return varlen() ? 1 : batch; }

  // Query heads per KV head (GQA group size).
  HFA_HOST_DEVICE int group_size() const { return heads_q / heads_kv; }
  // Bottom-right causal alignment: query i sees key j iff j <= i + causal_offset().
  HFA_HOST_DEVICE int causal_offset() const { return seqlen_k - seqlen_q; }
};

// The validated form of BackwardArgs: the forward problem (q, k, v, o, lse, all required here)
// plus dO and the three gradients, and the fp32 workspace the launch allocates.
struct BwdProblem {
  FwdProblem fwd;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // dq, dk and dv in fp32 (BackwardArgs: all three fp32), not in the inputs' dtype: the kernels
  // store their fp32 sums unrounded.
  bool grads_fp32 = false;
  DType grad_dtype() const { return grads_fp32 ? DType::kFP32 : fwd.dtype; }
  // (batch, seqlen, heads) strides: dout and dq like q, dk and dv like k.
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;

  // Workspace, contiguous fp32, set by the launch: dQ accumulator (batch, heads_q, seqlen_q,
  // head_dim) and per query row the pair (LSE in base 2, D = rowsum(dO * O)), (batch, heads_q,
  // row_stats_rows, 2) with the rows padded (fa2: to a multiple of its largest Q block).
  // BackwardArgs::dsinks: fp32 (heads_q), written, or null.
  float* dsinks = nullptr;
  int64_t dsinks_stride = 0;

  float* dq_accum = nullptr;
  float* row_stats = nullptr;
  int row_stats_rows = 0;

  // BackwardArgs::deterministic: dq added in KV-block order, with one turn counter per
  // (batch, query head, Q block, dq slab) in the workspace (zeroed by the launch) -- or, with
  // dq_fixed_point, in 64-bit fixed point, where the order does not matter.
  bool deterministic = false;
  int* dq_turns = nullptr;

  // The deterministic mode of bwd_sm90 where its CTAs of one KV block index fill the GPU (set by
  // its launch): one launch per KV block index j (grid (1, KV heads, batch), kv_block_offset = j)
  // of the default kernel, adding dQ in fp32. Within a launch each dq row gets one block's
  // addition, and the launches complete in stream order: dq is summed in KV-block order.
  bool dq_in_launch_order = false;
  int kv_block_offset = 0;

  // The deterministic mode of bwd_sm90 otherwise (set by its launch; backward_workspace.h,
  // "fixed-point dQ"): dq_accum holds int64 (dq_accum_fixed()), each query row's contributions
  // scaled by the power of two dq_scale[row] (a float per row-statistics row) that its bound
  // allows, abs_max_kv the largest |K| and |V| (fp32 bits, for atomicMax) that bound takes. Integer
  // additions give the same bits in any order: no turns, no waiting, and any SM count.
  bool dq_fixed_point = false;
  float* dq_scale = nullptr;
  unsigned* abs_max_kv = nullptr;
  HFA_HOST_DEVICE long long* dq_accum_fixed() const { return reinterpret_cast<long long*>(dq_accum); }

  // bwd_sm90's CTA order (set by its launch): the grid is (KV heads, KV blocks, batch) instead of
  // (KV blocks, KV heads, batch), so that a batch entry's KV heads take their KV block 0 first,
  // then block 1, ... (under the causal mask the first blocks are the longest).
  bool kv_blocks_across_heads = false;
};

// What a kernel needs to know about the GPU it would run on. Filled from the current device by
// the API; tests build one by hand to exercise architecture rules without a GPU.
struct DeviceInfo {
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t max_smem_per_block_optin = 0;  // bytes
  int64_t free_memory = 0;               // bytes

  int cc() const { return cc_major * 10 + cc_minor; }
};

}  // namespace hfa
