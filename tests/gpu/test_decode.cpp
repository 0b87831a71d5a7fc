// Flash decode vs the fp64 reference (check_decode.h): contiguous and paged caches, random
// cache_seqlens (0, 1 and full among them), shuffled page tables, appended keys, causal with up to
// 16 new tokens, GQA / MQA / MHA, every head dim, forced split counts, e4m3 caches with descales;
// sliding windows, softcap and sinks; CUDA graph replay; errors.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "check/check_decode.h"
#include "gpu_test_util.h"
#include "kernels/decode/decode.h"

namespace hfa {
namespace {

using check::DecodeBuffers;
using check::DecodeCheckResult;
using check::DecodeConfig;

// A configuration at the build's first head dim with the given shape (the rest at defaults).
DecodeConfig small_config(int batch, int heads_q, int heads_kv, int capacity) {
  DecodeConfig c;
  c.head_dim = testing::compiled_head_dims()[0];
  c.batch = batch, c.heads_q = heads_q, c.heads_kv = heads_kv, c.capacity = capacity;
  return c;
}

void expect_pass(const DecodeConfig& c, uint64_t seed, int64_t max_rows = 512) {
  DecodeBuffers buf;
  ASSERT_TRUE(buf.allocate(c, seed).ok()) << c.describe();
  DecodeCheckResult r;
  const Status st = check::run_decode_check(buf, max_rows, &r);
  ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
  EXPECT_TRUE(r.pass) << c.describe() << ": " << r.message;
}

struct DecodeParam {
  int head_dim;
  DType dtype;
  int page_size;  // 0: contiguous
  bool fp8_cache;  // an e4m3 cache (with k_descale / v_descale) for a bf16/fp16 q
};

// The parameter's head dim, dtype and cache (the rest at defaults).
DecodeConfig config_of(const DecodeParam& param) {
  DecodeConfig c;
  c.dtype = param.dtype, c.head_dim = param.head_dim, c.page_size = param.page_size;
  c.fp8_cache = param.fp8_cache;
  return c;
}

std::string param_name(const ::testing::TestParamInfo<DecodeParam>& info) {
  const DecodeParam& p = info.param;
  return "d" + std::to_string(p.head_dim) + "_" + to_string(p.dtype) +
         (p.page_size ? "_page" + std::to_string(p.page_size) : "_contiguous") +
         (p.fp8_cache ? "_e4m3cache" : "");
}

class DecodeMatrix : public ::testing::TestWithParam<DecodeParam> {};

// Shapes: (batch, seqlen_q, heads_q, heads_kv, capacity, seqlen_new, causal).
struct DecodeShapeCase {
  int batch, seqlen_q, heads_q, heads_kv, capacity, seqlen_new;
  bool causal;
  void apply(DecodeConfig* c) const {
    c->batch = batch, c->seqlen_q = seqlen_q, c->heads_q = heads_q, c->heads_kv = heads_kv;
    c->capacity = capacity, c->seqlen_new = seqlen_new, c->causal = causal;
  }
};
constexpr DecodeShapeCase kShapes[] = {
    {5, 1, 32, 8, 700, 0, false},    // GQA 4:1, one token, random lengths (0, 1, full among them)
    {4, 1, 16, 2, 1000, 1, false},   // GQA 8:1, one appended token
    {3, 4, 8, 1, 333, 4, true},      // MQA, speculative: 4 new tokens, causal
    {3, 16, 4, 4, 513, 16, true},    // MHA, 16 tokens: 64 packed rows (4 row blocks)
    {2, 16, 32, 8, 300, 0, true},    // GQA, causal 16 tokens past the cache (rows past it see none)
    {6, 2, 12, 2, 2100, 2, false},   // GQA 6:1, long caches
};

TEST_P(DecodeMatrix, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const DecodeParam& param = GetParam();
  uint64_t seed = 1;
  for (const DecodeShapeCase& s : kShapes) {
    DecodeConfig c = config_of(param);
    s.apply(&c);
    expect_pass(c, ++seed);
  }
}

std::vector<DecodeParam> decode_params() {
  std::vector<DecodeParam> v;
  for (int d : testing::compiled_head_dims())
    for (DType t : {DType::kBF16, DType::kFP16})
      for (int page : {0, 16, 64, 256}) {
        v.push_back({d, t, page, false});
        if (page != 16) v.push_back({d, t, page, true});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeMatrix, ::testing::ValuesIn(decode_params()), param_name);

// Every split count gives the right answer, including more splits than key tiles (empty splits).
TEST(Decode, ForcedSplitCounts) {
  HFA_SKIP_WITHOUT_GPU();
  for (int d : testing::compiled_head_dims())
    for (int splits : {1, 2, 3, 7, 16, 33, 64}) {
      DecodeConfig c;
      c.head_dim = d, c.batch = 3, c.heads_q = 16, c.heads_kv = 4, c.capacity = 1500;
      c.page_size = splits % 2 ? 32 : 0, c.num_splits = splits, c.seqlen_q = 2, c.causal = true;
      c.seqlen_new = 2;
      expect_pass(c, 100 + splits);
      c.fp8_cache = true;
      expect_pass(c, 200 + splits);
    }
}

TEST(Decode, CacheBatchIdxAndScales) {
  HFA_SKIP_WITHOUT_GPU();
  DecodeConfig c = small_config(4, 8, 2, 640);
  c.cache_batch_idx = true;
  c.seqlen_new = 1;
  expect_pass(c, 7);
  for (float scale : {0.f, -0.37f, 2.f}) {
    c.softmax_scale = scale;
    c.with_lse = scale != 2.f;
    expect_pass(c, 8);
  }
  c.fp8_cache = true;  // the descales follow the query's batch row, not the cache row
  for (float scale : {-0.37f, 2.f}) {
    c.softmax_scale = scale;
    expect_pass(c, 9);
  }
}

// A bf16 q beyond fp16's range (and far below 1) with an e4m3 cache, whose GEMMs run in fp16 on q
// rows scaled by powers of two: every head dim, contiguous and paged. The bf16 cache is not in this
// test: its kernel is not involved, and rows scaled by 2^16 make the softmax one-hot, where the
// tolerance baseline is exact (P = 1, O = a row of V) while every FlashAttention-style kernel
// rounds its unnormalized P (up to 2^8 under the lazy rescale) to bf16 and divides by the fp32 sum:
// one bf16 ulp of O (1.56e-2 at |O| in [2, 4)), over the 1/512 atol (H200, session 44; WORKLOG,
// "Flash decode").
TEST(Decode, WideQueryRange) {
  HFA_SKIP_WITHOUT_GPU();
  for (int d : testing::compiled_head_dims())
    for (int page : {0, 64}) {
      DecodeConfig c;
      c.head_dim = d, c.batch = 3, c.seqlen_q = 2, c.heads_q = 20, c.heads_kv = 4, c.capacity = 700;
      c.causal = true, c.page_size = page, c.fp8_cache = true, c.wide_q_range = true;
      expect_pass(c, 301 + d + page);
    }
}

// The score variants (sliding windows, softcap, sinks; decode_kernel.cuh's kVariants kernel):
// every head dim, bf16 / fp16 caches contiguous and in pages of 16 and 64, e4m3 caches; windows
// shorter and longer than the caches, crossing tiles and pages, with causal and several tokens;
// a window of one key; sinks on rows that see no key (cache lengths 0); the variants together
// under forced split counts (the sink must join the denominator exactly once).
struct DecodeVariantCase {
  DecodeShapeCase shape;
  int window_left, window_right;
  float softcap;
  bool sinks;
  int num_splits;
};
constexpr DecodeVariantCase kVariantCases[] = {
    {{5, 1, 32, 8, 1500, 0, false}, 300, -1, 0.f, false, 0},    // a window, one token, GQA 4:1
    {{3, 4, 8, 1, 777, 4, true}, 100, -1, 0.f, false, 0},       // causal window, 4 new tokens, MQA
    {{3, 3, 12, 2, 600, 0, false}, 64, 5, 0.f, false, 3},       // both sides, GQA 6:1, 3 splits
    {{3, 2, 8, 8, 500, 0, false}, 0, 0, 0.f, false, 0},         // one key per row (its diagonal)
    {{4, 1, 16, 2, 900, 1, false}, 5000, -1, 0.f, false, 0},    // a window longer than the cache
    {{4, 1, 32, 8, 2100, 0, false}, -1, -1, 30.f, false, 0},    // softcap 30
    {{3, 2, 16, 4, 700, 2, true}, -1, -1, 5.f, false, 0},       // softcap 5 (tanh saturates), causal
    {{5, 1, 32, 8, 1000, 0, false}, -1, -1, 0.f, true, 0},      // sinks (cache lengths 0, 1 among them)
    {{3, 16, 4, 4, 513, 16, true}, 200, 0, 20.f, true, 0},      // all of them, 16 tokens (4 row blocks)
    {{2, 3, 16, 2, 3000, 3, true}, 1000, -1, 10.f, true, 16},   // all of them, 16 splits
    {{2, 1, 8, 2, 2000, 0, false}, 129, -1, 0.f, true, 64},     // more splits than the window's tiles
};

class DecodeVariants : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(DecodeVariants, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const DecodeParam& param = GetParam();
  uint64_t seed = 500;
  for (const DecodeVariantCase& v : kVariantCases) {
    DecodeConfig c = config_of(param);
    v.shape.apply(&c);
    c.window_left = v.window_left, c.window_right = v.window_right;
    c.softcap = v.softcap, c.sinks = v.sinks, c.num_splits = v.num_splits;
    expect_pass(c, ++seed);
  }
}

std::vector<DecodeParam> decode_variant_params() {
  std::vector<DecodeParam> v;
  for (int d : testing::compiled_head_dims())
    for (DType t : {DType::kBF16, DType::kFP16}) {
      for (int page : {0, 16, 64}) v.push_back({d, t, page, false});
      v.push_back({d, t, t == DType::kBF16 ? 0 : 64, true});
    }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeVariants, ::testing::ValuesIn(decode_variant_params()), param_name);

// Every split count gives the same answer with a window and sinks as the reference does (the
// window's tiles shared out, the sink once): 1 .. 64 splits.
TEST(Decode, VariantsForcedSplitCounts) {
  HFA_SKIP_WITHOUT_GPU();
  for (int d : testing::compiled_head_dims())
    for (int splits : {1, 2, 5, 33}) {
      DecodeConfig c;
      c.head_dim = d, c.batch = 3, c.heads_q = 16, c.heads_kv = 4, c.capacity = 1500;
      c.page_size = splits % 2 ? 32 : 0, c.num_splits = splits, c.seqlen_q = 2, c.causal = true;
      c.window_left = 700, c.sinks = true, c.softcap = 15.f;
      expect_pass(c, 700 + splits);
    }
}

// A paged cache whose pages wholly before the window are freed (page-table entries -1, as an
// engine leaves them): decode reads neither those entries nor those pages (memcheck runs this
// test: scripts/gpu-check.sh's decode-sanitize step, and session 50's run), and the answer is
// the reference's. Pages of 16 and 64 keys (a lookup per row and per page), bf16 and e4m3 caches,
// one token and four causal ones, several splits.
TEST(Decode, WindowDoesNotReadPagesBeforeIt) {
  HFA_SKIP_WITHOUT_GPU();
  for (int d : testing::compiled_head_dims())
    for (int page : {16, 64})
      for (bool fp8 : {false, true}) {
        DecodeConfig c;
        c.head_dim = d, c.batch = 4, c.heads_q = 16, c.heads_kv = 4, c.capacity = 3000;
        c.page_size = page, c.fp8_cache = fp8, c.evict_pages_before_window = true;
        c.cache_seqlens = {2990, 1500, 700, 90};
        c.window_left = 333, c.window_right = -1;
        expect_pass(c, 900 + d + page + fp8);
        c.seqlen_q = 4, c.seqlen_new = 4, c.causal = true, c.num_splits = 3;
        c.cache_seqlens = {2990, 1500, 700, 90};
        c.window_left = 200, c.window_right = 0;
        expect_pass(c, 950 + d + page + fp8);
      }
}

TEST(Decode, EmptyCachesAndEmptyBatch) {
  HFA_SKIP_WITHOUT_GPU();
  DecodeConfig c = small_config(3, 8, 8, 64);
  c.cache_seqlens = {0, 0, 0};  // no key anywhere: O = 0, LSE = -inf
  expect_pass(c, 9);
  c.num_splits = 4;
  expect_pass(c, 10);
  c.batch = 0, c.cache_seqlens.clear();
  DecodeBuffers buf;
  ASSERT_TRUE(buf.allocate(c, 11).ok());
  EXPECT_TRUE(decode(buf.args()).ok());
}

// seqlen_q = 0 with k_new: the keys are appended, nothing else runs.
TEST(Decode, AppendOnly) {
  HFA_SKIP_WITHOUT_GPU();
  DecodeConfig c = small_config(2, 4, 2, 100);
  c.seqlen_q = 0, c.seqlen_new = 3;
  c.page_size = 16;
  expect_pass(c, 12);
  c.fp8_cache = true;  // e4m3 rows are half as many 16-byte chunks
  expect_pass(c, 15);
}

// A decode step captured in a CUDA graph and replayed with new cache_seqlens and a new page table
// (same device pointers) gives what an eager call on the same inputs gives, bit for bit.
TEST(Decode, GraphReplayEqualsEager) {
  HFA_SKIP_WITHOUT_GPU();
  DecodeConfig c = small_config(2, 32, 8, 4096);
  c.page_size = 64;
  DecodeBuffers buf;
  ASSERT_TRUE(buf.allocate(c, 13).ok());
  const DecodeArgs args = buf.args();
  DecodePlan plan;
  ASSERT_TRUE(plan_decode(args, &plan).ok());
  ASSERT_GT(plan.num_splits, 1) << "the test wants the merge in the graph";
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, plan.workspace_bytes), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = decode(args, plan, workspace, plan.workspace_bytes, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.message;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const size_t out_bytes = buf.out.numel() * 2, lse_bytes = buf.lse.numel() * 4;
  const int pages = static_cast<int>(buf.page_table.shape[1]);
  for (int step = 0; step < 3; ++step) {
    // New lengths and a new page mapping (the second sequence's pages reversed).
    std::vector<int> lens = {1000 + 1234 * step, 4096 - 77 * step};
    ASSERT_EQ(cudaMemcpy(buf.cache_seqlens.data, lens.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<int> table(2 * buf.page_table.stride[0]);
    ASSERT_EQ(cudaMemcpy(table.data(), buf.page_table.data, table.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    std::reverse(table.begin() + buf.page_table.stride[0], table.begin() + buf.page_table.stride[0] + pages);
    ASSERT_EQ(cudaMemcpy(buf.page_table.data, table.data(), table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);

    ASSERT_TRUE(buf.poison_outputs().ok());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<uint8_t> graph_out(out_bytes), graph_lse(lse_bytes), eager_out(out_bytes), eager_lse(lse_bytes);
    ASSERT_EQ(cudaMemcpy(graph_out.data(), buf.out.data, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(graph_lse.data(), buf.lse.data, lse_bytes, cudaMemcpyDeviceToHost), cudaSuccess);

    // Eager on the same inputs, and checked against the reference.
    buf.seqlens = lens;
    DecodeCheckResult r;
    ASSERT_TRUE(check::run_decode_check(buf, 256, &r, [&](const DecodeArgs& a) {
                  return decode(a, plan, workspace, plan.workspace_bytes, nullptr);
                }).ok());
    EXPECT_TRUE(r.pass) << "step " << step << ": " << r.message;
    ASSERT_EQ(cudaMemcpy(eager_out.data(), buf.out.data, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(eager_lse.data(), buf.lse.data, lse_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(graph_out, eager_out) << "step " << step;
    EXPECT_EQ(graph_lse, eager_lse) << "step " << step;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(workspace);
}

// Kernel nodes in one decode step captured on `stream` (the step is recorded, not run).
int captured_kernel_nodes(const DecodeArgs& args, const DecodePlan& plan, void* workspace, cudaStream_t stream) {
  cudaGraph_t graph;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return -1;
  const Status captured = decode(args, plan, workspace, plan.workspace_bytes, stream);
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !captured.ok()) return -1;
  size_t n = 0;
  cudaGraphGetNodes(graph, nullptr, &n);
  std::vector<cudaGraphNode_t> nodes(n);
  cudaGraphGetNodes(graph, nodes.data(), &n);
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
  }
  cudaGraphDestroy(graph);
  return kernels;
}

// Restores the merge in the split grid when a test that turned it off ends, however it ends.
struct MergeInGridGuard {
  ~MergeInGridGuard() { flash_decode::set_merge_in_grid_allowed(true); }
};

// With several splits whose CTAs the device holds at once, the split kernel merges its partial
// results itself after a grid-wide barrier (a cooperative launch: a captured step is one kernel
// node); with that turned off, the merge kernel does it (two nodes). Both give the same bits, and
// the reference's answer. Split counts on both of the merge's row paths (a warp per row up to 8
// parts, a CTA per row past that), contiguous and paged, bf16 and e4m3 caches, sinks.
TEST(Decode, MergeInGridEqualsMergeKernel) {
  HFA_SKIP_WITHOUT_GPU();
  MergeInGridGuard guard;
  struct Case { int splits, page_size; bool fp8, sinks; };
  const Case cases[] = {{2, 0, false, false}, {5, 32, false, false}, {16, 0, true, false},
                        {9, 64, true, false}, {12, 0, false, true}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int d : testing::compiled_head_dims())
    for (const Case& k : cases) {
      // 2 sequences x 2 KV heads x 1 row block (2 tokens x 4 query heads): 4 CTAs a split.
      DecodeConfig c = small_config(2, 8, 2, 2500);
      c.head_dim = d, c.num_splits = k.splits, c.page_size = k.page_size, c.fp8_cache = k.fp8;
      c.sinks = k.sinks, c.seqlen_q = 2, c.causal = true;
      SCOPED_TRACE(c.describe());
      DecodeBuffers buf;
      ASSERT_TRUE(buf.allocate(c, 700 + k.splits).ok());
      const DecodeArgs args = buf.args();
      DecodePlan plan;
      ASSERT_TRUE(plan_decode(args, &plan).ok());
      ASSERT_EQ(plan.num_splits, k.splits);
      void* workspace = nullptr;
      ASSERT_EQ(cudaMalloc(&workspace, plan.workspace_bytes), cudaSuccess);
      const size_t out_bytes = buf.out.numel() * size_of(buf.out.dtype), lse_bytes = buf.lse.numel() * 4;
      std::vector<uint8_t> out[2], lse[2];
      int nodes[2];
      for (int path = 0; path < 2; ++path) {  // 0: in the split grid, 1: the merge kernel
        flash_decode::set_merge_in_grid_allowed(path == 0);
        nodes[path] = captured_kernel_nodes(args, plan, workspace, stream);
        ASSERT_TRUE(buf.poison_outputs().ok());
        ASSERT_TRUE(decode(args, plan, workspace, plan.workspace_bytes, stream).ok());
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        out[path].resize(out_bytes), lse[path].resize(lse_bytes);
        ASSERT_EQ(cudaMemcpy(out[path].data(), buf.out.data, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(lse[path].data(), buf.lse.data, lse_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      }
      flash_decode::set_merge_in_grid_allowed(true);
      cudaFree(workspace);
      EXPECT_EQ(nodes[0], 1) << "the split kernel merges (one launch)";
      EXPECT_EQ(nodes[1], 2) << "the merge kernel after the split kernel";
      EXPECT_TRUE(out[0] == out[1]) << "out differs between the two merges";
      EXPECT_TRUE(lse[0] == lse[1]) << "lse differs between the two merges";
      expect_pass(c, 700 + k.splits);  // (the merge in the grid, checked against the reference)
    }
  cudaStreamDestroy(stream);
}

// Rejected arguments launch nothing: the poisoned output stays poisoned and the cache unchanged.
TEST(Decode, ErrorsTouchNothing) {
  HFA_SKIP_WITHOUT_GPU();
  DecodeConfig c = small_config(2, 8, 2, 128);
  c.seqlen_new = 1;
  DecodeBuffers buf;
  ASSERT_TRUE(buf.allocate(c, 14).ok());
  std::vector<uint8_t> cache_before(buf.k_cache.numel() * 2), cache_after(cache_before.size());
  ASSERT_EQ(cudaMemcpy(cache_before.data(), buf.k_cache.data, cache_before.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  DecodeArgs a = buf.args();
  a.num_splits = 999;
  EXPECT_EQ(decode(a).code, StatusCode::kInvalidArgument);
  a = buf.args();
  a.v_new = TensorView{};
  EXPECT_EQ(decode(a).code, StatusCode::kInvalidArgument);
  a = buf.args();
  DecodePlan plan;
  ASSERT_TRUE(plan_decode(a, &plan).ok());
  a.q.shape[0] = a.out.shape[0] = 1;  // a different batch than planned
  a.cache_seqlens.shape[0] = 1;
  a.k_new.shape[0] = a.v_new.shape[0] = 1;
  a.lse.shape[0] = 1;
  EXPECT_EQ(decode(a, plan, nullptr, 0).code, StatusCode::kInvalidArgument);
  if (plan.workspace_bytes > 0)
    EXPECT_EQ(decode(buf.args(), plan, nullptr, 0).code, StatusCode::kInvalidArgument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> out(buf.out.numel());
  ASSERT_EQ(cudaMemcpy(out.data(), buf.out.data, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint16_t x : out) ASSERT_EQ(x, 0xFFFF);
  ASSERT_EQ(cudaMemcpy(cache_after.data(), buf.k_cache.data, cache_after.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cache_before, cache_after);
}

}  // namespace
}  // namespace hfa
