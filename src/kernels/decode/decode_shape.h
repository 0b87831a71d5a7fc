// Flash decode's tile shape per head dim, for the kernels and for the host (shared memory, the
// split heuristic). docs/WORKLOG.md, "Flash decode", has what was measured.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/decode/decode_problem.h"

namespace hfa::flash_decode {

// A bf16 q row converted to fp16 for the e4m3 cache's GEMMs (decode_kernel.cuh) is scaled by 2^e,
// with e chosen so that the row's largest magnitude mx lands in [2^14, 2^15) (fp16's largest value
// is 65504): e = 15 - k for mx in [2^(k-1), 2^k); at most 127 (2^-e must stay a float); 0 for a row
// of zeros or one holding an infinity or NaN (converted unscaled: they stay what they are).
HFA_HOST_DEVICE inline int fp16_row_exponent(float mx) {
  if (!(mx > 0.f) || !(mx <= 3.402823466e38f)) return 0;
  int k = 0;
  frexpf(mx, &k);  // mx = m 2^k, m in [0.5, 1)
  return 15 - k < 127 ? 15 - k : 127;
}

// The most splits of one sequence's keys (DecodeArgs::num_splits); the combine kernel holds one
// weight per split in shared memory.
inline constexpr int kDecodeMaxSplits = 256;

// 16 packed query rows per CTA (one mma.sync row tile), key tiles of which each of the 4 warps
// takes a quarter, and a ring of kStages tiles. Every head dim moves 32 KB of K and V per stage
// (64 keys at d = 128, 128 at d = 64, and 2 stages of 64 KB at d = 256), so that 2 / 2 / 1 CTAs fit
// on an SM with 64 KB of loads in flight each (HBM latency x bandwidth per SM is about 20 KB).
// d = 64 first had 64-key tiles and 3 CTAs per SM: 396 slots made batch 64 x 8 KV heads 1.3 waves,
// and every tile's fixed costs (barrier, waits, masks) were spread over half the bytes.
//
// An e4m3 cache (kFp8Cache) adds one fp16 tile (decode_kernel.cuh) into which each warp converts
// its own keys of K (for S = Q K^T), then of V (for P V); its CTAs do twice the math per byte loaded
// (the measurements below converted into q's dtype: before the fp16 GEMMs of ad5eda5). Measured
// at d = 128 (docs/WORKLOG.md, "e4m3 caches"): the first version (64-key tiles, 4 stages, separate
// K and V tiles, 2 CTAs per SM) reached 2.58 TB/s-equivalent at batch 64 x 16k against the bf16
// cache's 3.04; one converted tile, 3 stages and 3 CTAs per SM (more warps to hide the
// conversion) 2.69, and best for the paged cache (2.53); 128-key tiles, 2 stages, 2 CTAs per SM
// 2.86 contiguous but 2.40 paged. So the contiguous cache at d = 128 took 128-key tiles and
// everything else 3 CTAs per SM (2 at d = 256, 2 stages). That paged measurement looked up a page
// per key row. kLargePages: the kernel for pages of at least half a tile, whose tiles look up the
// one or two pages they lie in (decode_kernel.cuh); with it the e4m3 cache at d = 128 takes the
// 128-key tiles in pages of 64 keys or more too (docs/WORKLOG.md, "Flash decode", session 42).
template <int D, bool kFp8Cache = false, bool kPaged = false, bool kLargePages = false>
struct DecodeShape {
  static_assert(!kLargePages || kPaged, "large pages are a paged cache's");
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16;
  // 128-key e4m3 tiles at d = 128.
  static constexpr bool kWideFp8 = kFp8Cache && D == 128 && (!kPaged || kLargePages);
  static constexpr int kKeysPerWarp = (D == 64 || kWideFp8) ? 32 : 16;
  static constexpr int kBlockN = kKeysPerWarp * kWarps;
  static constexpr int kStages = (D == 256 || kWideFp8) ? 2 : 3;
  // The split heuristic gives a split at least this many tiles: fewer leave its pipeline mostly
  // filling and draining, and its partial result costs the combine as much as a long one. The
  // 128-key e4m3 tiles: 2 (4 made batch 1 x 2k 4 splits and 18.5 us, slower than bf16's 13.3).
  static constexpr int kMinTilesPerSplit = kWideFp8 ? 2 : 4;
  static constexpr size_t kCacheElemBytes = kFp8Cache ? 1 : 2;
  static constexpr size_t kRingBytes = 2 * kStages * kBlockN * D * kCacheElemBytes;
  static constexpr size_t kConvertedBytes = kFp8Cache ? size_t(kBlockN) * D * 2 : 0;
  static constexpr size_t kSmemBytes = size_t(kRows) * D * 2 + kRingBytes + kConvertedBytes;
  // CTAs of this shape that one H100 SM holds (227 KB of shared memory): the heuristic's wave size.
  static constexpr int kCtasPerSm = kFp8Cache ? (D == 256 || kWideFp8 ? 2 : 3) : (D == 256 ? 1 : 2);
  // (1 KB per CTA is the system's, and ~0.5 KB the kernel's static arrays.)
  static_assert(kCtasPerSm * (kSmemBytes + 1536) <= 228 * 1024, "kCtasPerSm CTAs fit on an SM");
  // The warps' merge reuses the ring (and converted tiles) as scratch: 4 warps x 16 rows x (D + 8) fp32.
  static_assert(size_t(kWarps) * kRows * (D + 8) * 4 <= kRingBytes + kConvertedBytes,
                "the merge scratch fits in the K/V ring");
};

// Whether p's kernel is DecodeShape's kLargePages variant: a paged cache whose pages hold at least
// half a tile of that shape.
template <int D>
bool large_pages(const DecodeProblem& p) {
  const int tile_keys = p.fp8_cache() ? DecodeShape<D, true, true, true>::kBlockN : DecodeShape<D, false, true, true>::kBlockN;
  return p.paged() && (1 << p.page_size_log2) >= tile_keys / 2;
}

}  // namespace hfa::flash_decode
