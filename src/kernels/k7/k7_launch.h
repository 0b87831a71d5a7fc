// K7's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k7 {

// K6's structure with e4m3 operands: 128-row Q tiles (two consumer warpgroups) and 128-key K/V
// tiles (K = 128 for P V is four e4m3 k-steps of 32). At d = 256 the consumers need 240 registers
// for that (k7_kernel.cuh); with 224 the tiles were 64 keys, 6% slower. Each KV tile lives in
// shared memory three times: K, V as loaded, and V transposed (fp8_pv.cuh). Stages: 4 at d = 64
// (104 KB), 2 at d = 128 (112 KB) and d = 256 (224 KB). Deeper rings (4 instead of 2 at d = 128)
// measured the same from s = 1024 and 4-5% slower at s = 512 (WORKLOG, K7). O is stored from
// registers.
constexpr int kBlockM = 128;
constexpr int block_n(int) { return 128; }
constexpr int stages(int head_dim) { return head_dim <= 64 ? 4 : 2; }
// Ping-pong of the consumer warpgroups at d >= 128, as K6 (k6_launch.h: ping_pong).
constexpr bool ping_pong(int head_dim) { return head_dim >= 128; }

constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{kBlockM} * head_dim;
  const size_t kv = static_cast<size_t>(block_n(head_dim)) * head_dim;
  return q + 3 * stages(head_dim) * kv + 1024 + 1024;  // barriers, alignment slack
}
static_assert(smem_bytes(64) <= 232448 && smem_bytes(128) <= 232448 && smem_bytes(256) <= 232448,
              "a k7 tile shape exceeds 227 KB of shared memory");

// How the scores are dequantized (k7_kernel.cuh defines both):
//   PerHeadDescale (k7): q_descale * k_descale per (batch, KV head), folded into the exponent;
//   BlockDescale (k8):   q_block_descale per 128-row Q tile times k_block_descale per 128 keys,
//                        applied to S tile by tile (FwdProblem::fp8_block_scales).
struct PerHeadDescale;
struct BlockDescale;

// T: the output's element type (bf16 or fp16); the inputs are e4m3.
template <typename T, int D, class Scales = PerHeadDescale>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k7_hdim<D>.cu, k8

}  // namespace hfa::k7
