// Every backward kernel over a GPU test matrix: forward, then backward on fresh random inputs and
// dout with poisoned gradients, dq/dk/dv checked against the fp64 reference by the DESIGN.md rule
// (check::run_check_backward).
#include <gtest/gtest.h>

#include <algorithm>

#include "check/check.h"
#include "gpu_test_util.h"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"

namespace hfa::testing {
namespace {

// Odd seqlens, seqlen_q != seqlen_k both ways (causal rows that see no key when sq > sk), MHA,
// GQA 3:1 and 2:1, MQA 8:1.
const ShapeCase kShapes[] = {
    {1, 1, 1, 2, 2},    {2, 17, 17, 8, 1},   {1, 129, 129, 4, 2}, {2, 17, 129, 6, 2},
    {1, 129, 17, 4, 4}, {1, 300, 257, 6, 3}, {1, 1, 300, 4, 1},   {1, 200, 70, 2, 1},
};

std::vector<std::string> backward_kernel_names() {
  std::vector<std::string> names;
  for (const KernelInfo& k : list_backward_kernels()) names.push_back(k.name);
  return names;
}

// A matrix cell's configuration with the backward buffers (bf16, non-causal by default).
check::Config backward_config(const MatrixParam& p, const ShapeCase& s) {
  check::Config c = matrix_config(p, s);
  c.backward = true;
  return c;
}

// Allocates c's buffers, fills the inputs and dout, and runs a forward for out and lse (any
// correct forward: "auto").
void prepare_backward_inputs(check::DeviceBuffers& buf, const check::Config& c, uint64_t seed) {
  ASSERT_TRUE(buf.allocate(c).ok());
  ASSERT_TRUE(buf.fill_random(seed).ok());
  ForwardArgs fwd = buf.forward_args();
  fwd.kernel = "auto";
  ASSERT_TRUE(forward(fwd).ok());
}

// The head dims `kernel` takes on this GPU, in deterministic mode if asked (by its own check),
// so that a test over head dims runs the supported ones instead of skipping at the first other.
std::vector<int> supported_head_dims(const std::string& kernel, bool deterministic = false) {
  std::vector<int> dims;
  for (int d : compiled_head_dims()) {
    check::DeviceBuffers buf;
    if (!buf.allocate(backward_config({kernel, d, false, DType::kBF16}, {1, 64, 64, 2, 2})).ok()) continue;
    BackwardArgs a = buf.backward_args();
    a.kernel = kernel;
    a.deterministic = deterministic;
    const Status st = select_backward_kernel(a, nullptr);
    if (st.ok())
      dims.push_back(d);
    else
      EXPECT_EQ(st.code, StatusCode::kUnsupported) << kernel << " d " << d << ": " << st.message;
  }
  return dims;
}

class BackwardMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(BackwardMatrix, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const MatrixParam& p = GetParam();
  uint64_t seed = test_seed(param_name({p, 0}));
  int n = 0;
  for (const ShapeCase& s : kShapes) {
    check::Config c = backward_config(p, s);
    c.layout = kLayouts[n++ % 3];
    expect_backward_pass(c, ++seed);
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackwardKernels, BackwardMatrix,
                         ::testing::ValuesIn(matrix(backward_kernel_names())), param_name);

class BackwardPerKernel : public ::testing::TestWithParam<std::string> {
 protected:
  check::Config small(int seqlen_q, int seqlen_k, int heads_q, int heads_kv) const {
    return backward_config({GetParam(), compiled_head_dims()[0], false, DType::kBF16},
                           {1, seqlen_q, seqlen_k, heads_q, heads_kv});
  }
};

// The checker can fail: gradients of a wrong scale or a wrong mask are caught.
TEST_P(BackwardPerKernel, CheckerCatchesWrongGradients) {
  HFA_SKIP_WITHOUT_GPU();
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(small(100, 100, 2, 2)).ok());
  check::BackwardCheckResult r;
  ASSERT_TRUE(check::run_check_backward(buf, 21, 0, &r, [](BackwardArgs& a) { a.softmax_scale = 0.1f; }).ok());
  EXPECT_FALSE(r.pass) << "a wrong scale passed: " << r.message;
  ASSERT_TRUE(check::run_check_backward(buf, 22, 0, &r, [](BackwardArgs& a) { a.causal = true; }).ok());
  EXPECT_FALSE(r.pass) << "causal gradients passed as non-causal: " << r.message;
  ASSERT_TRUE(check::run_check_backward(buf, 23, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
}

TEST_P(BackwardPerKernel, CustomSoftmaxScale) {
  HFA_SKIP_WITHOUT_GPU();
  check::Config c = small(77, 90, 2, 2);
  c.softmax_scale = -0.37f;  // negative: the max of the scaled scores is not the scaled max
  expect_backward_pass(c, 24);
  c.causal = true;  // zero: masked scores must not become 0 * -inf = NaN
  c.softmax_scale = 0.f;
  expect_backward_pass(c, 27);
}

// seqlen_q == 0: dk = dv = 0. seqlen_k == 0: dq = 0 (every row sees no key).
TEST_P(BackwardPerKernel, EmptySequencesGiveZeroGradients) {
  HFA_SKIP_WITHOUT_GPU();
  expect_backward_pass(small(0, 70, 4, 2), 25);
  expect_backward_pass(small(70, 0, 4, 2), 26);
}

// Causal problems of 1k-8k keys: bwd_sm90 launches its grid as (KV heads, KV blocks, batch)
// (bwd_sm90_launch.h: kv_blocks_across_heads), every KV head's first block first. Several batch
// entries and KV heads, GQA 3:1 and MHA, seqlen_q != seqlen_k both ways, every head dim.
TEST_P(BackwardPerKernel, CausalBlocksAcrossHeads) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = supported_head_dims(GetParam());
  if (dims.empty()) GTEST_SKIP() << GetParam() << " takes no compiled head dim here";
  const ShapeCase shapes[] = {{3, 1100, 1300, 6, 2}, {2, 2000, 1500, 4, 4}};
  for (int d : dims)
    for (const ShapeCase& s : shapes) {
      check::Config c = backward_config({GetParam(), d, /*causal=*/true, DType::kBF16}, s);
      BwdProblem bp;
      bp.fwd.causal = true, bp.fwd.seqlen_q = s.seqlen_q, bp.fwd.seqlen_k = s.seqlen_k;
      ASSERT_TRUE(bwd_sm90::kv_blocks_across_heads(bp)) << c.describe() << " no longer takes that order";
      expect_backward_pass(c, 40 + d + s.seqlen_k % 7);
    }
}

// bwd_sm90's deterministic mode (and, at d = 256, bwd_sm90 in both modes) runs its CTAs in pairs
// on adjacent KV blocks (bwd_sm90_cta.cuh: kCtaPairs) that walk the Q blocks of both and sum their
// dQ blocks on chip: odd KV block counts (the pair's second CTA past the keys: 321 and 600 keys in
// 128-key blocks, 190 in d = 256's 64-key ones), causal with sq != sk both ways (one CTA of a pair
// visits Q blocks it does not see), a window whose edges fall differently for the pair's two CTAs,
// GQA 4:1 / 2:1 and MQA; both modes, bf16 and fp16, every compiled head dim.
TEST(BackwardCtaPairs, Bwdsm90MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = supported_head_dims("bwd_sm90");
  if (dims.empty()) GTEST_SKIP() << "bwd_sm90 takes no compiled head dim here";
  struct Case {
    ShapeCase shape;
    bool causal;
    int window_left, window_right;
  };
  const Case cases[] = {{{2, 190, 190, 8, 2}, false, -1, -1},
                        {{1, 400, 321, 8, 2}, true, -1, -1},
                        {{1, 250, 450, 4, 1}, true, -1, -1},
                        {{2, 333, 600, 6, 3}, false, -1, -1},
                        {{2, 500, 500, 4, 4}, false, 100, 30}};
  uint64_t seed = 70;
  for (int d : dims)
    for (const Case& k : cases)
      for (bool deterministic : {false, true})
        for (DType dtype : {DType::kBF16, DType::kFP16}) {
          check::Config c = backward_config({"bwd_sm90", d, k.causal, dtype}, k.shape);
          c.window_left = k.window_left;
          c.window_right = k.window_right;
          c.deterministic = deterministic;
          expect_backward_pass(c, ++seed);
        }
}

// dk and dv are sums kept on chip in a fixed order: identical from run to run. dq is summed with
// fp32 atomics across KV blocks, so its last bits may differ (it is checked by the rule above).
TEST_P(BackwardPerKernel, KeyValueGradientsDeterministic) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = supported_head_dims(GetParam());
  if (dims.empty()) GTEST_SKIP() << GetParam() << " takes no compiled head dim here";
  check::Config c = small(300, 333, 4, 2);
  c.head_dim = dims.back();
  c.batch = 2;
  c.causal = true;
  check::DeviceBuffers buf;
  ASSERT_NO_FATAL_FAILURE(prepare_backward_inputs(buf, c, 27));
  std::vector<std::vector<unsigned char>> outs;
  for (int run = 0; run < 3; ++run) {
    for (const auto* t : {&buf.dk, &buf.dv})  // poison the gradients only: out and lse are inputs
      ASSERT_EQ(cudaMemset(t->data, 0xFF, t->alloc_elems * size_of(t->view.dtype)), cudaSuccess);
    const Status st = backward(buf.backward_args());
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.ok()) << st.message;
    outs.push_back(download_bytes({&buf.dk, &buf.dv}));
  }
  EXPECT_TRUE(outs[0] == outs[1] && outs[1] == outs[2]);
}

// Deterministic mode: correct by the same rule (odd lengths, sq != sk both ways, GQA and MQA,
// causal and not, every compiled head dim), ...
TEST_P(BackwardPerKernel, DeterministicModeMatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const ShapeCase shapes[] = {{2, 300, 333, 4, 2}, {1, 129, 17, 8, 1}, {1, 200, 700, 6, 3}};
  uint64_t seed = 40;
  const std::vector<int> dims = supported_head_dims(GetParam(), /*deterministic=*/true);
  if (dims.empty()) GTEST_SKIP() << GetParam() << " takes no compiled head dim here";
  for (int d : dims)
    for (const ShapeCase& s : shapes)
      for (bool causal : {false, true}) {
        check::Config c = backward_config({GetParam(), d, causal, DType::kBF16}, s);
        check::DeviceBuffers buf;
        ASSERT_TRUE(buf.allocate(c).ok());
        check::BackwardCheckResult r;
        const Status st = check::run_check_backward(buf, ++seed, 0, &r,
                                                    [](BackwardArgs& a) { a.deterministic = true; });
        if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << c.describe() << ": " << st.message;
        ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
        EXPECT_TRUE(r.pass) << c.describe() << " deterministic, seed " << seed << ": " << r.message;
      }
}

// ... and bit-identical across runs, including a run that gets only 16 of the GPU's SMs (the
// others held by check::SmOccupier), where the KV blocks finish in another order.
TEST_P(BackwardPerKernel, DeterministicModeBitIdenticalOnFewerSms) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = supported_head_dims(GetParam(), /*deterministic=*/true);
  if (dims.empty()) GTEST_SKIP() << GetParam() << " takes no compiled head dim here";
  for (int d : dims) {
    check::Config c = small(700, 1300, 16, 4);
    c.head_dim = d;
    c.batch = 2;
    c.causal = true;
    check::DeviceBuffers buf;
    ASSERT_NO_FATAL_FAILURE(prepare_backward_inputs(buf, c, 31));
    BackwardArgs bwd = buf.backward_args();
    bwd.deterministic = true;
    expect_backward_bit_identical_on_fewer_sms(buf, bwd, "d " + std::to_string(d));
    if (IsSkipped() || HasFatalFailure()) return;
  }
}

// bwd_sm90's deterministic mode in launch order (bwd_sm90_launch.h: dq_in_launch_order, where a
// KV block index's batch x KV-heads CTAs fill the GPU and the queries are few; the tests above
// take the fixed-point way): correct and bit-identical on 16 SMs, at every compiled head dim,
// causal and not, GQA 2:1, sq != sk, two or three KV blocks.
TEST(BackwardDeterministic, Bwdsm90LaunchOrderMatchesReferenceAndRepeats) {
  HFA_SKIP_WITHOUT_GPU();
  uint64_t seed = 60;
  for (int d : supported_head_dims("bwd_sm90", /*deterministic=*/true))
    for (bool causal : {false, true}) {
      const ShapeCase shape{16, d > 128 ? 120 : 200, d > 128 ? 120 : 330, 16, 8};
      check::Config c = backward_config({"bwd_sm90", d, causal, DType::kBF16}, shape);
      FwdProblem as_launched;
      as_launched.batch = shape.batch, as_launched.heads_kv = shape.heads_kv;
      as_launched.seqlen_q = shape.seqlen_q, as_launched.seqlen_k = shape.seqlen_k, as_launched.head_dim = d;
      ASSERT_TRUE(bwd_sm90::dq_in_launch_order(as_launched)) << c.describe() << " no longer takes launch order";
      check::DeviceBuffers buf;
      ASSERT_TRUE(buf.allocate(c).ok());
      check::BackwardCheckResult r;
      const Status st = check::run_check_backward(buf, ++seed, /*max_groups=*/6, &r,
                                                  [](BackwardArgs& a) { a.deterministic = true; });
      ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
      EXPECT_TRUE(r.pass) << c.describe() << " deterministic, seed " << seed << ": " << r.message;
      BackwardArgs bwd = buf.backward_args();
      bwd.deterministic = true;
      expect_backward_bit_identical_on_fewer_sms(buf, bwd, c.describe());
      if (IsSkipped() || HasFatalFailure()) return;
    }
}

// Many KV blocks and Q blocks per CTA, GQA 4:1, sq != sk; a random subset of groups checked.
TEST_P(BackwardPerKernel, LongerSequencesGqa) {
  HFA_SKIP_WITHOUT_GPU();
  for (bool causal : {true, false}) {
    check::Config c = small(1100, 1300, 16, 4);
    c.batch = 2;
    c.causal = causal;
    expect_backward_pass(c, causal ? 28 : 29, /*max_groups=*/2);
  }
}

// dq, dk, dv in fp32 (BackwardArgs): the sums the kernel otherwise rounds to q's dtype, stored
// unrounded, for every head dim it takes, bf16 and fp16, causal and not, GQA: the dtype run's
// gradients must be the fp32 ones rounded (expect_fp32_gradients_round_to_dtype). Deterministic
// mode where the kernel has it (dq's additions in a fixed order); else one KV block (a single
// addition into each dq element, so the same sums in both runs).
TEST_P(BackwardPerKernel, Fp32GradientsAreTheUnroundedSums) {
  HFA_SKIP_WITHOUT_GPU();
  const std::vector<int> dims = supported_head_dims(GetParam());
  if (dims.empty()) GTEST_SKIP() << GetParam() << " takes no compiled head dim here";
  uint64_t seed = 60;
  for (int d : dims)
    for (DType dtype : {DType::kBF16, DType::kFP16})
      for (bool causal : {false, true}) {
        check::Config c = backward_config({GetParam(), d, causal, dtype}, {2, 300, 333, 4, 2});
        c.layout = kLayouts[1];  // strided gradients in q's dtype, contiguous fp32 ones
        c.deterministic = true;
        {
          check::DeviceBuffers probe;
          ASSERT_TRUE(probe.allocate(c).ok());
          if (select_backward_kernel(probe.backward_args(), nullptr).code == StatusCode::kUnsupported) {
            c.deterministic = false;
            c.seqlen_k = 64;  // one KV block
            c.heads_q = 6;
            c.heads_kv = 3;
          }
        }
        check::DeviceBuffers buf;
        ASSERT_NO_FATAL_FAILURE(prepare_backward_inputs(buf, c, ++seed));
        expect_fp32_gradients_round_to_dtype(buf, buf.backward_args(), c.describe());
        if (IsSkipped() || HasFatalFailure()) return;
      }
}

// select_backward_kernel names what "auto" runs (bwd_sm90 on Hopper, else fa2) and refuses a
// named kernel that cannot take the problem, as the backward itself does.
TEST(BackwardSelection, AutoAndNamedKernels) {
  HFA_SKIP_WITHOUT_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const bool hopper = prop.major == 9 && prop.minor == 0;
  for (int d : compiled_head_dims()) {
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(backward_config({"auto", d, false, DType::kBF16}, {1, 64, 64, 2, 2})).ok());
    BackwardArgs a = buf.backward_args();
    std::string name;
    ASSERT_TRUE(select_backward_kernel(a, &name).ok());
    EXPECT_EQ(name, hopper ? "bwd_sm90" : "fa2") << "d " << d;
    a.kernel = "bwd_sm90";
    const Status st = select_backward_kernel(a, &name);
    if (hopper) {
      EXPECT_TRUE(st.ok()) << st.message;
    } else {
      EXPECT_EQ(st.code, StatusCode::kUnsupported) << "d " << d << ": " << st.message;
      EXPECT_EQ(backward(a).code, StatusCode::kUnsupported);
    }
  }
}

// The backward's workspace comes from hfa's pool (common/workspace_pool.h), which keeps it across
// a synchronization (the default pool's release threshold 0 would hand it back and the next call
// would map it again) until release_workspace_memory(); a backward then runs from an empty pool.
TEST(WorkspaceMemory, KeptAcrossSynchronizationUntilReleased) {
  HFA_SKIP_WITHOUT_GPU();
  const int d = compiled_head_dims()[0];
  const ShapeCase shape{2, 300, 300, 4, 2};
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(backward_config({"auto", d, false, DType::kBF16}, shape)).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(release_workspace_memory().ok());
  size_t reserved = 1;
  ASSERT_TRUE(workspace_memory_reserved(&reserved).ok());
  EXPECT_EQ(reserved, 0u) << "memory kept after release_workspace_memory with nothing in flight";
  check::BackwardCheckResult r;
  ASSERT_TRUE(check::run_check_backward(buf, 31, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(workspace_memory_reserved(&reserved).ok());
  // At least the dQ accumulator: batch * heads_q * seqlen_q * head_dim fp32.
  const size_t accumulator = size_t{4} * shape.batch * shape.heads_q * shape.seqlen_q * d;
  EXPECT_GE(reserved, accumulator) << "the workspace was not kept across the synchronization";
  ASSERT_TRUE(release_workspace_memory().ok());
  ASSERT_TRUE(workspace_memory_reserved(&reserved).ok());
  EXPECT_EQ(reserved, 0u);
  ASSERT_TRUE(check::run_check_backward(buf, 32, 0, &r).ok());
  EXPECT_TRUE(r.pass) << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllBackwardKernels, BackwardPerKernel,
                         ::testing::ValuesIn(backward_kernel_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hfa::testing
