// FA2's tile shapes per head dim, for the kernels and for the host (shared-memory checks).
// Chosen as the FlashAttention-2 paper partitions work (section 3.3): the forward splits Q across
// warps (each warp owns 16 or 32 query rows and sees all of K and V: no split-K, no cross-warp
// reduction), the backward gives each CTA one KV block and splits every GEMM across warps.
// Measured choices and what was tried: docs/WORKLOG.md, "FA2".
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/backward_workspace.h"

namespace hfa::fa2 {

// Forward: BlockM = 16 * kMTiles * kWarps query rows per CTA, kBlockN keys per K/V tile; Q has one
// buffer, K and V kKVStages each (the two load schedules: fa2_forward.cuh).
// Register budget (255 per thread): O takes kMTiles * D / 2 fp32 registers and S
// kMTiles * kBlockN / 2. Two 16-row tiles per warp (each K/V fragment read from shared memory
// feeds two MMAs) at d <= 128; d = 256 keeps one (O 128 + S 64) and takes 8 warps instead, so
// that K and V tiles serve 128 query rows. Measured on the H100 (docs/WORKLOG.md, "FA2"):
//   d=64   128-key tiles, one buffer each: +6% over 64 keys with two
//   d=128  64-key tiles, two buffers: +3% over 32 keys (one buffer: +1%)
//   d=256  8 warps, 128-key tiles, one buffer: +7% over 64 keys with two, +11% over those with one,
//          and far ahead of 4 warps (x 32 keys with two buffers, or x 64 with one: -9%)
// kSmallSmem: the shape for GPUs with less shared memory per block than the d = 256 shape's
// 192 KB (A100: 163 KB, sm86/sm89: 99 KB); only d = 256 differs: 4 warps, 32-key tiles, two
// buffers, 96 KB.
template <int D, bool kSmallSmem = false>
struct FwdShape {
  static constexpr int kHeadDim = D;
  static constexpr bool kEightWarps = D == 256 && !kSmallSmem;
  static constexpr int kWarps = kEightWarps ? 8 : 4;
  static constexpr int kMTiles = D == 256 ? 1 : 2;  // 16-row MMA tiles per warp
  static constexpr int kBlockM = 16 * kMTiles * kWarps;
  static constexpr int kBlockN = D == 64 ? 128 : D == 128 ? 64 : kSmallSmem ? 32 : 128;
  static constexpr int kKVStages = D == 128 || (D == 256 && kSmallSmem) ? 2 : 1;
  static constexpr int kThreads = 32 * kWarps;
  // 8 warps per SM either way: while one CTA's (or warp's) GEMMs run, another's softmax runs.
  static constexpr int kMinBlocksPerSm = kWarps == 4 ? 2 : 1;
  static constexpr size_t kSmemBytes = size_t(kBlockM + 2 * kKVStages * kBlockN) * D * 2;
};

// Backward: one CTA per (KV block of kBlockN keys, KV head, batch), looping over the Q blocks of
// kBlockM rows of every query head that shares the KV head; 8 warps, each owning 32 rows (two
// 16-row MMA tiles, so every B fragment read from shared memory feeds two MMAs) of every GEMM:
//   S, dP (BlockM x BlockN) and dQ (BlockM x D):  kSRowWarps x kSColWarps warps
//   dK, dV (BlockN x D):                          kKVRowWarps x kKVColWarps warps
// 128-key blocks (d <= 128) halve the dQ additions per FLOP against 64-key blocks, as in FA2.
// Q and dO are double-buffered at d <= 128 (block i + 1 loads while block i computes).
// dQ (kDqStaged): staged in shared memory as fp32 and added to the workspace by sm90's bulk copy
// engine (TMA tensor reductions, one per 32-column slab of the Q block: fa2_backward.cuh) instead
// of fp32 atomics from registers; with the atomics' registers free, the S, dP and dQ GEMMs' k loops
// unroll without spilling: +7% at d=128 on the H100 (the staging alone, +0%; the unroll alone,
// with atomics, +2%). The slabs are 128-byte swizzled, so the C fragments' 8-byte stores are free
// of bank conflicts. d=256 has room for the 64 KB of staging only with one Q/dO buffer (209 KB),
// measured +1.5% over two buffers with atomics. kSmallSmem: the shapes for GPUs with less shared
// memory per block (A100: 163 KB; sm80 code has no bulk reduction anyway): fp32 atomics, and d=256
// with one buffer (144 KB).
template <int D, bool kSmallSmem = false>
struct BwdShape {
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = 2;  // 16-row MMA tiles per warp, in every GEMM
  // 128-row Q blocks at d=64: twice the work per iteration for the same fixed costs (barriers,
  // LSE/D loads) and more MMAs per fragment in the narrow GEMMs; +13% there, measured.
  static constexpr int kBlockM = D == 64 ? 128 : 64;
  static constexpr int kBlockN = D == 256 ? 64 : 128;
  static constexpr int kStages = D == 256 ? 1 : 2;
  static constexpr int kSRowWarps = kBlockM / (16 * kMTiles);
  static constexpr int kSColWarps = kWarps / kSRowWarps;
  static constexpr int kKVRowWarps = kBlockN / (16 * kMTiles);
  static constexpr int kKVColWarps = kWarps / kKVRowWarps;
  static constexpr bool kDqStaged = !kSmallSmem;  // when compiled for sm90 (kernel)
  static constexpr int kDqSlabCols = 32;           // fp32 columns per 128-byte swizzled slab
  // The staged dQ block and 1 KB to align it (the 128-byte swizzle repeats every 1024 bytes).
  static constexpr size_t kDqStageBytes = kDqStaged ? size_t(kBlockM) * D * sizeof(float) + 1024 : 0;
  static constexpr size_t kSmemBytes =
      size_t(2 * kBlockN * D + kStages * 2 * kBlockM * D + 2 * kBlockM * kBlockN) * 2 +
      size_t(kStages * kBlockM) * 2 * sizeof(float) +  // the row statistics (LSE, D) per stage
      kDqStageBytes;
  // dK and dV are staged for their stores in the Q and dO buffers.
  static_assert(kBlockN <= kStages * kBlockM, "a (BlockN x D) tile fits in the Q/dO buffers");
  static_assert(kRowStatsAlign % kBlockM == 0, "a Q block's row statistics lie in the padding");
};

// Whether a head dim has a small-smem shape of its own (else its kernel is instantiated once).
template <template <int, bool> class Shape, int D>
constexpr bool kHasSmallSmemShape = Shape<D, true>::kSmemBytes != Shape<D, false>::kSmemBytes;

}  // namespace hfa::fa2
