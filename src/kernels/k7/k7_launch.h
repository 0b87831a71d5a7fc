// K7's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k7 {

// K6's structure with e4m3 operands: Q tiles of 64 rows per consumer warpgroup (consumer_warpgroups:
// 128 or 192 rows) and K/V tiles of 128 keys, or 192 (wide_kv_tile) on long enough rows at
// d = 128 when P V accumulates onto O (not now: two_level_pv). P V's K is the tile's keys: four or six e4m3 k-steps of 32. A wide tile spreads each
// tile's fixed work (row max and sum reductions, O rescale, barrier and pipeline waits) over more
// keys; the transposed V of a 192-key tile (d x 192 bytes) takes the 64-byte swizzle; k8's
// 128-key K descale blocks are taken in gcd(keys, 128)-key segments (k7_kernel.cuh,
// BlockDescale). At d = 256 the consumers need 240 registers for 128 keys already
// (k7_kernel.cuh); with 224 the tiles were 64 keys, 6% slower. Each KV tile lives in shared
// memory three times: K, V as loaded, and V transposed (fp8_pv.cuh). Stages: 4 at d = 64, 2 at
// d = 128 and d = 256. Deeper rings (4 instead of 2 at d = 128, 128 keys) measured the same from
// s = 1024 and 4-5% slower at s = 512 (WORKLOG, K7). O is stored from registers.
constexpr int kBlockN = 128;
constexpr int kWideBlockN = 192;
constexpr int stages(int head_dim) { return head_dim <= 64 ? 4 : 2; }
// V transpose units whose ldmatrix is in flight at once per transposer warp (fp8_pv.cuh,
// transpose_v_tile): two at d = 256, where the transposers limited the kernel (their 24
// registers; ncu: the consumers waited on the transposed V for 14% of their time), one elsewhere,
// where two measured 1-3.5% slower (WORKLOG, K7 fourth pass).
constexpr int transpose_units_in_flight(int head_dim) { return head_dim == 256 ? 2 : 1; }
// Ping-pong of the consumer warpgroups at d >= 128, as K6 (k6_launch.h: ping_pong).
constexpr bool ping_pong(int head_dim) { return head_dim >= 128; }
// Whether the consumers take their tile's coordinates from lane 0 (sm90::published_tile): measured
// (H100, same call, two rounds; WORKLOG, K7 sixth pass) +2-5% at d = 64 (every row), +0.5-5% on
// d = 128's 128-key tiles; -0.2-1.5% on its 192-key tiles and at d = 256 -3% at 512 keys, +1% at 16k.
constexpr bool broadcast_tile_coord(int head_dim, int block_n) {
  return head_dim == 64 || (head_dim == 128 && block_n == 128);
}
// Whether the shared storage's base is known uniform (sm90::aligned_shared_storage). Since it is
// (1627b16), ptxas keeps every loop's descriptor arithmetic in uniform registers, as lane 0's
// coordinates above made it do: d = 128's 192-key rows lost 2.5-3.6% against ce5400e (H100 A/B,
// session 42; WORKLOG, K7 eighth pass), so that tile takes the base of before.
constexpr bool uniform_storage_base(int head_dim, int block_n) { return !(head_dim == 128 && block_n > 128); }

// Whether each tile's P V is accumulated from zero and added to O in fp32 (k7_kernel.cuh;
// fp8_pv.cuh: add_tile_to_output), instead of accumulating onto O in the tensor cores, whose FP8
// accumulation keeps about 13 bits: with V of one sign O's relative RMS error was 7.5% over 4096
// keys, 26% over 16k (0.2% with it). Everywhere: correctness first. T costs as many registers as
// O: 32 at d = 64 and 64 on d = 128's 128-key tiles fit (ptxas: 40 / 16 bytes of stack); d = 128's
// 192-key tiles spilled 884 bytes, so d = 128 keeps 128-key tiles (wide_kv_tile). At d = 256 (O
// 128 registers) T only fits in the serial form below.
constexpr bool two_level_pv(int /*head_dim*/) { return true; }
// d = 256: the loop without the intra-warpgroup overlap (S_j, its softmax, then P_j V_j), with P V
// in column blocks whose accumulators take S's registers once P_j is packed: no spills in the
// consumers' loop. In two halves of 128 columns through one accumulator it measured 0.921x (k7) /
// 0.925x (k8) the one-level speed at d = 256 (H100 A/B, WORKLOG K7 session 47) -- the price of O
// without the 26% loss; in four quarters through two accumulators taken in turn (one quarter's
// GEMM runs while the last one joins O) 1.009x / 1.018x the halves (session 48).
constexpr bool serial_two_level_pv(int head_dim) { return head_dim == 256; }
// Where a consumer waits for the previous tile's P V in its overlapped loop (k7_kernel.cuh):
// after its row max (sm90::warpgroup_wait_after), so that the exponentials overlap P V, or with a
// bare wait, which ptxas schedules before the row max. Measured with P V accumulating onto O
// (H200, same call, every head dim; WORKLOG, K7 fifth pass): after the max +1-5% at d = 64,
// +0.4-2.7% at d = 256, +2-4.6% on d = 128's 192-key tiles; on its 128-key tiles (then d = 128 rows
// under 2k keys) the bare wait up to 3% faster. With the two-level accumulation the 128-key tiles
// take every d = 128 row, and there the wait after the max measured (H100, three interleaved
// rounds; WORKLOG, K7 session 48) k7 +5.6% (+10% at 16k keys, 0.99-1.01x at 512) and k8 +0.2%;
// a wait after the row sums (all the exponentials) lost 4-5%.
constexpr bool wait_pv_after_max(int head_dim, int block_n) {
  return two_level_pv(head_dim) || !(head_dim == 128 && block_n == 128);
}

// Wide tiles where they measured faster than 128 keys (WORKLOG, K7 third pass; A/B on the sweep,
// H100, same runs): d = 128, 192 keys: +4-7% from 2k keys, causal from 4k (+1-6%; -3% at 2k).
// Shorter rows lose: the last tile's padding and a causal tile's diagonal cost more than the
// fewer tiles save.
inline bool wide_kv_tile(const FwdProblem& p) {
  return p.head_dim == 128 && !two_level_pv(128) && p.seqlen_k >= (p.causal ? 4096 : 2048);
}
constexpr int max_block_n(int head_dim) { return head_dim == 128 && !two_level_pv(128) ? kWideBlockN : kBlockN; }

// Dense causal problems from these query lengths take their tiles dynamically in head groups
// sized to L2 (sm90::DynamicTileScheduler, as k6 does: k6_launch.h); the others walk the static
// snake rounds. 0: never. Measured on the H100 against the static rounds (two rounds, 16k tokens,
// 2048 / d heads; WORKLOG, "Dense causal in the dynamic order"): d = 64 +1.0-1.8% at 2k, 0 at 4k,
// +3.3% at 8k, 0 at 16k, and another +0.5-2.6% once the loops' exit was warp-uniform
// (sm90::is_end_of_tiles); d = 256 +1.7-1.9% at 4k, +0.3-0.8% from 8k (then -0.1 to -0.9%);
// d = 128 (192-key tiles from 4k) 2-5% slower at every length from 2k, and still 1-4% slower with
// the uniform exit, so not there.
constexpr int dynamic_order_min_seqlen_q(int head_dim) {
  return head_dim == 64 ? 2048 : head_dim == 256 ? 4096 : 0;
}
inline bool dynamic_tile_order(const FwdProblem& p) {
  const int from = dynamic_order_min_seqlen_q(p.head_dim);
  return p.causal && from > 0 && p.seqlen_q >= from;
}

// Consumer warpgroups, each 64 rows of the Q tile: three at d = 64 (192-row Q tiles of 128 keys,
// as FlashAttention-3 has at d = 64): k7 measured +6-15% non-causal and +4-12% causal from 2k
// keys over two warpgroups with 256-key tiles (WORKLOG, K7 fourth pass), -3% at causal 1k keys,
// which keeps two. Two at d >= 128, where the consumers need more than the 160 registers three
// leave them.
constexpr int max_consumer_warpgroups(int head_dim) { return head_dim == 64 ? 3 : 2; }
inline int consumer_warpgroups(const FwdProblem& p) {
  return p.head_dim == 64 && !(p.causal && p.seqlen_k < 2048) ? 3 : 2;
}

// Shared memory of k7's (and k8's) largest tile at this head dim.
constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{64} * max_consumer_warpgroups(head_dim) * head_dim;
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
