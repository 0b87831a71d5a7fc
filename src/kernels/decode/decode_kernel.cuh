// Flash decode (the seed worklog's last step): a few new query tokens attend to a long KV cache.
// A forward kernel parallelizes over query tiles, of which decode has one per KV head: almost every
// SM would idle. Here the keys of each sequence are split across CTAs (num_splits), each CTA
// writes a partial O and LSE, and they are merged exactly (kernels/merge/'s row functions): by the
// split kernel itself after a grid-wide barrier when the launch is cooperative (merge_in_grid),
// else by the merge kernel after it.
//
// One CTA = (split, KV head, batch) and one block of 16 packed query rows: the seqlen_q x
// group_size query rows that read this KV head (GQA packing, row r = token r / group, query head
// hk * group + r % group), so each key and value is read from memory once for the whole group.
// The CTA streams its keys in 64-key tiles (128 at d = 64) through a kStages-deep cp.async ring
// (the loads are all there is to this kernel: it is bound by HBM bandwidth). Each of the 4 warps
// takes a quarter of the keys of every tile and keeps its own online softmax (m, l, O) over them; at the end the warps merge their
// states through shared memory. mma.sync m16n8k16 (sm80 and newer) does both GEMMs: the math is
// 16 rows per key, far below what the tensor cores can do while the loads stream.
// Keys live in a contiguous cache (sequence row, key) or a paged one (page table, page, slot):
// the Paged policy only changes where a key's row is (key_offset; in the split kernel, row_offset
// with the page indices read a tile ahead; with pages of at least half a tile, kLargePages, one
// lookup per page a tile spans).
// An e4m3 cache (Tc = __nv_fp8_storage_t, q bf16/fp16) streams half the bytes: its tiles land in
// the ring as plain rows of bytes, and each warp converts its own keys (exactly) into an fp16 tile
// that its GEMMs read as they read a bf16/fp16 cache's tile (K first, then V into the same rows);
// k_descale folds into the softmax scale and v_descale into the output's normalization.
// The e4m3 cache's GEMMs run in fp16 whatever q's dtype (Tm below): e4m3 converts to fp16 exactly in
// one instruction per pair, to bf16 only through fp32 (the d = 128 loop, 128 keys, contiguous:
// 1374 instructions converting to bf16, 520 of them conversions; 1022 converting to fp16, 136; on
// an H200 at batch 64 x 16k, 3.00 -> 3.17 TB/s, all e4m3 rows 1.044x; then 3.56 with the
// conversion's loads batched, E4m3Conversion: WORKLOG, "Flash decode").
// A bf16 q is converted once into fp16 in place, each row scaled by a power of two that puts its
// largest value in [2^14, 2^15) (exact: bf16's 8-bit significands fit fp16's 11; only values below
// 2^-28 of the row's largest lose bits, to fp16's subnormals), and its scores scaled back after the
// GEMM (exact). P enters P V as fp16 times 2^7: P <= 2^8 with the lazy rescale, so P 2^7 <= 2^15
// stays below fp16's largest value and its subnormals begin at P = 2^-21; the output's
// normalization divides the 2^7 out.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/quad_reduce.cuh"
#include "kernels/decode/decode_e4m3.cuh"
#include "kernels/decode/decode_merge.cuh"
#include "kernels/decode/decode_problem.h"
#include "kernels/decode/decode_shape.h"
#include "kernels/sm80/common/online_softmax.cuh"
#include "kernels/sm80/common/smem_tile.cuh"

namespace hfa::flash_decode {

using namespace hfa::sm80;


// Keys a sequence attends to: what is cached (clamped to what the cache can hold with the new
// tokens, so a bad device value cannot make the kernels read or write outside the cache) plus the
// appended new ones.
__device__ __forceinline__ int cached_keys(const DecodeProblem& p, int b) {
  const int cached = p.cache_seqlens[b * p.cache_seqlens_stride];
  return min(max(cached, 0), p.capacity - p.seqlen_new);
}

// Element offset of key j's row of sequence b in the cache (head offset not included).
template <bool kPaged>
__device__ __forceinline__ int64_t key_offset(const DecodeProblem& p, int b, int cache_row, int j,
                                              int64_t outer_stride, int64_t row_stride) {
  if constexpr (kPaged) {
    const int page = p.page_table[b * p.page_table_batch_stride +
                                  static_cast<int64_t>(j >> p.page_size_log2) * p.page_table_page_stride];
    return page * outer_stride + (j & ((1 << p.page_size_log2) - 1)) * row_stride;
  } else {
    return cache_row * outer_stride + j * row_stride;
  }
}

// Where packed query row r of KV head hk lives: token r / group, query head hk * group + r % group.
struct PackedRow {
  int token, head;
  __device__ PackedRow(const DecodeProblem& p, int hk, int r)
      : token(r / p.group_size()), head(hk * p.group_size() + r % p.group_size()) {}
};

// The keys [begin, end) that query token `token` of a sequence of n_keys sees: all of them, those up
// to its diagonal (causal), or its sliding window (p.local); end == begin when none. In 64 bits:
// a window side near 2^31 and n_keys near capacity would overflow an int.
struct RowKeys {
  int begin, end;
  __device__ __forceinline__ RowKeys(const DecodeProblem& p, int token, int n_keys) {
    const int64_t diag = static_cast<int64_t>(token) + n_keys - p.seqlen_q;
    int64_t lo = 0, hi = n_keys;
    if (p.causal) hi = diag + 1;
    if (p.local) {
      if (p.window_left >= 0) lo = diag - p.window_left;
      if (p.window_right >= 0) hi = diag + p.window_right + 1;
    }
    begin = static_cast<int>(lo < 0 ? 0 : lo > n_keys ? n_keys : lo);
    end = static_cast<int>(hi < begin ? begin : hi > n_keys ? n_keys : hi);
  }
};

// T: q's and out's dtype; Tc: the cache's (T, or __nv_fp8_storage_t for e4m3). kLargePages:
// DecodeShape's variant for pages of at least half a tile (large_pages). kVariants: the kernel
// for problems with a sliding window, softcap or sinks (DecodeProblem::variants(); their values
// are read at run time, in branches uniform across the CTA); the plain kernel's code is the one
// it was before the variants came (its SASS compared: WORKLOG, "Flash decode", session 50).
template <typename T, typename Tc, int D, bool kPaged, bool kLargePages = false, bool kVariants = false>
__global__ void __launch_bounds__(DecodeShape<D, sizeof(Tc) == 1, kPaged, kLargePages>::kThreads,
                                  DecodeShape<D, sizeof(Tc) == 1, kPaged, kLargePages>::kCtasPerSm)
    decode_split_kernel(DecodeProblem p) {
  constexpr bool kFp8 = sizeof(Tc) == 1;
  static_assert(kFp8 || std::is_same_v<T, Tc>, "a bf16/fp16 cache has q's dtype");
  using Shape = DecodeShape<D, kFp8, kPaged, kLargePages>;
  constexpr int kBlockN = Shape::kBlockN, kRows = Shape::kRows, kStages = Shape::kStages;
  constexpr int kThreads = Shape::kThreads, kKeysPerWarp = Shape::kKeysPerWarp;
  constexpr int kOTiles = D / 8;
  using TileQ = SwizzledTile<kRows, D>;
  using TileKV = SwizzledTile<kBlockN, D>;
  // The GEMMs' dtype (header): fp16 for an e4m3 cache; kScaleQ: q is bf16 and converted into it.
  using Tm = std::conditional_t<kFp8, __half, T>;
  constexpr bool kScaleQ = kFp8 && !std::is_same_v<T, __half>;
  constexpr float kPOffset = kFp8 ? 128.f : 1.f;  // P's factor in P V (header)
  extern __shared__ uint4 smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  const Tm* sQm = reinterpret_cast<const Tm*>(smem_raw);
  // The ring of the cache's tiles: kStages of K, then kStages of V (bf16/fp16: TileKV's swizzled
  // layout; e4m3: rows of D bytes, read only by the conversion).
  Tc* sK = reinterpret_cast<Tc*>(sQ + TileQ::kElems);
  Tc* sV = sK + kStages * TileKV::kElems;
  // e4m3: the tile in T that the GEMMs read: each warp converts its own keys of K, then of V.
  Tm* sConverted = reinterpret_cast<Tm*>(sV + kStages * TileKV::kElems);

  const int rows_total = p.packed_rows();
  const int m_blocks = ceil_div(rows_total, kRows);
  const int m0 = (blockIdx.x % m_blocks) * kRows, split = blockIdx.x / m_blocks;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  allow_dependent_launch();  // the merge's CTAs may become resident and wait (decode_launch.cuh)

  // This split's tiles of the sequence's keys; with causal, none past the last key that the
  // block's last row sees (keys are bottom-right aligned: query i sees j <= i + n_keys - seqlen_q).
  const int n_keys = cached_keys(p, b) + p.seqlen_new;
  const int n_tiles = ceil_div(n_keys, kBlockN);
  const int tiles_per_split = ceil_div(n_tiles, p.num_splits);
  int t_begin = split * tiles_per_split;
  int t_end = min(n_tiles, t_begin + tiles_per_split);
  if (p.causal) {
    const int last_token = PackedRow(p, hk, min(m0 + kRows, rows_total) - 1).token;
    const int last_key = last_token + n_keys - p.seqlen_q;
    t_end = min(t_end, last_key < 0 ? 0 : last_key / kBlockN + 1);
  }
  // (The variants' additions stand apart, each under `if constexpr (kVariants)`, so that the plain
  // kernel's code is what it was: the same SASS.)
  // first_key: the block's first visible key (its first row's). Keys before it are neither
  // loaded (zero-filled) nor looked up in the page table: an engine may have freed the pages
  // wholly before a sliding window (their entries then hold anything, -1 in most).
  int first_key = 0;
  if constexpr (kVariants) {
    // The block's tiles: from its first row's first key to its last row's end (both rise with
    // the token). With a window the splits share out those tiles, not the whole sequence's.
    const RowKeys first(p, PackedRow(p, hk, m0).token, n_keys);
    const RowKeys last(p, PackedRow(p, hk, min(m0 + kRows, rows_total) - 1).token, n_keys);
    first_key = first.begin;
    const int tile_lo = first.begin / kBlockN;
    const int tile_hi = last.end > first.begin ? ceil_div(last.end, kBlockN) : tile_lo;
    const int split_end = p.local ? tile_hi : n_tiles;  // (the plain kernel's split without a window)
    const int window_tiles_per_split = ceil_div(split_end - tile_lo, p.num_splits);
    t_begin = tile_lo + split * window_tiles_per_split;
    t_end = min(tile_hi, t_begin + window_tiles_per_split);
  }

  // Q: row r of the tile is packed row m0 + r; rows past the last are zeros.
  {
    constexpr int kChunks = D / 8;
    for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool valid = m0 + r < rows_total;
      const PackedRow pr(p, hk, valid ? m0 + r : 0);
      const T* src = static_cast<const T*>(p.q) + b * p.q_batch_stride + pr.token * p.q_row_stride +
                     pr.head * p.q_head_stride + c * 8;
      cp_async_16(sQ + TileQ::offset(r, c * 8), src, valid);
    }
  }

  // K and V tiles: each thread copies one 16-byte chunk column of every kRowsPerPass-th key row.
  const int cache_row = p.cache_batch_idx ? p.cache_batch_idx[b * p.cache_batch_idx_stride] : b;
  // Every key and value is read once per step: the loads are marked first to leave the L2.
  const uint64_t l2_policy = l2_evict_first_policy();
  const Tc* k_base = static_cast<const Tc*>(p.k_cache) + hk * p.k_head_stride;
  const Tc* v_base = static_cast<const Tc*>(p.v_cache) + hk * p.v_head_stride;
  constexpr int kChunkElems = 16 / sizeof(Tc), kChunks = D / kChunkElems;
  constexpr int kRowsPerPass = kThreads / kChunks, kPasses = kBlockN / kRowsPerPass;
  // Where chunk c of row r of a staged tile goes.
  auto stage_offset = [](int r, int c) {
    if constexpr (kFp8) return r * D + c * kChunkElems;
    else return TileKV::offset(r, c * kChunkElems);
  };
  const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  // Paged caches: the page of each of this thread's key rows in the tile issued next, read from
  // the page table one iteration ahead, so that the table's latency is not in front of the
  // copies. Keys past the sequence are not looked up: their entries may hold anything (engines
  // leave unused entries at -1); they are zero-filled from the head's base address.
  // Where a page holds at least half a tile (kLargePages: page_size >= kBlockN / 2, both powers of
  // two), a tile's rows lie in one page or in two (its halves): one lookup per page (pages[0], and
  // pages[1] for the second half) and the rows' addresses as in a contiguous cache, by held
  // pointers from the first row in each page (k_row0 below; held rather than a 64-bit product per
  // copy: the e4m3 loop at d = 128 972 -> 911 instructions, e4m3 in pages of 64 1.045x on an H200,
  // WORKLOG, "Flash decode", session 45). (A pass's rows, r0 + i kRowsPerPass for r0 <
  // kRowsPerPass, lie in one half.) Smaller pages: a lookup per row; its lookups and products cost
  // the e4m3 kernel, whose conversion already fills much of the issue slots, ~11% against pages of
  // 64 (H200, b 64 x 16k, d = 128, after acac622; shuffled pages and pages in order alike: not the
  // pages' locality). Two kernels rather than a runtime branch between the paths: with both in its
  // loop, the e4m3 kernel's loop had 2016 instructions against the contiguous cache's 1374 (1456
  // alone; session 42's code).
  static_assert(kPasses % 2 == 0, "each pass lies in one half of the tile");
  const int page_keys = 1 << p.page_size_log2;
  constexpr bool tile_in_pages = kPaged && kLargePages;
  const bool two_pages = page_keys < kBlockN;  // (with tile_in_pages: page_keys == kBlockN / 2)
  int pages[kPasses];
  const int* page_row = kPaged ? p.page_table + b * p.page_table_batch_stride : nullptr;  // sequence b's pages
  auto page_of = [&](int j) {  // (j >= 0: the product unsigned, as in row_offset)
    const bool used = j < n_keys && (!kVariants || (j >> p.page_size_log2) >= (first_key >> p.page_size_log2));
    return used ? page_row[static_cast<uint32_t>(j >> p.page_size_log2) *
                                 static_cast<uint64_t>(p.page_table_page_stride)]
                      : 0;
  };
  auto fetch_pages = [&](int tile) {
    if constexpr (kPaged) {
      if constexpr (tile_in_pages) {
        pages[0] = page_of(tile * kBlockN);
        if (two_pages) pages[1] = page_of(tile * kBlockN + kBlockN / 2);
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) pages[i] = page_of(tile * kBlockN + r0 + i * kRowsPerPass);
      }
    }
  };
  // Pages smaller than half a tile: the row of tile row r (pass i), in the page looked up for pass
  // i. Such pages divide the tile (powers of two), so the row's place in its page is r's. The
  // products are unsigned 32 x 64 bits (a page index and a row in a page are never negative): two
  // multiply-adds each rather than three with the sign.
  static_assert(kLargePages || 2 * DecodeShape<D, kFp8, true, false>::kBlockN >= DecodeShape<D, kFp8, true, true>::kBlockN,
                "pages below half the large-page tile (large_pages) divide this kernel's tile");
  auto row_offset = [&](int i, int r, int64_t outer_stride, int64_t row_stride) -> int64_t {
    if constexpr (kPaged) {
      const uint32_t page = static_cast<uint32_t>(pages[i]), in_page = r & ((1 << p.page_size_log2) - 1);
      return static_cast<int64_t>(page * static_cast<uint64_t>(outer_stride) + in_page * static_cast<uint64_t>(row_stride));
    } else {
      return 0;  // (contiguous caches: k_next / v_next in load_tile)
    }
  };
  // A tile in pages (tile_in_pages): the offset of its first row, so that row r of the tile (of its
  // first half, with two pages) is at offset + r * row_stride. With two pages the tile starts a
  // page and its second half starts the other, at pages[1] * outer_stride.
  auto tile_offset = [&](int tile, int64_t outer_stride, int64_t row_stride) -> int64_t {
    if constexpr (kPaged) return pages[0] * outer_stride + ((tile * kBlockN) & (page_keys - 1)) * row_stride;
    else return 0;
  };
  // e4m3: the ring's shared-window address, opaque to the compiler. Left to fold the linear
  // offsets itself, ptxas 13.0 emitted the e4m3 loop's cp.async as LDGSTS [R + UR + imm] with an
  // uninitialized descriptor register, which the H100 rejects (illegal instruction).
  uint32_t ring_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sK));
  asm volatile("" : "+r"(ring_addr));
  // Contiguous caches and tiles in pages: this thread's copy in row r0 (of tile 0 of the sequence,
  // or of a page's first row), and the step between its passes' rows, held (the step opaque, as
  // load_rows_async does): each copy's source is then one 64-bit add. Left to itself, ptxas
  // computed every copy's 64-bit address from scratch in every tile (d = 128, e4m3: ~140 integer
  // instructions for the tile's 16 copies in a contiguous cache; 64-bit products by the row
  // stride in pages).
  constexpr bool kHeldRows = !kPaged || tile_in_pages;
  const Tc* k_row0 = nullptr;
  const Tc* v_row0 = nullptr;
  int64_t k_pass_step = 0, v_pass_step = 0;
  if constexpr (kHeldRows) {
    const int64_t first_row = kPaged ? 0 : cache_row;  // (pages: tile_offset adds the page)
    k_row0 = k_base + first_row * p.k_outer_stride + r0 * p.k_row_stride + c * kChunkElems;
    v_row0 = v_base + first_row * p.v_outer_stride + r0 * p.v_row_stride + c * kChunkElems;
    k_pass_step = kRowsPerPass * p.k_row_stride, v_pass_step = kRowsPerPass * p.v_row_stride;
    asm volatile("" : "+l"(k_pass_step), "+l"(v_pass_step));
  }
  auto load_tile = [&](int tile) {
    Tc* sk = sK + (tile % kStages) * TileKV::kElems;
    Tc* sv = sV + (tile % kStages) * TileKV::kElems;
    // kHeldRows: this tile's row r0, then advanced by a pass at a time (in two pages: from the
    // second page's first row at the second half, whose passes have the first half's rows).
    const Tc* k_next = k_row0;
    const Tc* v_next = v_row0;
    if constexpr (tile_in_pages) {
      k_next += tile_offset(tile, p.k_outer_stride, p.k_row_stride);
      v_next += tile_offset(tile, p.v_outer_stride, p.v_row_stride);
    } else if constexpr (!kPaged) {
      k_next += static_cast<int64_t>(tile) * kBlockN * p.k_row_stride;
      v_next += static_cast<int64_t>(tile) * kBlockN * p.v_row_stride;
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = r0 + i * kRowsPerPass, j = tile * kBlockN + r;
      const bool valid = j < n_keys && (!kVariants || j >= first_key);
      if constexpr (tile_in_pages) {
        if (i == kPasses / 2 && two_pages) {  // (each pass lies in one half)
          k_next = k_row0 + pages[1] * p.k_outer_stride;
          v_next = v_row0 + pages[1] * p.v_outer_stride;
        }
      }
      const Tc* k_src;
      const Tc* v_src;
      if constexpr (kHeldRows) {
        k_src = valid ? k_next : k_base, v_src = valid ? v_next : v_base;
        k_next += k_pass_step, v_next += v_pass_step;
      } else {
        k_src = valid ? k_base + row_offset(i, r, p.k_outer_stride, p.k_row_stride) : k_base;
        v_src = valid ? v_base + row_offset(i, r, p.v_outer_stride, p.v_row_stride) : v_base;
      }
      const int chunk = kHeldRows ? 0 : c * kChunkElems;  // (k_next / v_next include it)
      if constexpr (kFp8) {
        const uint32_t k_dst = ring_addr + ((tile % kStages) * TileKV::kElems + stage_offset(r, c));
        cp_async_16(k_dst, k_src + chunk, valid, l2_policy);
        cp_async_16(k_dst + kStages * TileKV::kElems, v_src + chunk, valid, l2_policy);
      } else {
        cp_async_16(sk + stage_offset(r, c), k_src + chunk, valid, l2_policy);
        cp_async_16(sv + stage_offset(r, c), v_src + chunk, valid, l2_policy);
      }
    }
  };
  // Prologue: Q and the first kStages - 1 tiles, one commit group each (empty groups too, so that
  // "group i landed" is always "kStages - 2 groups pending" at iteration i).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (t_begin + s < t_end) {
      fetch_pages(t_begin + s);
      load_tile(t_begin + s);
    }
    cp_async_commit();
  }
  fetch_pages(t_begin + kStages - 1);

  // Each row's end of visible keys: causal rows see fewer (padding rows take the last row's, and
  // are never stored). The block's first row sees the fewest: tiles past its end need the mask.
  const int g = lane / 4, q = lane % 4;
  int row_end[2];
  for (int r = 0; r < 2; ++r) {
    const int packed = min(m0 + g + 8 * r, rows_total - 1);
    const int limit = p.causal ? PackedRow(p, hk, packed).token + n_keys - p.seqlen_q + 1 : n_keys;
    row_end[r] = min(limit, n_keys);
  }
  int block_end =
      p.causal ? min(n_keys, PackedRow(p, hk, m0).token + n_keys - p.seqlen_q + 1) : n_keys;
  // The variants: each row's first key too (RowKeys). Tiles that end past block_end (the first
  // row's end, the least) or start before block_begin (the last row's begin, the greatest) need
  // the mask.
  int row_begin[2] = {0, 0}, block_begin = 0;
  if constexpr (kVariants) {
    for (int r = 0; r < 2; ++r) {
      const RowKeys keys(p, PackedRow(p, hk, min(m0 + g + 8 * r, rows_total - 1)).token, n_keys);
      row_begin[r] = keys.begin, row_end[r] = keys.end;
    }
    block_end = RowKeys(p, PackedRow(p, hk, m0).token, n_keys).end;
    block_begin = RowKeys(p, PackedRow(p, hk, min(m0 + kRows, rows_total) - 1).token, n_keys).begin;
  }

  // The variants: the sink of the row this thread finalizes in the warps' merge (below), in log2
  // units, loaded before the loop. (A window of 128 keys at batch 1 is an 8 us step, and sinks add
  // ~0.5 us to it, wherever this load is: after the loop, here, or held here by an empty asm --
  // all three measured; WORKLOG, "Flash decode", session 50.)
  float sink_log2 = -INFINITY;
  if constexpr (kVariants) {
    const int merge_row = threadIdx.x / (kThreads / kRows);
    if (p.sinks != nullptr && split == 0 && m0 + merge_row < rows_total)
      sink_log2 = p.sinks[PackedRow(p, hk, m0 + merge_row).head * p.sinks_stride] * kLog2e;
  }

  // e4m3 cache: a key's score is (q . k_e4m3) k_descale, and O = sum_j p_j v_e4m3_j v_descale.
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kFp8) {
    k_scale = p.k_descale[b * p.k_descale_batch_stride + hk * p.k_descale_head_stride];
    v_scale = p.v_descale[b * p.v_descale_batch_stride + hk * p.v_descale_head_stride];
  }
  float scale_log2 = p.softmax_scale * k_scale * kLog2e;
  // Softcap: S leaves the GEMM as tanh(s softmax_scale k_scale / softcap), and the softmax takes
  // softcap log2(e) as its factor (as k6 does: sm90/common/mask.cuh's SoftcapScore).
  float tanh_scale = 0.f;
  if constexpr (kVariants) {
    if (p.softcap > 0.f) {
      tanh_scale = p.softmax_scale * k_scale / p.softcap;
      scale_log2 = p.softcap * kLog2e;
    }
  }
  const float factor = exponent_factor(scale_log2);
  float o[1][kOTiles][4];
  zero(o);
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  const int key0 = warp * kKeysPerWarp;  // this warp's keys in each tile
  static_assert(kKeysPerWarp % 8 == 0, "each warp's keys start a swizzle period");
  using Conversion = std::conditional_t<kFp8, E4m3Conversion<TileKV, D, kKeysPerWarp>, NoE4m3Conversion>;
  const Conversion convert_e4m3(static_cast<uint32_t>(__cvta_generic_to_shared(sConverted)), key0, lane);
  // A bf16 q with an e4m3 cache: Q (commit group 0) into fp16, rows scaled (header).
  float row_unscale[2] = {1.f, 1.f};
  if constexpr (kScaleQ) {
    __shared__ float q_unscale[kRows];
    cp_async_wait<kStages - 2>();
    __syncthreads();
    scale_q_rows_to_fp16<TileQ, kRows, D, kThreads>(sQ, q_unscale);
    __syncthreads();
    row_unscale[0] = q_unscale[g];
    row_unscale[1] = q_unscale[g + 8];
  }

  for (int t = t_begin; t < t_end; ++t) {
    cp_async_wait<kStages - 2>();  // tile t (and Q) landed for this thread's copies
    __syncthreads();               // everyone's copies are visible; tile t - 1's buffer is free
    if (t + kStages - 1 < t_end) load_tile(t + kStages - 1);
    cp_async_commit();
    fetch_pages(t + kStages);  // lands while this tile computes

    const Tm* sKt;
    const Tm* sVt;
    if constexpr (kFp8) {  // this warp's keys of K, converted to Tm (V follows after S)
      convert_e4m3(ring_addr + (t % kStages) * TileKV::kElems);
      __syncwarp();  // the warp's ldmatrix reads other lanes' conversions
      sKt = sVt = sConverted;
    } else {
      sKt = sK + (t % kStages) * TileKV::kElems;
      sVt = sV + (t % kStages) * TileKV::kElems;
    }
    float s[1][kKeysPerWarp / 8][4];
    zero(s);
    warp_gemm<Tm, 1, kKeysPerWarp / 8, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV>(
        s, sQm, 0, sKt, key0);
    if constexpr (kScaleQ)  // q's row scales out of the scores (powers of two: exact)
      for_each_fragment_element<1, kKeysPerWarp / 8>([&](int, int nt, int i) { s[0][nt][i] *= row_unscale[i / 2]; });
    if constexpr (kVariants) {
      if (tanh_scale != 0.f)
        for_each_fragment_element<1, kKeysPerWarp / 8>([&](int, int nt, int i) {
          s[0][nt][i] = tanh_approx(s[0][nt][i] * tanh_scale);
        });
    }
    if (!(scale_log2 > 0.f))
      for_each_fragment_element<1, kKeysPerWarp / 8>([&](int, int nt, int i) { s[0][nt][i] *= scale_log2; });
    const int k0 = t * kBlockN;
    if (k0 + kBlockN > block_end || (kVariants && k0 < block_begin))
      for_each_fragment_element<1, kKeysPerWarp / 8>([&](int, int nt, int i) {
        const int j = k0 + key0 + 8 * nt + 2 * q + i % 2;
        if (j >= row_end[i / 2] || (kVariants && j < row_begin[i / 2])) s[0][nt][i] = -INFINITY;
      });
    if constexpr (kFp8) {  // K's rows are read (S is in registers): V replaces them
      __syncwarp();
      convert_e4m3(ring_addr + (kStages + t % kStages) * TileKV::kElems);
    }
    online_softmax_tile(s, row_max, row_sum, o, factor);
    if constexpr (kFp8) {
      for_each_fragment_element<1, kKeysPerWarp / 8>([&](int, int nt, int i) { s[0][nt][i] *= kPOffset; });
      __syncwarp();
    }

    const LaneOffsets<TileKV, FragmentKind::kBPairTrans> v_off(sVt, key0, 0);
#pragma unroll
    for (int ks = 0; ks < kKeysPerWarp / 16; ++ks) {  // P V, 16 of the warp's keys at a time
      uint32_t pa[4];
      c_pair_to_a<Tm>(s[0][2 * ks], s[0][2 * ks + 1], pa);
#pragma unroll
      for (int np = 0; np < kOTiles / 2; ++np) {
        uint32_t bv[2][2];
        v_off.load_pair(bv, 16 * ks, 2 * np);
        mma_16816<Tm>(o[0][2 * np], pa, bv[0]);
        mma_16816<Tm>(o[0][2 * np + 1], pa, bv[1]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring: it becomes the merge's scratch

  // Merge the warps' states: scratch O (fp32, unnormalized) per warp, and per row the warp's max
  // in the base-2 exponent's units (max * factor) and its row sum.
  constexpr int kScratchStride = D + 8;  // floats per row; the pad spreads rows over banks
  float* scratch = reinterpret_cast<float*>(sK);
  __shared__ float warp_max[Shape::kWarps][kRows], warp_sum[Shape::kWarps][kRows];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[0][r]);
    if (q == 0) {
      warp_max[warp][g + 8 * r] = row_max[0][r] == -INFINITY ? -INFINITY : row_max[0][r] * factor;
      warp_sum[warp][g + 8 * r] = l;
    }
  }
  for_each_fragment_element<1, kOTiles>([&](int, int nt, int i) {
    scratch[(warp * kRows + g + 8 * (i / 2)) * kScratchStride + 8 * nt + 2 * q + i % 2] = o[0][nt][i];
  });
  __syncthreads();

  // Thread layout of the merge: kThreads / kRows threads per row, each kCols consecutive columns.
  constexpr int kThreadsPerRow = kThreads / kRows, kCols = D / kThreadsPerRow;
  static_assert(kCols % 8 == 0, "whole 16-byte output chunks per thread");
  const int row = threadIdx.x / kThreadsPerRow, col0 = (threadIdx.x % kThreadsPerRow) * kCols;
  if (m0 + row < rows_total) {  // (every thread stays for the merge in the grid below)
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < Shape::kWarps; ++w) mx = fmaxf(mx, warp_max[w][row]);
    // An attention sink joins the denominator once, in split 0's partial result (the merge then
    // carries it: LSE_0 includes it, and O_0's weight exp(LSE_0 - LSE) divides by it): its term
    // 2^(sink log2 e - mx'), taken against mx' = max(mx, sink log2 e) so neither overflows.
    if constexpr (kVariants) mx = fmaxf(mx, sink_log2);
    float weight[Shape::kWarps], l = 0.f;
#pragma unroll
    for (int w = 0; w < Shape::kWarps; ++w) {
      weight[w] = mx == -INFINITY ? 0.f : exp2_approx(warp_max[w][row] - mx);
      l += weight[w] * warp_sum[w][row];
    }
    if constexpr (kVariants) {
      if (sink_log2 != -INFINITY) l += exp2_approx(sink_log2 - mx);
    }
    const float inv = l > 0.f ? v_scale / (kPOffset * l) : 0.f;
    const float lse = l > 0.f ? (mx + log2f(l)) * kLn2 : -INFINITY;
    const PackedRow pr(p, hk, m0 + row);
    float out[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float acc = 0.f;
#pragma unroll
      for (int w = 0; w < Shape::kWarps; ++w)
        acc += weight[w] * scratch[(w * kRows + row) * kScratchStride + col0 + c];
      out[c] = acc * inv;
    }
    if (p.num_splits == 1) {
      T* dst = static_cast<T*>(p.o) + b * p.o_batch_stride + pr.token * p.o_row_stride +
               pr.head * p.o_head_stride + col0;
#pragma unroll
      for (int c = 0; c < kCols; c += 8)
        *reinterpret_cast<uint4*>(dst + c) = pack8<T>(reinterpret_cast<const float(&)[8]>(out[c]));
      if (p.lse && threadIdx.x % kThreadsPerRow == 0)
        p.lse[b * p.lse_batch_stride + pr.head * p.lse_head_stride + pr.token * p.lse_row_stride] = lse;
    } else {
      const int64_t prow =
          ((static_cast<int64_t>(split) * p.batch + b) * p.seqlen_q + pr.token) * p.heads_q + pr.head;
      float* dst = p.o_partial + prow * D + col0;
#pragma unroll
      for (int c = 0; c < kCols; c += 4)
        *reinterpret_cast<float4*>(dst + c) = make_float4(out[c], out[c + 1], out[c + 2], out[c + 3]);
      if (threadIdx.x % kThreadsPerRow == 0) p.lse_partial[prow] = lse;
    }
  }
  if (p.merge_in_grid) {  // a cooperative launch (decode_launch.cuh); uniform across the grid
    __syncthreads();  // the scratch above is read: the merge reuses the ring
    merge_splits_in_grid<T, D, kThreads>(p, smem_raw);
  }
}

// Appends k_new / v_new (the cache's dtype Tc) at positions cached_keys(b) ... of each sequence's
// cache, 16 bytes per thread. Runs before the split kernel, on the same stream.
template <typename Tc, int D, bool kPaged>
__global__ void __launch_bounds__(128) decode_append_kernel(DecodeProblem p) {
  constexpr int kChunkElems = 16 / sizeof(Tc), kChunks = D / kChunkElems;
  const int b = blockIdx.y;
  const int idx = blockIdx.x * 128 + threadIdx.x;  // (token, KV head, chunk)
  if (idx >= p.seqlen_new * p.heads_kv * kChunks) return;
  const int c = idx % kChunks, hk = (idx / kChunks) % p.heads_kv, t = idx / (kChunks * p.heads_kv);
  const int j = cached_keys(p, b) + t;
  const int cache_row = p.cache_batch_idx ? p.cache_batch_idx[b * p.cache_batch_idx_stride] : b;
  const Tc* k_src = static_cast<const Tc*>(p.k_new) + b * p.k_new_batch_stride + t * p.k_new_row_stride +
                    hk * p.k_new_head_stride + c * kChunkElems;
  const Tc* v_src = static_cast<const Tc*>(p.v_new) + b * p.v_new_batch_stride + t * p.v_new_row_stride +
                    hk * p.v_new_head_stride + c * kChunkElems;
  Tc* k_dst = static_cast<Tc*>(p.k_cache) + hk * p.k_head_stride + c * kChunkElems +
             key_offset<kPaged>(p, b, cache_row, j, p.k_outer_stride, p.k_row_stride);
  Tc* v_dst = static_cast<Tc*>(p.v_cache) + hk * p.v_head_stride + c * kChunkElems +
             key_offset<kPaged>(p, b, cache_row, j, p.v_outer_stride, p.v_row_stride);
  *reinterpret_cast<uint4*>(k_dst) = *reinterpret_cast<const uint4*>(k_src);
  *reinterpret_cast<uint4*>(v_dst) = *reinterpret_cast<const uint4*>(v_src);
}

}  // namespace hfa::flash_decode
