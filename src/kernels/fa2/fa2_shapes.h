// FA2's tile shapes per head dim, for the kernels and for the host (shared-memory checks).
// Chosen as the FlashAttention-2 paper partitions work (section 3.3): the forward splits Q across
// warps (each warp owns 16 or 32 query rows and sees all of K and V: no split-K, no cross-warp
// reduction), the backward gives each CTA one KV block and splits every GEMM across warps.
#pragma once

#include <cstddef>

namespace hfa::fa2 {

// Forward: BlockM = 16 * kMTiles * kWarps query rows per CTA, kBlockN keys per K/V tile; Q, K and
// V each have one buffer (K_{j+1} loads during softmax and P V_j, V_{j+1} during Q K_{j+1}^T).
// Register budget (255 per thread): O takes kMTiles * D / 2 fp32 registers and S kMTiles *
// kBlockN / 2, so d=64 affords two row tiles per warp (O 64 + S 64), d=128 one (O 64 + S 32; two
// spilled 200 bytes), and d=256 one row tile with 32-key tiles (O 128 + S 16).
template <int D>
struct FwdShape {
  static constexpr int kWarps = D == 64 ? 4 : 8;
  static constexpr int kMTiles = D == 64 ? 2 : 1;  // 16-row MMA tiles per warp
  static constexpr int kBlockM = 16 * kMTiles * kWarps;
  static constexpr int kBlockN = D == 256 ? 32 : 64;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr size_t kSmemBytes = size_t(kBlockM + 2 * kBlockN) * D * 2;
};

// Backward: one CTA per (KV block of kBlockN keys, KV head, batch), looping over the Q blocks of
// kBlockM rows of every query head that shares the KV head. 8 warps as 4 row groups x 2 column
// halves in every GEMM. Q and dO are double-buffered where shared memory allows.
template <int D>
struct BwdShape {
  static constexpr int kWarps = 8;
  static constexpr int kRowGroups = 4;
  static constexpr int kColGroups = kWarps / kRowGroups;
  static constexpr int kBlockM = 16 * kRowGroups;
  static constexpr int kBlockN = 16 * kRowGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStages = D == 256 ? 1 : 2;  // d=256 double-buffered would not fit sm80
  static constexpr size_t kSmemBytes =
      size_t(2 * kBlockN * D + kStages * 2 * kBlockM * D + 2 * kBlockM * kBlockN) * 2;
};

}  // namespace hfa::fa2
