// Flash decode's host side: the split heuristic, the workspace, and the (dtype, head dim) dispatch
// of the launches (the kernels: decode_kernel.cuh, instantiated in decode_hdim<D>.cu).
#include "kernels/decode/decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "common/status_util.h"
#include "hfa_build_config.h"
#include "kernels/decode/decode_shape.h"

namespace hfa::flash_decode {

template <typename T, int D> cudaError_t launch_head_dim(const DecodeProblem&, cudaStream_t);

namespace {

// A field of the problem's shape (DecodeShape<D, e4m3 cache, paged, large pages>), read through `get`.
template <int D, class Get> auto shape_field(const DecodeProblem& p, Get get) {
  if (p.fp8_cache()) {
    if (!p.paged()) return get(DecodeShape<D, true, false>{});
    return large_pages<D>(p) ? get(DecodeShape<D, true, true, true>{}) : get(DecodeShape<D, true, true>{});
  }
  // (The bf16/fp16 shapes are the same contiguous or paged.)
  return get(DecodeShape<D>{});
}
template <class Get> auto shape_field(const DecodeProblem& p, Get get) {
  return p.head_dim == 64    ? shape_field<64>(p, get)
         : p.head_dim == 128 ? shape_field<128>(p, get)
                             : shape_field<256>(p, get);
}

int ctas_per_sm(const DecodeProblem& p) {
  return shape_field(p, [](auto shape) { return decltype(shape)::kCtasPerSm; });
}
int block_n(const DecodeProblem& p) {
  return shape_field(p, [](auto shape) { return decltype(shape)::kBlockN; });
}
// The fewest key tiles a split gets (DecodeShape::kMinTilesPerSplit).
int min_tiles_per_split(const DecodeProblem& p) {
  return shape_field(p, [](auto shape) { return decltype(shape)::kMinTilesPerSplit; });
}

// With a wave or more of CTAs, one split unless the last wave would run mostly empty: then the
// split count (up to 4) whose CTAs fill their waves best, each step 10% better. Batch 64 x 8 KV
// heads at d = 128 is 512 CTAs, 1.94 waves of 264 slots: one split. 300 CTAs would be 1.14 waves
// (0.57 full); 3 splits make 900 CTAs in 3.4 waves (0.85 full), for a combine over 3 splits.
long long waves_split(long long ctas, long long slots, long long tiles, int min_tiles) {
  auto fill = [&](long long splits) {
    const long long n = ctas * splits;
    return static_cast<double>(n) / (static_cast<double>((n + slots - 1) / slots) * slots);
  };
  long long best = 1;
  for (long long splits = 2; splits <= 4 && splits * min_tiles <= tiles; ++splits)
    if (fill(splits) > 1.1 * fill(best)) best = splits;
  return best;
}

}  // namespace

int choose_num_splits(const DecodeProblem& p, int sm_count) {
  const long long m_blocks = (p.packed_rows() + DecodeShape<64>::kRows - 1) / DecodeShape<64>::kRows;
  const long long ctas = static_cast<long long>(p.batch) * p.heads_kv * m_blocks;
  const long long slots = static_cast<long long>(std::max(sm_count, 1)) * ctas_per_sm(p);
  if (ctas == 0) return 1;
  const int tile_keys = block_n(p);
  // (A sliding window's keys only: the splits share those out, decode_kernel.cuh.)
  const long long tiles = (p.window_keys(p.capacity) + tile_keys - 1) / tile_keys;
  const int min_tiles = min_tiles_per_split(p);
  if (ctas >= slots) return waves_split(ctas, slots, tiles, min_tiles);
  // Whole waves: the most splits whose CTAs all fit in one wave (rounding up would start a
  // second, mostly empty wave: at batch 8, 5 splits made 320 CTAs for 264 slots).
  long long splits = slots / ctas;
  splits = std::min(splits, std::max(1LL, tiles / min_tiles));
  return static_cast<int>(std::clamp(splits, 1LL, static_cast<long long>(kDecodeMaxSplits)));
}

size_t workspace_bytes(const DecodeProblem& p) {
  if (p.num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(p.num_splits) * p.batch * p.seqlen_q * p.heads_q;
  return rows * (p.head_dim + 1) * sizeof(float);
}

size_t smem_bytes(int head_dim, bool fp8_cache) {
#define HFA_DECODE_SMEM(D)                                                                       \
  if (head_dim == D)                                                                             \
    return fp8_cache ? std::max({DecodeShape<D, true, false>::kSmemBytes, DecodeShape<D, true, true>::kSmemBytes,  \
                                 DecodeShape<D, true, true, true>::kSmemBytes})                                  \
                     : DecodeShape<D>::kSmemBytes;
  HFA_FOR_EACH_HEAD_DIM(HFA_DECODE_SMEM)
#undef HFA_DECODE_SMEM
  return 0;
}

namespace {
std::atomic<bool> g_merge_in_grid_allowed{true};
}  // namespace

void set_merge_in_grid_allowed(bool allowed) { g_merge_in_grid_allowed.store(allowed); }
bool merge_in_grid_allowed() { return g_merge_in_grid_allowed.load(std::memory_order_relaxed); }

Status launch(const DecodeProblem& p, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
#define HFA_DECODE_CASE(D)                                                                    \
  if (p.head_dim == D)                                                                        \
    err = bf16 ? launch_head_dim<__nv_bfloat16, D>(p, stream) : launch_head_dim<__half, D>(p, stream);
  HFA_FOR_EACH_HEAD_DIM(HFA_DECODE_CASE)
#undef HFA_DECODE_CASE
  return cuda_status(err, "launching decode");
}

}  // namespace hfa::flash_decode
