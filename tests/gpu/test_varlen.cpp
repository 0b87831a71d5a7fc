// Variable-length batches (issue 22: cu_seqlens_q, cu_seqlens_k, max_seqlen_q/k, seqused_k) in
// every forward and backward kernel that takes them, alone and with causal masks, windows,
// softcap and sinks, against the fp64 reference by the DESIGN.md rule: check::run_check (and
// run_check_backward) compare each sequence's rows (and gradients) with the reference of that
// sequence alone, and check that rows past the last sequence (Config::varlen_tail) and the
// layouts' padding stay untouched; the backward's dk / dv rows past seqused_k must be zero.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "check/check.h"
#include "gpu_test_util.h"
#include "kernels/bwd_sm90/bwd_sm90_launch.h"

namespace hfa::testing {
namespace {

// One packed batch: each sequence's query and key counts (and the keys it uses, if given).
struct PackedCase {
  const char* name;
  std::vector<int> q, k, used;
  int tail;
  int heads_q, heads_kv;
};

// Lengths that start and end inside 128-row tiles (the direct store of a tile past a sequence's
// end next to TMA stores of whole tiles), whole tiles, sq != sk both ways, a sequence without
// queries, one without keys (its rows: O = 0, LSE = -inf), seqused_k, GQA 3:1 and MQA.
const PackedCase kCases[] = {
    {"one_row", {1}, {1}, {}, 0, 2, 2},
    {"mixed", {17, 128, 300, 64}, {17, 128, 300, 64}, {}, 5, 6, 2},
    {"sq_ne_sk", {129, 1, 200, 0, 40}, {17, 300, 0, 33, 257}, {}, 3, 4, 4},
    {"seqused_k", {100, 256, 31}, {300, 256, 90}, {250, 1, 90}, 0, 4, 1},
    {"many_short", {3, 9, 1, 27, 64, 65, 2, 130, 5, 7}, {3, 9, 1, 27, 64, 65, 2, 130, 5, 7}, {}, 1, 2, 1},
};

struct Mode {
  const char* name;
  bool causal;
  int window_left, window_right;
  float softcap;
  bool sinks;
};
const Mode kModes[] = {
    {"full", false, -1, -1, 0.f, false},
    {"causal", true, -1, -1, 0.f, false},
    {"window_48_0", false, 48, 0, 0.f, false},
    {"softcap_sinks", true, -1, -1, 2.f, true},
};

struct VarlenParam {
  std::string kernel;
  int head_dim;
  DType dtype;
  Mode mode;
};

std::string varlen_param_name(const ::testing::TestParamInfo<VarlenParam>& info) {
  const VarlenParam& p = info.param;
  return p.kernel + "_d" + std::to_string(p.head_dim) + "_" + to_string(p.dtype) + "_" + p.mode.name;
}

// Whether kernel k takes mode m's variants (a kernel without them refuses them by name: the
// validation tests' matter, not a case to skip here).
bool takes_mode(const KernelInfo& k, const Mode& m) {
  return (m.window_left < 0 && m.window_right < 0 || k.window) && (m.softcap == 0.f || k.softcap) &&
         (!m.sinks || k.sinks);
}

std::vector<VarlenParam> varlen_params() {
  std::vector<VarlenParam> out;
  for (const KernelInfo& k : list_kernels()) {
    if (!k.varlen) continue;
    for (int d : compiled_head_dims())
      for (DType dt : {DType::kBF16, DType::kFP16})
        for (const Mode& m : kModes)
          if (takes_mode(k, m)) out.push_back({k.name, d, dt, m});
  }
  return out;
}

check::Config varlen_config(const VarlenParam& p, const PackedCase& pc, int n) {
  check::Config c;
  c.kernel = p.kernel;
  c.dtype = p.dtype;
  c.head_dim = p.head_dim;
  c.heads_q = pc.heads_q;
  c.heads_kv = pc.heads_kv;
  c.varlen_q = pc.q;
  c.varlen_k = pc.k;
  c.seqused_k = pc.used;
  c.varlen_tail = pc.tail;
  c.causal = p.mode.causal;
  c.window_left = p.mode.window_left;
  c.window_right = p.mode.window_right;
  c.softcap = p.mode.softcap;
  c.sinks = p.mode.sinks;
  c.layout = kLayouts[n % 3];
  return c;
}

class ForwardVarlen : public ::testing::TestWithParam<VarlenParam> {};

TEST_P(ForwardVarlen, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  const VarlenParam& p = GetParam();
  for_each_case(varlen_param_name({p, 0}), kCases, [&](const PackedCase& pc, int n, uint64_t seed) {
    expect_forward_pass(varlen_config(p, pc, n), seed, /*max_rows=*/0);
  });
}

INSTANTIATE_TEST_SUITE_P(VarlenKernels, ForwardVarlen, ::testing::ValuesIn(varlen_params()),
                         varlen_param_name);

// A batch of long sequences: many full tiles per sequence, the persistent scheduler's causal
// grouping, GQA 4:1 (a few rows checked per head); "auto" (k6 on Hopper) and fa2.
TEST(ForwardVarlenLong, MatchReference) {
  HFA_SKIP_WITHOUT_GPU();
  for (const char* kernel : {"auto", "fa2"})
    for (bool causal : {false, true}) {
      VarlenParam p{kernel, compiled_head_dims().back(), DType::kBF16, kModes[causal ? 1 : 0]};
      PackedCase pc{"long", {4100, 1000, 5003}, {4100, 1000, 5003}, {}, 2, 8, 2};
      expect_forward_pass(varlen_config(p, pc, 0), test_seed("ForwardVarlenLong") + causal, 3000);
      if (IsSkipped() || HasFatalFailure()) return;
    }
}

// The checker has teeth: a launch that ignored the sequence boundaries of the keys, or
// seqused_k, while the reference applies them, fails.
TEST(ForwardVarlenChecker, CatchesIgnoredBoundaries) {
  HFA_SKIP_WITHOUT_GPU();
  VarlenParam p{"auto", compiled_head_dims()[0], DType::kBF16, kModes[0]};
  const std::pair<const char*, void (*)(ForwardArgs&)> ignore[] = {
      {"cu_seqlens_k", [](ForwardArgs& a) { a.cu_seqlens_k = a.cu_seqlens_q; }},
      {"seqused_k", [](ForwardArgs& a) { a.seqused_k = TensorView{}; }}};
  for (const auto& [name, tamper] : ignore) {
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(varlen_config(p, kCases[3], 0)).ok());
    check::CheckResult r;
    ASSERT_TRUE(check::run_check(buf, 91, 0, &r, tamper).ok());
    EXPECT_FALSE(r.pass) << name << " ignored and still passed: " << r.message;
  }
}

// cu_seqlens and seqused_k are device values the API cannot check: whatever they hold, the
// kernel writes only rows of out (and lse) (clamped to [0, total]): nothing outside the
// tensors' elements changes. (compute-sanitizer's memcheck run covers reads too.)
TEST(ForwardVarlenDeviceValues, OutOfRangeValuesStayInsideTheTensors) {
  HFA_SKIP_WITHOUT_GPU();
  VarlenParam p{"auto", compiled_head_dims()[0], DType::kBF16, kModes[1]};
  PackedCase pc{"bad", {40, 40, 40}, {40, 40, 40}, {40, 40, 40}, 0, 2, 2};
  check::DeviceBuffers buf;
  check::Config c = varlen_config(p, pc, 1);  // padded: gaps between rows and heads
  ASSERT_TRUE(buf.allocate(c).ok());
  int* bad = nullptr;
  ASSERT_EQ(cudaMalloc(&bad, 3 * 4 * sizeof(int)), cudaSuccess);
  const int values[12] = {-5, 30, 1 << 30, 2000000000,     // cu_seqlens_q: negative, past the end
                          0, 1 << 29, -7, 90,              // cu_seqlens_k: decreasing, huge
                          -3, 1000000, 0, 0};              // seqused_k
  ASSERT_EQ(cudaMemcpy(bad, values, sizeof(values), cudaMemcpyHostToDevice), cudaSuccess);
  check::CheckResult r;
  const Status st = check::run_check(buf, 5, 0, &r, [&](ForwardArgs& a) {
    a.cu_seqlens_q.data = bad;
    a.cu_seqlens_k.data = bad + 4;
    a.seqused_k.data = bad + 8;
  });
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(r.padding_clobbered, 0) << r.message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(bad);
}

// ---- Backward ---------------------------------------------------------------------------------

struct BackwardVarlenParam {
  std::string kernel;
  int head_dim;
  DType dtype;
  Mode mode;
  bool deterministic;
};

std::string backward_varlen_name(const ::testing::TestParamInfo<BackwardVarlenParam>& info) {
  const BackwardVarlenParam& p = info.param;
  return p.kernel + "_d" + std::to_string(p.head_dim) + "_" + to_string(p.dtype) + "_" + p.mode.name +
         (p.deterministic ? "_deterministic" : "");
}

// Every backward kernel that takes variable-length batches, at every compiled head dim (one it
// has no shape for skips, saying so), both dtypes and every mode, and deterministic mode (bf16).
std::vector<BackwardVarlenParam> backward_varlen_params() {
  std::vector<BackwardVarlenParam> out;
  for (const KernelInfo& k : list_backward_kernels()) {
    if (!k.varlen) continue;
    for (int d : compiled_head_dims())
      for (const Mode& m : kModes) {
        if (!takes_mode(k, m)) continue;
        for (DType dt : {DType::kBF16, DType::kFP16}) out.push_back({k.name, d, dt, m, false});
        out.push_back({k.name, d, DType::kBF16, m, true});
      }
  }
  return out;
}

check::Config backward_varlen_config(const BackwardVarlenParam& p, const PackedCase& pc, int n) {
  check::Config c = varlen_config({p.kernel, p.head_dim, p.dtype, p.mode}, pc, n);
  c.backward = true;
  c.deterministic = p.deterministic;
  return c;
}

class BackwardVarlen : public ::testing::TestWithParam<BackwardVarlenParam> {};

TEST_P(BackwardVarlen, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  const BackwardVarlenParam& p = GetParam();
  for_each_case(backward_varlen_name({p, 0}), kCases, [&](const PackedCase& pc, int n, uint64_t seed) {
    expect_backward_pass(backward_varlen_config(p, pc, n), seed);
  });
}

INSTANTIATE_TEST_SUITE_P(VarlenBackwardKernels, BackwardVarlen,
                         ::testing::ValuesIn(backward_varlen_params()), backward_varlen_name);

// Long sequences (many KV and Q blocks per CTA, GQA 4:1), causal and not: two random groups.
TEST(BackwardVarlenLong, MatchesReference) {
  HFA_SKIP_WITHOUT_GPU();
  for (const char* kernel : {"auto", "fa2"})
    for (bool causal : {false, true}) {
      BackwardVarlenParam p{kernel, compiled_head_dims()[0], DType::kBF16, kModes[causal ? 1 : 0], false};
      PackedCase pc{"long", {1500, 700, 2100}, {1500, 900, 2100}, {}, 2, 8, 2};
      expect_backward_pass(backward_varlen_config(p, pc, 0), test_seed("BackwardVarlenLong") + causal,
                           /*max_groups=*/2);
      if (IsSkipped() || HasFatalFailure()) return;
    }
}

// The checker has teeth for the backward too: gradients that ignore the key boundaries or
// seqused_k fail.
TEST(BackwardVarlenChecker, CatchesIgnoredBoundaries) {
  HFA_SKIP_WITHOUT_GPU();
  BackwardVarlenParam p{"auto", compiled_head_dims()[0], DType::kBF16, kModes[0], false};
  const std::pair<const char*, void (*)(BackwardArgs&)> ignore[] = {
      {"cu_seqlens_k", [](BackwardArgs& a) { a.cu_seqlens_k = a.cu_seqlens_q; }},
      {"seqused_k", [](BackwardArgs& a) { a.seqused_k = TensorView{}; }}};
  for (const auto& [name, tamper] : ignore) {
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(backward_varlen_config(p, kCases[3], 0)).ok());
    check::BackwardCheckResult r;
    const Status st = check::run_check_backward(buf, 92, 0, &r, tamper);
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_FALSE(r.pass) << name << " ignored and still passed: " << r.message;
  }
}

// Out-of-range device values (as for the forward): the backward writes nothing outside the
// gradients' elements and raises no CUDA error.
TEST(BackwardVarlenDeviceValues, OutOfRangeValuesStayInsideTheTensors) {
  HFA_SKIP_WITHOUT_GPU();
  BackwardVarlenParam p{"auto", compiled_head_dims()[0], DType::kBF16, kModes[1], false};
  PackedCase pc{"bad", {40, 40, 40}, {40, 40, 40}, {40, 40, 40}, 0, 2, 2};
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(backward_varlen_config(p, pc, 1)).ok());  // padded layout
  int* bad = nullptr;
  ASSERT_EQ(cudaMalloc(&bad, 3 * 4 * sizeof(int)), cudaSuccess);
  const int values[12] = {-5, 30, 1 << 30, 2000000000, 0, 1 << 29, -7, 90, -3, 1000000, 0, 0};
  ASSERT_EQ(cudaMemcpy(bad, values, sizeof(values), cudaMemcpyHostToDevice), cudaSuccess);
  check::BackwardCheckResult r;
  const Status st = check::run_check_backward(buf, 6, 0, &r, [&](BackwardArgs& a) {
    a.cu_seqlens_q.data = bad;
    a.cu_seqlens_k.data = bad + 4;
    a.seqused_k.data = bad + 8;
  });
  cudaFree(bad);
  if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
  ASSERT_TRUE(st.ok()) << st.message;
  for (const check::GradientError* e : {&r.dq, &r.dk, &r.dv}) EXPECT_EQ(e->padding_clobbered, 0) << r.message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Deterministic mode with a variable-length batch: bit-identical across runs, one of them on 16
// SMs (the KV blocks then finish in another order).
TEST(BackwardVarlenDeterministic, BitIdenticalOnFewerSms) {
  HFA_SKIP_WITHOUT_GPU();
  BackwardVarlenParam p{"auto", compiled_head_dims()[0], DType::kBF16, kModes[1], true};
  PackedCase pc{"det", {700, 33, 1300}, {1300, 500, 1300}, {}, 3, 16, 4};
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(backward_varlen_config(p, pc, 0)).ok());
  ASSERT_TRUE(buf.fill_random(33).ok());
  ForwardArgs fwd = buf.forward_args();
  ASSERT_TRUE(forward(fwd).ok());
  BackwardArgs bwd = buf.backward_args();
  bwd.deterministic = true;
  expect_backward_bit_identical_on_fewer_sms(buf, bwd, "varlen");
}

// bwd_sm90's deterministic mode in launch order (bwd_sm90_launch.h: dq_in_launch_order) with a
// variable-length batch: 13 sequences of short queries x 8 KV heads, keys ending in different KV
// blocks (later launches find a sequence's block past its keys), causal and not, every compiled
// head dim: correct and bit-identical on 16 SMs.
TEST(BackwardVarlenDeterministic, LaunchOrderMatchesReferenceAndRepeats) {
  HFA_SKIP_WITHOUT_GPU();
  PackedCase pc{"launch_order", {}, {}, {}, 0, 16, 8};
  for (int b = 0; b < 13; ++b) {
    pc.q.push_back(40 + 7 * b);   // 40 ... 124
    pc.k.push_back(60 + 29 * b);  // 60 ... 408
  }
  for (int d : compiled_head_dims())
    for (int mode : {0, 1}) {
      FwdProblem as_launched;
      as_launched.batch = static_cast<int>(pc.q.size()), as_launched.heads_kv = pc.heads_kv;
      as_launched.seqlen_q = pc.q.back(), as_launched.head_dim = d;
      ASSERT_TRUE(bwd_sm90::dq_in_launch_order(as_launched)) << "d " << d << ": no longer launch order";
      const BackwardVarlenParam p{"bwd_sm90", d, DType::kBF16, kModes[mode], true};
      const check::Config c = backward_varlen_config(p, pc, mode);
      expect_backward_pass(c, test_seed("LaunchOrder") + d + mode, /*max_groups=*/6);
      if (IsSkipped() || HasFatalFailure()) return;
      check::DeviceBuffers buf;
      ASSERT_TRUE(buf.allocate(c).ok());
      ASSERT_TRUE(buf.fill_random(34 + mode).ok());
      ForwardArgs fwd = buf.forward_args();
      fwd.kernel = "auto";  // (the config names the backward kernel)
      ASSERT_TRUE(forward(fwd).ok());
      BackwardArgs bwd = buf.backward_args();
      bwd.deterministic = true;
      expect_backward_bit_identical_on_fewer_sms(buf, bwd, c.describe());
      if (IsSkipped() || HasFatalFailure()) return;
    }
}

// fp32 gradients (BackwardArgs: dq, dk, dv all fp32) with a variable-length batch: the bf16/fp16
// run's sums unrounded, with the rows past seqused_k and past the last sequence zero as well.
TEST(BackwardVarlenFp32Gradients, RoundToTheDtypeRun) {
  HFA_SKIP_WITHOUT_GPU();
  PackedCase pc{"fp32", {100, 256, 31}, {300, 256, 90}, {250, 1, 90}, 3, 4, 1};
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    BackwardVarlenParam p{"auto", compiled_head_dims()[0], dtype, kModes[1], true};
    check::DeviceBuffers buf;
    ASSERT_TRUE(buf.allocate(backward_varlen_config(p, pc, 2)).ok());  // a strided layout
    ASSERT_TRUE(buf.fill_random(34).ok());
    ASSERT_TRUE(forward(buf.forward_args()).ok());
    expect_fp32_gradients_round_to_dtype(buf, buf.backward_args(), std::string("varlen ") + to_string(dtype));
    if (IsSkipped() || HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace hfa::testing
