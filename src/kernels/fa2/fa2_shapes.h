// FA2's tile shapes per head dim, for the kernels and for the host (shared-memory checks).
// Chosen as the FlashAttention-2 paper partitions work (section 3.3): the forward splits Q across
// warps (each warp owns 16 or 32 query rows and sees all of K and V: no split-K, no cross-warp
// reduction), the backward gives each CTA one KV block and splits every GEMM across warps.
// Measured choices and what was tried: docs/WORKLOG.md, "FA2".
#pragma once

#include <cstddef>

namespace hfa::fa2 {

// Forward: BlockM = 16 * kMTiles * kWarps query rows per CTA, kBlockN keys per K/V tile; Q has one
// buffer, K and V two each (tile j+1 loads while tile j computes; one barrier per tile).
// Register budget (255 per thread, two CTAs of 4 warps per SM): O takes kMTiles * D / 2 fp32
// registers and S kMTiles * kBlockN / 2. Two 16-row tiles per warp (each K/V fragment read from
// shared memory feeds two MMAs) fit at d=64 with 64-key tiles (O 64 + S 64) and at d=128 with
// 32-key tiles (O 128 + S 32: 237 registers; 64-key tiles spilled); d=256 keeps one (O 128 + S 16).
// 16-key tiles at d=128 fit easily (213 registers) but ran 17% slower: per-tile softmax overhead.
template <int D>
struct FwdShape {
  static constexpr int kWarps = 4;
  static constexpr int kMTiles = D == 256 ? 1 : 2;  // 16-row MMA tiles per warp
  static constexpr int kBlockM = 16 * kMTiles * kWarps;
  static constexpr int kBlockN = D == 64 ? 64 : 32;
  static constexpr int kThreads = 32 * kWarps;
  // Two CTAs per SM: one CTA's GEMMs run while the other's warps are in the softmax or at a barrier.
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr size_t kSmemBytes = size_t(kBlockM + 4 * kBlockN) * D * 2;
};

// Backward: one CTA per (KV block of kBlockN keys, KV head, batch), looping over the Q blocks of
// kBlockM rows of every query head that shares the KV head; 8 warps, each owning 32 rows (two
// 16-row MMA tiles, so every B fragment read from shared memory feeds two MMAs) of every GEMM:
//   S, dP (BlockM x BlockN) and dQ (BlockM x D):  kSRowWarps x kSColWarps warps
//   dK, dV (BlockN x D):                          kKVRowWarps x kKVColWarps warps
// 128-key blocks (d <= 128) halve the dQ atomics per FLOP against 64-key blocks, as in FA2.
// Q and dO are double-buffered where shared memory allows (<= 160 KB: fits sm80's 163 KB).
template <int D>
struct BwdShape {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = 2;  // 16-row MMA tiles per warp, in every GEMM
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = D == 256 ? 64 : 128;
  static constexpr int kStages = D == 256 ? 1 : 2;
  static constexpr int kSRowWarps = kBlockM / (16 * kMTiles);
  static constexpr int kSColWarps = kWarps / kSRowWarps;
  static constexpr int kKVRowWarps = kBlockN / (16 * kMTiles);
  static constexpr int kKVColWarps = kWarps / kKVRowWarps;
  static constexpr size_t kSmemBytes =
      size_t(2 * kBlockN * D + kStages * 2 * kBlockM * D + 2 * kBlockM * kBlockN) * 2;
  // dK and dV are staged for their stores in the Q and dO buffers.
  static_assert(kStages * kBlockM == kBlockN, "a (BlockN x D) tile fits in the Q/dO buffers");
};

}  // namespace hfa::fa2
