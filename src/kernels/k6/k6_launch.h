// K6's host interface and tile configuration (no CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::k6 {

// Keys per KV tile and ring depth per head dim (the Q tile is 128 rows, 64 per consumer warpgroup,
// or 192 rows: wide_q_tile below), chosen by measurement (WORKLOG, K6): 128 x 5 stages at d = 64 (a
// 192-key tile lost 25% at s = 512), 128 x 2 at d = 128 (FlashAttention-3's 176 x 2 lost 3-10% at s
// <= 2k and gained < 1% at 16k; the third stage went to O's staging), 80 x 2 at d = 256 (+2-6% over
// 64 x 2: fewer softmax passes per key; the N = 80 GMMA needs sm90/common/gmma_extended.cuh). Each
// fits 227 KB of shared memory (Q tile + stages x (K + V tiles) + O staging) and, with the
// intra-warpgroup overlap keeping the next tile's S and this tile's P live at once, 240 registers
// without spilling (the 192-row tile: 160, also without spilling).
// O leaves through shared memory and a TMA store (sm90/common/staged_output.cuh): in staging
// tiles of its own at d <= 128; d = 256 has no 64 KB left for them and stages O in the ring
// stages of the tile's last K and V tile instead.
constexpr int block_n(int head_dim) { return head_dim <= 128 ? 128 : 80; }
// Consumer warpgroups (64 Q rows each): two (128-row Q tiles), or three (192 rows) at d = 64 where
// wide_q_tile says so. At d = 64 each warpgroup's GEMMs are short next to its softmax and a third
// warpgroup keeps the tensor cores busier. With the speculative softmax (k6_kernel.cuh, 7.), which
// pays on the 192-row tiles only, the 192-row tile against the 128-row one (WORKLOG, K6 ninth
// pass): non-causal +1.3% at s = 512 and +1.7% at 1024 (where it computes 12.5% padding rows);
// causal -8% at 512 and -11% at 1024 (a 192-row tile crosses the diagonal on two 128-key tiles),
// +2% at 2048, +6% at 4096; where it already ran (non-causal from 2048, causal from 8192) the
// speculative softmax made it another 5-17% faster. So: non-causal wherever its padding is at most
// 12.5% more rows than the 128-row tile's, causal from seqlen_q = 2048. d >= 128 keeps two: 160
// registers per thread cannot hold their S, P and O.
constexpr int kWideTileMinCausalSeqlenQ = 2048;
inline bool wide_q_tile(const FwdProblem& p) {
  if (p.head_dim != 64) return false;
  if (p.causal) return p.seqlen_q >= kWideTileMinCausalSeqlenQ;
  const long long rows_wide = (p.seqlen_q + 191LL) / 192 * 192;
  const long long rows = (p.seqlen_q + 127LL) / 128 * 128;
  return rows_wide * 8 <= rows * 9;
}
constexpr int max_consumer_warpgroups(int head_dim) { return head_dim == 64 ? 3 : 2; }
constexpr int stages(int head_dim) { return head_dim <= 64 ? 5 : 2; }
constexpr bool own_output_tiles(int head_dim) { return head_dim <= 128; }
// Ping-pong of the consumer warpgroups (k6_kernel.cuh, 1.) at d >= 128 only: in the ablation at
// 4becc9284f9f (PERFORMANCE.md) k6 without it was faster at d = 64 in 11 of 12 configurations
// (+1.5% geomean, +3.6% at s = 16k), while it gains 0.5% at d = 128 and 1.5-5% at d = 256.
// (Without the staged O, ping-pong had paid at every head dim.)
constexpr bool ping_pong(int head_dim) { return head_dim >= 128; }
// The intra-warpgroup overlap (k6_kernel.cuh, 2.) everywhere but on d = 64's 192-row tiles: with
// three warpgroups and the speculative softmax, issuing one GEMM at a time measured +3.5 to +9%
// non-causal from s = 512 to 4096, +2.5% at 8k, 0 at 16k, and +4.5 to +7.5% causal (three A/B
// rounds; WORKLOG, K6 ninth pass). Two warpgroups at any head dim still need it (ablation:
// without it d = 128 and 256 lose 5-7%).
constexpr bool intra_warpgroup_overlap(int head_dim, int consumer_warpgroups) {
  return !(head_dim == 64 && consumer_warpgroups == 3);
}
// Dense problems under the causal mask take their tiles dynamically, in head groups sized to L2
// (sm90/common/tile_scheduler.cuh: DynamicTileScheduler), from these query lengths; shorter ones
// walk the static snake rounds. Measured against the static rounds on the H100 (same binary, two
// rounds, 16k tokens, 16 heads; WORKLOG, "Dense causal in the dynamic order"): d = 64 -2% at 1k,
// +4.5 / +6 / +1.4 / +1.2% at 2k / 4k / 8k / 16k; d = 128 -2% at 1k, +0.8 / +1.5 / +3.7 / +4.5%;
// d = 256 -1% at 1k, -4% at 2k, +1.8 / +4.6 / +5.2% from 4k -- all before the loop's exit was
// made warp-uniform (sm90::is_end_of_tiles), which added 1-3% at d = 64 and 256. With softcap:
// first 2-4% slower, then, with the uniform exit, +0.2-1.6% at d = 128 and +1.4-3.2% at d = 256
// from 4k.
constexpr int dynamic_order_min_seqlen_q(int head_dim) { return head_dim <= 128 ? 2048 : 4096; }
// Sliding windows too, whose first Q tiles see fewer keys as causal ones do: in the static rounds
// a window of 4096 at 16k kept the SMs busy 82% of the kernel's time (ncu, d = 128). Measured on the
// H100 against the static rounds (same call, two rounds; WORKLOG, "Sliding windows in the dynamic
// order"): window 4096 at 16k +12 / +13 / +10% at d = 64 / 128 / 256 (softcap too); at d = 64 also
// +11% at 4k (window 1024) and +18% at 2k (window 1024 both ways), where d = 128 and 256 measured
// -0.3 to -3% and 0 to -1.5%. So from 2k at d = 64 and from 8k above (8k: between those points).
constexpr int dynamic_order_min_seqlen_q_window(int head_dim) { return head_dim == 64 ? 2048 : 8192; }
inline bool dynamic_tile_order(const FwdProblem& p) {
  if (p.varlen()) return false;
  if (p.local) return p.seqlen_q >= dynamic_order_min_seqlen_q_window(p.head_dim);
  return p.causal && p.seqlen_q >= dynamic_order_min_seqlen_q(p.head_dim);
}
// Shared memory of the largest tile k6 runs at this head dim.
constexpr size_t smem_bytes(int head_dim) {
  const size_t q = size_t{64} * max_consumer_warpgroups(head_dim) * head_dim * 2;
  const size_t kv = static_cast<size_t>(block_n(head_dim)) * head_dim * 2;
  const size_t o = own_output_tiles(head_dim) ? q : 0;
  return q + 2 * stages(head_dim) * kv + o + 1024 + 1024;  // barriers, alignment slack
}
static_assert(smem_bytes(64) <= 232448 && smem_bytes(128) <= 232448 && smem_bytes(256) <= 232448,
              "a k6 tile shape exceeds 227 KB of shared memory");

// The ablation of the FA3 paper's Table 2: k6 with both overlaps, and with one switched off.
enum class Variant { kFull, kNoPingPong, kNoIntraWarpgroupOverlap };

template <typename T, int D, Variant V>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream);  // k6_hdim<D>.cu

// k6 (Variant::kFull) with a sliding window (FwdProblem::local) and/or softcap; launch_forward
// calls it for such problems. k6_variants_hdim<D>.cu.
template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_variant(const FwdProblem& p, cudaStream_t stream);

// k6 on a variable-length batch (FwdProblem::varlen()), with or without a window and softcap.
// k6_varlen_hdim<D>.cu.
template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_varlen(const FwdProblem& p, cudaStream_t stream);

}  // namespace hfa::k6
