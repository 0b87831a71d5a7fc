// Flash decode's host rules, one test each (no GPU: validation never dereferences the buffers),
// and the split heuristic's properties.
#include <gtest/gtest.h>

#include <cmath>

#include "api/decode_validate.h"
#include "kernels/decode/decode.h"
#include "kernels/decode/decode_shape.h"
#include "validation_test_util.h"

namespace hfa {
namespace {

using namespace validation_test;

constexpr int kCap = 256, kPageSize = 16, kPages = 40, kNew = 2;
alignas(16) unsigned char g_kc[16], g_vc[16], g_kn[16], g_vn[16];
alignas(16) int g_seqlens[4], g_table[64], g_batch_idx[4];
alignas(16) float g_kd[16], g_vd[16];

DecodeArgs valid_decode_args(bool paged = false) {
  DecodeArgs a;
  a.q = make_tensor(g_q, DType::kBF16, {kB, 1, kHq, kD});
  a.out = make_tensor(g_o, DType::kBF16, {kB, 1, kHq, kD});
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, kHq, 1});
  if (paged) {
    a.k_cache = make_tensor(g_kc, DType::kBF16, {kPages, kPageSize, kHkv, kD});
    a.v_cache = make_tensor(g_vc, DType::kBF16, {kPages, kPageSize, kHkv, kD});
    a.page_table = make_tensor(g_table, DType::kI32, {kB, kCap / kPageSize});
  } else {
    a.k_cache = make_tensor(g_kc, DType::kBF16, {kB, kCap, kHkv, kD});
    a.v_cache = make_tensor(g_vc, DType::kBF16, {kB, kCap, kHkv, kD});
  }
  a.cache_seqlens = make_tensor(g_seqlens, DType::kI32, {kB});
  return a;
}

Status normalize(const DecodeArgs& a, DecodeProblem* p = nullptr) {
  DecodeProblem local;
  return normalize_decode(a, p ? p : &local);
}

TEST(DecodeValidation, ValidArgumentsPass) {
  for (bool paged : {false, true}) {
    DecodeProblem p;
    DecodeArgs a = valid_decode_args(paged);
    a.k_new = make_tensor(g_kn, DType::kBF16, {kB, kNew, kHkv, kD});
    a.v_new = make_tensor(g_vn, DType::kBF16, {kB, kNew, kHkv, kD});
    ASSERT_TRUE(normalize(a, &p).ok()) << normalize(a).message;
    EXPECT_EQ(p.capacity, kCap);
    EXPECT_EQ(p.paged(), paged);
    EXPECT_EQ(p.seqlen_new, kNew);
    EXPECT_EQ(p.group_size(), kHq / kHkv);
    EXPECT_EQ(p.packed_rows(), kHq / kHkv);
    if (paged) EXPECT_EQ(1 << p.page_size_log2, kPageSize);
    DecodePlan plan;
    ASSERT_TRUE(plan_decode_for(p, hopper(), &plan).ok());
    EXPECT_GE(plan.num_splits, 1);
    EXPECT_TRUE(check_plan_matches(p, plan, 0).ok());
  }
  EXPECT_EQ(size_of(DType::kI32), 4);
  EXPECT_STREQ(to_string(DType::kI32), "int32");
}

TEST(DecodeValidation, CacheSeqlensRequiredAndInt32) {
  DecodeArgs a = valid_decode_args();
  a.cache_seqlens = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cache_seqlens:", "required"});
  a = valid_decode_args();
  a.cache_seqlens.dtype = DType::kFP32;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cache_seqlens:", "int32"});
  a = valid_decode_args();
  a.cache_seqlens = make_tensor(g_seqlens, DType::kI32, {kB + 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cache_seqlens:", "(batch)"});
}

TEST(DecodeValidation, DtypesAndShapes) {
  DecodeArgs a = valid_decode_args();
  a.q.dtype = a.out.dtype = a.k_cache.dtype = a.v_cache.dtype = DType::kE4M3;
  expect_error(normalize(a), StatusCode::kUnsupported, {"q:", "e4m3", "not supported"});
  a = valid_decode_args();
  a.q.dtype = a.out.dtype = a.k_cache.dtype = a.v_cache.dtype = DType::kFP32;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"q:", "bf16 or fp16"});
  a = valid_decode_args();
  a.v_cache.dtype = DType::kFP16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_cache:", "dtype"});
  a = valid_decode_args();
  a.v_cache.shape[1] = kCap - 1;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_cache:", "k_cache's shape"});
  a = valid_decode_args();
  a.out.shape[1] = 2;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"out:", "q's shape"});
  a = valid_decode_args();
  a.k_cache.shape[2] = a.v_cache.shape[2] = 3;  // 8 query heads are not a multiple of 3
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_cache:", "heads_kv = 3", "multiple"});
  a = valid_decode_args();
  a.k_cache.shape[0] = a.v_cache.shape[0] = kB - 1;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_cache:", "batch_cache"});
  a = valid_decode_args();
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, kHq, 2});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"lse:", "(batch, heads_q, seqlen_q)"});
}

// An e4m3 cache: q stays bf16/fp16; K, V (and k_new / v_new) e4m3 with fp32 (batch, heads_kv)
// descales, which no other cache takes.
DecodeArgs valid_e4m3_cache_args(bool paged = false) {
  DecodeArgs a = valid_decode_args(paged);
  a.k_cache.dtype = a.v_cache.dtype = DType::kE4M3;
  a.k_descale = make_tensor(g_kd, DType::kFP32, {kB, kHkv});
  a.v_descale = make_tensor(g_vd, DType::kFP32, {kB, kHkv});
  return a;
}

TEST(DecodeValidation, E4M3CacheRules) {
  for (bool paged : {false, true}) {
    DecodeArgs a = valid_e4m3_cache_args(paged);
    a.k_new = make_tensor(g_kn, DType::kE4M3, {kB, kNew, kHkv, kD});
    a.v_new = make_tensor(g_vn, DType::kE4M3, {kB, kNew, kHkv, kD});
    DecodeProblem p;
    ASSERT_TRUE(normalize(a, &p).ok()) << normalize(a).message;
    EXPECT_TRUE(p.fp8_cache());
    EXPECT_EQ(p.dtype, DType::kBF16);
    EXPECT_EQ(p.k_descale, g_kd);
    EXPECT_EQ(p.v_descale, g_vd);
    EXPECT_EQ(p.k_descale_batch_stride, kHkv);
    DecodePlan plan;
    ASSERT_TRUE(plan_decode_for(p, hopper(), &plan).ok());
    EXPECT_EQ(plan.cache_dtype, DType::kE4M3);
    DecodeProblem bf16_cache = p;  // the same shapes, another cache dtype
    bf16_cache.cache_dtype = DType::kBF16;
    expect_error(check_plan_matches(bf16_cache, plan, 0), StatusCode::kInvalidArgument, {"plan:", "cache_dtype"});
  }
  DecodeArgs a = valid_e4m3_cache_args();
  a.k_descale = TensorView{};
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_descale:", "fp32", "descale"});
  a = valid_e4m3_cache_args();
  a.v_descale = make_tensor(g_vd, DType::kFP32, {kB, kHkv + 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_descale:", "(batch, heads_kv)"});
  a = valid_e4m3_cache_args();
  a.k_descale.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_descale:", "fp32"});
  a = valid_decode_args();  // descales with a bf16 cache
  a.k_descale = make_tensor(g_kd, DType::kFP32, {kB, kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_descale:", "only e4m3 caches"});
  a = valid_e4m3_cache_args();
  a.v_cache.dtype = DType::kBF16;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_cache:", "k_cache's dtype"});
  a = valid_decode_args();
  a.k_cache.dtype = a.v_cache.dtype = DType::kFP16;  // a cache of another 16-bit dtype than q's
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_cache:", "q's dtype", "e4m3"});
  a = valid_e4m3_cache_args();
  a.k_new = make_tensor(g_kn, DType::kBF16, {kB, kNew, kHkv, kD});
  a.v_new = make_tensor(g_vn, DType::kBF16, {kB, kNew, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_new:", "cache's dtype e4m3"});
  a = valid_e4m3_cache_args();
  a.q.dtype = a.out.dtype = DType::kE4M3;
  expect_error(normalize(a), StatusCode::kUnsupported, {"q:", "e4m3", "bf16 or fp16"});
}

TEST(DecodeValidation, HeadDimMustBeSupported) {
  DecodeArgs a = valid_decode_args();
  for (TensorView* t : {&a.q, &a.out, &a.k_cache, &a.v_cache}) t->shape[3] = 96;
  expect_error(normalize(a), StatusCode::kUnsupported, {"head_dim 96", "64, 128, 256"});
}

TEST(DecodeValidation, PagedCacheRules) {
  DecodeArgs a = valid_decode_args(true);
  a.k_cache.shape[1] = a.v_cache.shape[1] = 24;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_cache:", "page_size", "power of two"});
  a = valid_decode_args(true);
  a.page_table.dtype = DType::kFP32;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"page_table:", "int32"});
  a = valid_decode_args(true);
  a.page_table = make_tensor(g_table, DType::kI32, {kB + 1, 4});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"page_table:", "dimension 0"});
  a = valid_decode_args(true);
  a.cache_batch_idx = make_tensor(g_batch_idx, DType::kI32, {kB});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cache_batch_idx:", "paged"});
}

TEST(DecodeValidation, CacheBatchIdxRules) {
  DecodeArgs a = valid_decode_args();
  a.cache_batch_idx = make_tensor(g_batch_idx, DType::kI32, {kB});
  a.k_cache.shape[0] = a.v_cache.shape[0] = 1;  // fewer cache rows than sequences: fine with an index
  EXPECT_TRUE(normalize(a).ok()) << normalize(a).message;
  a.cache_batch_idx = make_tensor(g_batch_idx, DType::kI32, {kB, 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"cache_batch_idx:", "rank 1"});
}

TEST(DecodeValidation, NewKeysRules) {
  DecodeArgs a = valid_decode_args();
  a.k_new = make_tensor(g_kn, DType::kBF16, {kB, kNew, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"v_new:", "together"});
  a.v_new = make_tensor(g_vn, DType::kBF16, {kB, kNew + 1, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_new/v_new:", "seqlen_new"});
  a.k_new = make_tensor(g_kn, DType::kBF16, {kB, kCap + 1, kHkv, kD});
  a.v_new = make_tensor(g_vn, DType::kBF16, {kB, kCap + 1, kHkv, kD});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"k_new:", "capacity"});
}

TEST(DecodeValidation, ScaleSplitsAlignment) {
  DecodeArgs a = valid_decode_args();
  a.softmax_scale = INFINITY;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"softmax_scale:", "finite"});
  a = valid_decode_args();
  a.num_splits = flash_decode::kDecodeMaxSplits + 1;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"num_splits:", "256"});
  a.num_splits = -1;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"num_splits:"});
  a = valid_decode_args();
  a.q.data = g_q + 2;
  expect_error(normalize(a), StatusCode::kUnsupported, {"q:", "16-byte"});
  a = valid_decode_args();
  a.k_cache.stride[1] = kHkv * kD + 4;  // rows 8 bytes apart from 16-byte alignment
  expect_error(normalize(a), StatusCode::kUnsupported, {"k_cache:", "stride", "16 bytes"});
}

TEST(DecodeValidation, DeviceRules) {
  DecodeProblem p;
  ASSERT_TRUE(normalize(valid_decode_args(), &p).ok());
  DeviceInfo old = hopper();
  old.cc_major = 7, old.cc_minor = 5;
  DecodePlan plan;
  expect_error(plan_decode_for(p, old, &plan), StatusCode::kUnsupported, {"decode:", "8.0"});
  DeviceInfo small = hopper();
  small.max_smem_per_block_optin = 16 * 1024;
  expect_error(plan_decode_for(p, small, &plan), StatusCode::kUnsupported, {"decode:", "shared memory"});
}

TEST(DecodeValidation, PlanMustMatchTheShapes) {
  DecodeProblem p;
  ASSERT_TRUE(normalize(valid_decode_args(), &p).ok());
  DecodePlan plan;
  ASSERT_TRUE(plan_decode_for(p, hopper(), &plan).ok());
  DecodeProblem other = p;
  other.batch = p.batch + 1;
  expect_error(check_plan_matches(other, plan, 0), StatusCode::kInvalidArgument, {"plan:", "batch"});
  expect_error(check_plan_matches(p, plan, 1), StatusCode::kInvalidArgument, {"plan:", "device"});
  expect_error(check_plan_matches(p, DecodePlan{}, 0), StatusCode::kInvalidArgument, {"plan:", "plan_decode"});
}

// The heuristic: splits fill the GPU when (batch x KV heads) does not, never more than the keys
// allow, one split when there are CTAs for a full wave; an explicit count is kept.
TEST(DecodeValidation, SplitHeuristic) {
  DecodeProblem p;
  ASSERT_TRUE(normalize(valid_decode_args(), &p).ok());
  p.batch = 1, p.heads_kv = 8, p.heads_q = 32, p.head_dim = 128, p.capacity = 65536;
  const int splits = flash_decode::choose_num_splits(p, 132);
  EXPECT_GE(splits * 8, 132);
  // Whole waves (132 SMs x 2 CTAs at d = 128 = 264 slots): never a second, mostly empty one.
  const long long slots = 132 * flash_decode::DecodeShape<128>::kCtasPerSm;
  for (int batch : {1, 3, 8, 20}) {
    p.batch = batch;
    const int s = flash_decode::choose_num_splits(p, 132);
    EXPECT_LE(static_cast<long long>(s) * batch * 8, slots) << "batch " << batch;
    EXPECT_GT(static_cast<long long>(s + 1) * batch * 8, slots) << "batch " << batch;
  }
  p.heads_kv = 32;  // MHA at batch 1: 32 CTAs a split, 8 splits (9 would make 288)
  p.batch = 1;
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), 8);
  // A wave or more: one split, unless the last wave would run mostly empty (300 CTAs of 264).
  p.heads_kv = 8, p.batch = 64;  // 512 CTAs: 1.94 waves
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), 1);
  p.heads_kv = 12, p.heads_q = 12, p.batch = 25;  // 300 CTAs: 1.14 waves; 3 splits fill 0.85
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), 3);
  p.heads_kv = 8, p.heads_q = 32, p.batch = 1;
  p.capacity = 256;  // 4 tiles: no room for more than one split of DecodeShape::kMinTilesPerSplit tiles
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), 1);
  p.capacity = 16384, p.batch = 64;
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), 1);
  // An e4m3 cache's CTAs are smaller: more of them per SM, so a wider wave to fill.
  // (The paged e4m3 shape at d = 128; p has no page table, so point it at one.)
  p.cache_dtype = DType::kE4M3, p.batch = 1, p.capacity = 65536, p.page_table = g_table;
  const int fp8_slots = 132 * flash_decode::DecodeShape<128, true, true>::kCtasPerSm;
  static_assert(flash_decode::DecodeShape<128, true, true>::kCtasPerSm > flash_decode::DecodeShape<128>::kCtasPerSm);
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), fp8_slots / 8);
  // Pages of 64 keys or more (half a 128-key tile) take the contiguous cache's 128-key tiles: its
  // slots, and splits of at least its kMinTilesPerSplit tiles.
  using Wide = flash_decode::DecodeShape<128, true, true, true>;
  static_assert(Wide::kBlockN == 128 && Wide::kCtasPerSm == flash_decode::DecodeShape<128, true, false>::kCtasPerSm);
  static_assert(Wide::kCtasPerSm < flash_decode::DecodeShape<128, true, true>::kCtasPerSm);
  for (int log2_page : {4, 5, 6, 8}) {
    p.page_size_log2 = log2_page;
    EXPECT_EQ(flash_decode::large_pages<128>(p), log2_page >= 6) << "page " << (1 << log2_page);
    EXPECT_EQ(flash_decode::choose_num_splits(p, 132),
              132 * (log2_page >= 6 ? Wide::kCtasPerSm : flash_decode::DecodeShape<128, true, true>::kCtasPerSm) / 8)
        << "page " << (1 << log2_page);
  }
  // A bf16 cache at d = 128 has 64-key tiles: pages of 32 keys are large.
  p.cache_dtype = DType::kBF16, p.page_size_log2 = 5;
  EXPECT_TRUE(flash_decode::large_pages<128>(p));
  p.page_size_log2 = 4;
  EXPECT_FALSE(flash_decode::large_pages<128>(p));
  p.page_table = nullptr, p.page_size_log2 = 6;  // contiguous: no pages
  EXPECT_FALSE(flash_decode::large_pages<128>(p));
  p.page_size_log2 = 0;
  p.page_table = nullptr;
  p.cache_dtype = DType::kBF16, p.capacity = 16384;
  p.num_splits = 0, p.batch = 1, p.capacity = 8192;
  DecodePlan plan;
  ASSERT_TRUE(plan_decode_for(p, hopper(), &plan).ok());
  EXPECT_GT(plan.num_splits, 1);
  EXPECT_EQ(plan.workspace_bytes, size_t(plan.num_splits) * 1 * 1 * 32 * (128 + 1) * 4);
  p.num_splits = 3;
  ASSERT_TRUE(plan_decode_for(p, hopper(), &plan).ok());
  EXPECT_EQ(plan.num_splits, 3);
}

// The score variants: the forward's rules, each by the argument's name, and their normalized form.
alignas(16) float g_sinks[16];
TEST(DecodeValidation, VariantRules) {
  DecodeArgs a = valid_decode_args();
  a.window_left = -2;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_left:", "-1 (unbounded) or >= 0"});
  a = valid_decode_args();
  a.window_right = -3;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_right:", "-1 (unbounded) or >= 0"});
  a = valid_decode_args();
  a.causal = true, a.window_right = 4;
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"window_right:", "with causal"});
  for (float cap : {-1.f, INFINITY, NAN}) {
    a = valid_decode_args();
    a.softcap = cap;
    expect_error(normalize(a), StatusCode::kInvalidArgument, {"softcap:", "finite and >= 0"});
  }
  a = valid_decode_args();
  a.sinks = make_tensor(g_sinks, DType::kBF16, {kHq});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks:", "fp32"});
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHkv});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks:", "(heads_q)"});
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq, 1});
  expect_error(normalize(a), StatusCode::kInvalidArgument, {"sinks:"});
}

TEST(DecodeValidation, VariantsNormalized) {
  DecodeProblem p;
  DecodeArgs a = valid_decode_args();
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_FALSE(p.variants());
  EXPECT_FALSE(p.local);
  // (-1, 0) is the causal mask itself: the plain kernel's.
  a.window_right = 0;
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_TRUE(p.causal);
  EXPECT_FALSE(p.variants());
  // Causal with a left window: a window (x, 0), not causal.
  a = valid_decode_args();
  a.causal = true, a.window_left = 100;
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_TRUE(p.local && !p.causal && p.variants());
  EXPECT_EQ(p.window_left, 100);
  EXPECT_EQ(p.window_right, 0);
  a = valid_decode_args();
  a.window_left = 7, a.window_right = -1;
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_TRUE(p.local && !p.causal);
  EXPECT_EQ(p.window_right, -1);
  a = valid_decode_args();
  a.softcap = 30.f;
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_TRUE(p.variants() && !p.local);
  EXPECT_EQ(p.softcap, 30.f);
  a = valid_decode_args();
  a.sinks = make_tensor(g_sinks, DType::kFP32, {kHq});
  a.sinks.stride[0] = 2;
  ASSERT_TRUE(normalize(a, &p).ok());
  EXPECT_TRUE(p.variants());
  EXPECT_EQ(p.sinks, g_sinks);
  EXPECT_EQ(p.sinks_stride, 2);
}

// A window's keys are what the splits share out: the heuristic counts those (a window of 500 over
// a 64k cache plans as a 500-key cache would), and window_keys is the rows' union.
TEST(DecodeValidation, SplitHeuristicCountsTheWindow) {
  DecodeProblem p;
  ASSERT_TRUE(normalize(valid_decode_args(), &p).ok());
  p.batch = 1, p.heads_kv = 8, p.heads_q = 32, p.head_dim = 128, p.seqlen_q = 1;
  p.capacity = 500;
  const int short_cache = flash_decode::choose_num_splits(p, 132);
  p.capacity = 65536;
  const int long_cache = flash_decode::choose_num_splits(p, 132);
  EXPECT_GT(long_cache, short_cache);
  p.local = true, p.window_left = 499, p.window_right = -1;
  EXPECT_EQ(p.window_keys(65536), 500);
  EXPECT_EQ(p.window_keys(300), 300);
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), short_cache);
  p.seqlen_q = 4, p.window_right = 0;  // four tokens: each row's 500 keys, 503 in all
  EXPECT_EQ(p.window_keys(65536), 503);
  p.window_left = -1;  // unbounded on the left: every key
  EXPECT_EQ(p.window_keys(65536), 65536);
  EXPECT_EQ(flash_decode::choose_num_splits(p, 132), long_cache);
}

// The e4m3 cache's GEMMs take a bf16 q as fp16, each row scaled by 2^fp16_row_exponent(row max):
// the row's largest magnitude must land in [2^14, 2^15), below fp16's largest value (65504), for
// every float a bf16 row can hold; zeros, infinities and NaN are not scaled.
TEST(DecodeQScale, RowMaxLandsBelowFp16Max) {
  for (double mx : {1.0, 0.75, 1.5, 16384.0, 32767.0, 32768.0, 65504.0, 1e-3, 3e-5, 1e20, 3.38e38, 1e-30}) {
    const int e = flash_decode::fp16_row_exponent(static_cast<float>(mx));
    const double scaled = static_cast<float>(mx) * std::ldexp(1.0, e);
    EXPECT_GE(scaled, 16384.0) << "row max " << mx;
    EXPECT_LT(scaled, 32768.0) << "row max " << mx;
  }
  // Rows below 2^-112 would need more than 2^127: capped (2^-e stays a float), subnormals too.
  EXPECT_EQ(flash_decode::fp16_row_exponent(1.2e-38f), 127);
  EXPECT_EQ(flash_decode::fp16_row_exponent(1e-40f), 127);
  EXPECT_EQ(flash_decode::fp16_row_exponent(0.f), 0);
  EXPECT_EQ(flash_decode::fp16_row_exponent(INFINITY), 0);
  EXPECT_EQ(flash_decode::fp16_row_exponent(NAN), 0);
}

}  // namespace
}  // namespace hfa
