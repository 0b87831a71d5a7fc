// K7's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k7 {

// K6's structure with e4m3 operands: 128-row Q tiles (two consumer warpgroups) and K/V tiles of
// 128 keys, or wide_block_n keys (wide_kv_tile) on long enough rows: 256 at d = 64, 192 at d = 128.
// P V's K is the tile's keys: four, six or eight e4m3 k-steps of 32. A wide tile spreads each
// tile's fixed work (row max and sum reductions, O rescale, barrier and pipeline waits) over more
// keys; the transposed V of a 192-key tile (d x 192 bytes) takes the 64-byte swizzle; k8's
// 128-key K descale blocks are taken in gcd(keys, 128)-key segments (k7_kernel.cuh,
// BlockDescale). At d = 256 the consumers need 240 registers for 128 keys already
// (k7_kernel.cuh); with 224 the tiles were 64 keys, 6% slower. Each KV tile lives in shared
// memory three times: K, V as loaded, and V transposed (fp8_pv.cuh). Stages: 4 at d = 64, 2 at
// d = 128 and d = 256. Deeper rings (4 instead of 2 at d = 128, 128 keys) measured the same from
// s = 1024 and 4-5% slower at s = 512 (WORKLOG, K7). O is stored from registers.
constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int wide_block_n(int head_dim) { return head_dim <= 64 ? 256 : 192; }
constexpr int stages(int head_dim) { return head_dim <= 64 ? 4 : 2; }
// V transpose units whose ldmatrix is in flight at once per transposer warp (fp8_pv.cuh,
// transpose_v_tile): two where the transposers limited the kernel — d = 256 (their 24 registers;
// ncu: the consumers waited on the transposed V for 14% of their time) and 256-key tiles at
// d = 64 — one elsewhere, where two measured 1-3.5% slower (WORKLOG, K7 fourth pass).
constexpr int transpose_units_in_flight(int head_dim, int block_n) {
  return head_dim == 256 || block_n == 256 ? 2 : 1;
}
// Ping-pong of the consumer warpgroups at d >= 128, as K6 (k6_launch.h: ping_pong).
constexpr bool ping_pong(int head_dim) { return head_dim >= 128; }

// Wide tiles where they measured faster than 128 keys (WORKLOG, K7 third pass; A/B on the sweep,
// H100, same runs): d = 128, 192 keys: +4-7% from 2k keys, causal from 4k (+1-6%; -3% at 2k).
// d = 64, 256 keys: +2-5% non-causal from 2k keys (against 192 from 8k: +2-3%), causal +1.5-2%
// from 8k and -0.5% to -11% below. Shorter rows lose: the last tile's padding and a causal tile's
// diagonal cost more than the fewer tiles save. k8 (block_scales) at d = 64 measured 7% slower
// with 192-key tiles (three descale segments per tile) at 8k-16k keys, so it keeps 128 there.
inline bool wide_kv_tile(const FwdProblem& p) {
  if (p.head_dim == 64) return !p.fp8_block_scales && p.seqlen_k >= (p.causal ? 8192 : 2048);
  if (p.head_dim == 128) return p.seqlen_k >= (p.causal ? 4096 : 2048);
  return false;
}
constexpr int max_block_n(int head_dim) { return head_dim <= 128 ? wide_block_n(head_dim) : kBlockN; }

// Shared memory of k7's (and k8's) largest tile at this head dim.
constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{kBlockM} * head_dim;
  const size_t kv = static_cast<size_t>(max_block_n(head_dim)) * head_dim;
  return q + 3 * stages(head_dim) * kv + 1024 + 1024;  // barriers, alignment slack
}
static_assert(smem_bytes(64) <= 232448 && smem_bytes(128) <= 232448 && smem_bytes(256) <= 232448,
              "a k7 tile shape exceeds 227 KB of shared memory");

// How the scores are dequantized (k7_kernel.cuh defines both):
//   PerHeadDescale (k7): q_descale * k_descale per (batch, KV head), folded into the exponent;
//   BlockDescale (k8):   q_block_descale per 128-row Q tile times k_block_descale per 128 keys,
//                        folded per gcd(tile keys, 128)-key segment of S (FwdProblem::fp8_block_scales).
struct PerHeadDescale;
struct BlockDescale;

// T: the output's element type (bf16 or fp16); the inputs are e4m3.
template <typename T, int D, class Scales = PerHeadDescale>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k7_hdim<D>.cu, k8

}  // namespace hfa::k7
