// bwd_sm90's host interface and tile shapes (no CuTe), for the registry's checks.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.h"

namespace hfa::bwd_sm90 {

// One CTA per (KV block of block_n(D) keys, KV head, batch), walking Q blocks of block_m(D, ...)
// rows through a stages(D, ...)-deep ring, in one of two arrangements:
// - d = 64, 128 (bwd_sm90_kernel.cuh): 128-key blocks, each consumer warpgroup owning 64 keys as
//   WGMMA's M, with dK and dV (64 x D fp32) in its registers;
// - d = 256 (bwd_sm90_split_keys.cuh): 64 keys x 256 columns of dK and dV would take 256 of a
//   consumer's 240 registers in that arrangement, so the blocks have 64 keys, 32 per warpgroup,
//   with dK^T and dV^T (256 x 32) in its registers, as FlashAttention-3 does at d = 256.
constexpr int block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }
// Query rows per Q block: 128 at d = 64 (FlashAttention-3's d = 64 shape: each of the five GEMMs
// per block twice as long for the same synchronization; S^T and dP^T take 64 registers each),
// 64 elsewhere, in the deterministic mode (its int64 dQ staging takes 32 KB more at 128 rows
// than the 227 KB hold) and with a sliding window (`local`: at d = 64 it spilled 150 bytes with 128 rows, and its blocks
// cross the window's edges twice as often; measured -19% at window 1024).
constexpr int block_m(int head_dim, bool deterministic, bool local = false) {
  return head_dim == 64 && !deterministic && !local ? 128 : 64;
}
// The Q / dO ring's depth: four for d = 64's 64-row blocks (a Q block's five GEMMs take about
// 1.7 us on an SM, near an L2 round trip for its 16 KB of Q and dO), where 227 KB hold them; two
// elsewhere, where they do not. Measured at d = 64 against two (H100, WORKLOG "bwd_sm90"): 1.006x,
// +1.5-2.2% at 512 and 1k keys, 0 from 4k -- so the loads were not what limits d = 64.
constexpr int stages(int head_dim, bool deterministic, bool local = false) {
  return block_m(head_dim, deterministic, local) * head_dim <= 64 * 64 ? 4 : 2;
}
constexpr bool has_shape(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

// The deterministic mode's CTAs run in pairs (bwd_sm90_cta.cuh: kCtaPairs) at d = 128 and 256:
// clusters of two on adjacent KV blocks that sum their dQ blocks on chip, half the int64 bytes
// into the L2 that bound the mode there (not at d = 64: WORKLOG, "bwd_sm90", session 40).
constexpr bool cta_pairs(int head_dim, bool deterministic) { return deterministic && head_dim >= 128; }

// Shared memory of a shape: K and V, stages x (Q, dO), two dS buffers (bf16/fp16), at d <= 128
// the staged dQ block (fp32, int64 in the deterministic mode; in CTA pairs half of it in int64
// and the two warpgroups' 8 KB dQ mailboxes), at d = 256 (which stages dQ in a consumed Q / dO
// stage) the P tile (and in CTA pairs two 4 KB dQ mailboxes); stages x the row statistics, 1 KB
// of barriers and 1 KB of alignment slack.
constexpr size_t smem_bytes(int head_dim, bool deterministic, bool local) {
  const size_t m = block_m(head_dim, deterministic, local), n = block_n(head_dim), d = head_dim,
               st = stages(head_dim, deterministic, local);
  const size_t tiles = (2 * n * d + st * 2 * m * d + 2 * n * m) * 2 + st * m * 8 + 2048;
  const bool pairs = cta_pairs(head_dim, deterministic);
  if (!has_shape(head_dim)) return 0;
  if (head_dim > 128) return tiles + m * n * 2 + (pairs ? 8192 : 0);
  return tiles + (pairs ? m * d * 8 / 2 + 16384 : m * d * (deterministic ? 8 : 4));
}
// The largest of a head dim's shapes (what the device must offer).
constexpr size_t smem_bytes(int head_dim) {
  size_t most = 0;
  for (int det = 0; det < 2; ++det)
    for (int local = 0; local < 2; ++local)
      most = smem_bytes(head_dim, det, local) > most ? smem_bytes(head_dim, det, local) : most;
  return most;
}
static_assert(smem_bytes(64) <= 232448 && smem_bytes(128) <= 232448 && smem_bytes(256) <= 232448,
              "a bwd_sm90 shape exceeds 227 KB of shared memory");

// The CTA order (BwdProblem::kv_blocks_across_heads; bwd_sm90_cta.cuh, CtaSequence). Under the
// causal mask KV block j visits the Q blocks from its diagonal on, so a KV head's first blocks are
// its longest; in the grid's own order, head by head, the last head's long blocks start last and
// run alone at the end: ncu measured the SMs active 94.3% of the kernel's cycles at d = 256,
// causal, s = 4k (a list-scheduling simulation of the sweep's causal shapes: 3-7% longer than the
// work spread evenly from 512 to 8k keys, balanced at 16k). Launched a batch entry's KV block 0 of
// every head first, then block 1, ..., the long blocks spread over the whole run (simulated:
// within 0.2-2% of even). Measured on the H100 against the grid's order (two rounds, the sweep's
// causal shapes; WORKLOG, "bwd_sm90", session 32): +2.8-4.3% at 4k and 8k keys (d = 64 / 128),
// +3.5% at d = 256 4k, -0.4 to +1.7% at 1k-2k; at 16k -1.6% (d = 64) and -5.7% (d = 256), at 512
// -1.1% (d = 64): hence 1k to 8k keys only. Not with a window (its blocks are nearly equal), nor
// variable-length batches, nor the deterministic mode: its fixed-point dQ measured faster in the
// grid's order (H100 A/B, WORKLOG "bwd_sm90", session 37: causal 4k / 8k +12-15% at d = 64,
// +15% / +46% at d = 128; 1k-2k 0 to +6%, 16k within 2%): its int64 reductions, twice the
// default mode's bytes, seem to suffer from all of a batch entry's heads walked at once (not
// profiled).
inline bool kv_blocks_across_heads(const BwdProblem& bp) {
  const FwdProblem& p = bp.fwd;
  return p.causal && !p.local && !p.varlen() && !bp.deterministic && p.seqlen_k >= 1024 && p.seqlen_k <= 8192;
}

// The deterministic mode's dQ, one of two ways:
// - in launch order (BwdProblem::dq_in_launch_order): one launch of the default kernel per KV
//   block index, each of batch x KV-heads CTAs adding dQ in fp32, the stream completing one launch
//   before the next. No fixed-point passes and the default mode's reduction bytes, but each launch
//   reads every head's Q and dO again and adds to its dQ sums: from HBM, unless one launch's worth
//   (a wave of kLaunchOrderSms heads, 8 bytes per element of Q: Q, dO and the fp32 sums) stays in
//   the 50 MB L2, where the default mode's concurrent KV blocks share them. Hence where seqlen_q x
//   head_dim <= kLaunchOrderMaxQElems (132 x 32768 x 8 B = 35 MB) and a launch's CTAs fill at
//   least kLaunchOrderMinUse of the slots of its waves, one CTA per SM of kLaunchOrderSms.
//   Measured against fixed point (WORKLOG, "bwd_sm90", session 38): H100 d = 64, 512 keys +10% /
//   +18% (causal), 1k-2k keys 0.82-0.94x; H200 d = 64 up to 2k keys +6 to +28% (its HBM is 1.4x
//   faster), d = 128 from 1k 0.63-1.01x, d = 256 0.66-0.97x, 0.74x where a launch filled half of
//   its wave. The SM count is fixed (an H100 SXM's or H200's), not the device's, so that the mode,
//   and so the bits, depend on the problem alone, never on the SMs a launch finds free.
// - otherwise in 64-bit fixed point (BwdProblem::dq_fixed_point), in both arrangements: twice the
//   default mode's reduction bytes and three passes more, but any CTA order. (Until session 38
//   d = 256 summed fp32 in turn order, each KV block waiting for the previous one's additions.)
constexpr int kLaunchOrderSms = 132;
constexpr double kLaunchOrderMinUse = 0.75;
constexpr long long kLaunchOrderMaxQElems = 32768;
constexpr bool dq_in_launch_order(const FwdProblem& p) {
  const long long ctas = static_cast<long long>(p.batch) * p.heads_kv;
  const long long waves = (ctas + kLaunchOrderSms - 1) / kLaunchOrderSms;
  return ctas > 0 && static_cast<double>(ctas) >= kLaunchOrderMinUse * static_cast<double>(waves * kLaunchOrderSms) &&
         static_cast<long long>(p.seqlen_q) * p.head_dim <= kLaunchOrderMaxQElems;
}
constexpr bool dq_fixed_point(bool deterministic, bool in_launch_order) { return deterministic && !in_launch_order; }

template <typename T, int D>
cudaError_t launch_backward(const BwdProblem& bp, cudaStream_t stream);  // bwd_sm90_hdim<D>.cu

// With a sliding window (FwdProblem::local) and/or softcap; launch_backward calls it for such
// problems. bwd_sm90_variants_hdim<D>.cu.
template <typename T, int D, bool kLocal, bool kSoftcap>
cudaError_t launch_variant(const BwdProblem& bp, cudaStream_t stream);

// A variable-length batch (FwdProblem::varlen()), with any mask and score; launch_backward calls
// it for such problems. bwd_sm90_varlen_hdim<D>.cu.
template <typename T, int D>
cudaError_t launch_varlen(const BwdProblem& bp, cudaStream_t stream);

}  // namespace hfa::bwd_sm90
