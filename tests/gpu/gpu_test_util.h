// Shared by the GPU tests: skip without a GPU, the kernel list, the head dims of this build.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "check/check.h"
#include "check/sm_occupier.h"
#include "hfa/hfa.h"
#include "hfa_build_config.h"

namespace hfa::testing {

inline bool have_gpu() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

#define HFA_SKIP_WITHOUT_GPU() \
  if (!::hfa::testing::have_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine"

inline std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const KernelInfo& k : list_kernels()) names.push_back(k.name);
  return names;
}

inline std::vector<int> compiled_head_dims() { return {HFA_HEAD_DIMS_INIT}; }

// The test matrix both the forward and the backward suites run: one test per (kernel, head_dim,
// causal, dtype), each over a list of shapes with the layouts in rotation.
struct ShapeCase {
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv;
};
inline constexpr check::Layout kLayouts[] = {check::Layout::kPacked, check::Layout::kPadded,
                                             check::Layout::kHeadsMajor};

struct MatrixParam {
  std::string kernel;
  int head_dim;
  bool causal;
  DType dtype;
  DType fp8_out_dtype = DType::kBF16;  // the output's dtype when dtype is e4m3
};

inline std::string param_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  const MatrixParam& p = info.param;
  return p.kernel + "_d" + std::to_string(p.head_dim) + (p.causal ? "_causal_" : "_full_") +
         to_string(p.dtype) + (p.dtype == DType::kE4M3 ? std::string("_") + to_string(p.fp8_out_dtype) : "");
}

// Whether a forward kernel takes e4m3 inputs (KernelInfo::fp8); false for backward-only names.
inline bool is_fp8_kernel(const std::string& name) {
  for (const KernelInfo& k : list_kernels())
    if (k.name == name) return k.fp8;
  return false;
}

// bf16 and fp16 for the ordinary kernels; e4m3 with bf16 and with fp16 output for FP8 kernels.
inline std::vector<MatrixParam> matrix(const std::vector<std::string>& kernels) {
  std::vector<MatrixParam> out;
  for (const std::string& k : kernels)
    for (int d : compiled_head_dims())
      for (bool causal : {false, true})
        for (DType dt : {DType::kBF16, DType::kFP16}) {
          if (is_fp8_kernel(k)) out.push_back({k, d, causal, DType::kE4M3, dt});
          else out.push_back({k, d, causal, dt});
        }
  return out;
}

// The check::Config of one matrix cell and shape (layout left at packed).
inline check::Config matrix_config(const MatrixParam& p, const ShapeCase& s) {
  check::Config c;
  c.kernel = p.kernel;
  c.dtype = p.dtype;
  c.fp8_out_dtype = p.fp8_out_dtype;
  if (p.dtype == DType::kE4M3) check::use_kernel_inputs(&c, p.kernel);
  c.head_dim = p.head_dim;
  c.causal = p.causal;
  c.batch = s.batch;
  c.seqlen_q = s.seqlen_q;
  c.seqlen_k = s.seqlen_k;
  c.heads_q = s.heads_q;
  c.heads_kv = s.heads_kv;
  return c;
}

// A test's first seed: the same for a test name within one run, and different across runs
// (gtest's --gtest_random_seed), so reruns draw fresh inputs. Each check then takes ++seed.
inline uint64_t test_seed(const std::string& test_name) {
  return std::hash<std::string>{}(test_name) ^ ::testing::UnitTest::GetInstance()->random_seed();
}

// The body of a matrix test: run(case, n, seed) for each of `cases` in order (n counts from 0,
// the seeds from test_seed(name) + 1), stopping at the first case that skips or fails fatally
// (an unsupported configuration skips the rest of the cell, loudly).
template <class Cases, class Run>
void for_each_case(const std::string& name, const Cases& cases, Run run) {
  uint64_t seed = test_seed(name);
  int n = 0;
  for (const auto& c : cases) {
    run(c, n++, ++seed);
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  }
}

// Runs and checks one forward configuration against the reference (check::run_check, up to
// max_rows rows): a configuration the kernel declares unsupported (e.g. shared memory) skips the
// test, loudly (callers stop on ::testing::Test::IsSkipped()); anything else that stops it from
// running is a failure.
inline void expect_forward_pass(const check::Config& c, uint64_t seed, int64_t max_rows) {
  check::CheckResult r;
  const Status st = check::run_check(c, seed, max_rows, &r);
  if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << c.describe() << ": " << st.message;
  ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
  EXPECT_TRUE(r.pass) << c.describe() << " seed " << seed << ": " << r.message;
}

// The same for a backward configuration (check::run_check_backward, up to max_groups (batch, KV
// head) groups; 0: all).
inline void expect_backward_pass(const check::Config& c, uint64_t seed, int max_groups = 0) {
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(c).ok());
  check::BackwardCheckResult r;
  const Status st = check::run_check_backward(buf, seed, max_groups, &r);
  if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << c.describe() << ": " << st.message;
  ASSERT_TRUE(st.ok()) << c.describe() << ": " << st.message;
  EXPECT_TRUE(r.pass) << c.describe() << " seed " << seed << ": " << r.message;
}

// The bytes of device tensors (whole allocations, padding included), one after another: what a
// test compares bit for bit between runs, or with the poison pattern.
inline std::vector<unsigned char> download_bytes(
    std::initializer_list<const check::DeviceBuffers::Tensor*> tensors) {
  std::vector<unsigned char> bytes;
  for (const check::DeviceBuffers::Tensor* t : tensors) {
    const size_t offset = bytes.size();
    bytes.resize(offset + t->alloc_elems * size_of(t->view.dtype));
    EXPECT_EQ(cudaMemcpy(bytes.data() + offset, t->data, bytes.size() - offset,
                         cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return bytes;
}

// Runs the (deterministic) backward `bwd` on buf three times, the gradients poisoned before each,
// the second run with only 16 of the GPU's SMs free (the others held by check::SmOccupier, so the
// KV blocks finish in another order), and expects dq, dk, dv bit-identical. `what` names the case
// in failures; kUnsupported skips. (16, not fewer: bwd_sm90 at d = 256 launches clusters of two
// CTAs, which need two free SMs in one GPC; 16 free SMs in an H100's 8 GPCs put two in one.)
inline void expect_backward_bit_identical_on_fewer_sms(check::DeviceBuffers& buf, const BackwardArgs& bwd,
                                                       const std::string& what) {
  const check::DeviceBuffers::Tensor* grads[] = {&buf.dq, &buf.dk, &buf.dv};
  std::vector<std::vector<unsigned char>> outs;
  for (int run = 0; run < 3; ++run) {
    for (const auto* t : grads)
      ASSERT_EQ(cudaMemset(t->data, 0xFF, t->alloc_elems * size_of(t->view.dtype)), cudaSuccess);
    check::SmOccupier occupier;
    if (run == 1) ASSERT_TRUE(occupier.occupy(/*free_sms=*/16).ok());
    const Status st = backward(bwd);
    if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.ok()) << st.message;
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    ASSERT_TRUE(occupier.release().ok());
    outs.push_back(download_bytes({&buf.dq, &buf.dk, &buf.dv}));
  }
  // Which gradient differs, in how many elements, and its first differing element as
  // (batch, row, head, column) of its packed (batch, seqlen, heads, d) layout.
  auto differences = [&](const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
    std::string out;
    size_t offset = 0;
    const char* names[] = {"dq", "dk", "dv"};
    for (int g = 0; g < 3; ++g) {
      const size_t elem = size_of(grads[g]->view.dtype), bytes = grads[g]->alloc_elems * elem;
      int64_t count = 0, first = -1;
      for (size_t e = 0; e < bytes / elem; ++e)
        if (std::memcmp(a.data() + offset + e * elem, b.data() + offset + e * elem, elem) != 0) {
          if (first < 0) first = static_cast<int64_t>(e);
          ++count;
        }
      if (count > 0) {
        const TensorView& v = grads[g]->view;
        out += std::string(" ") + names[g] + ": " + std::to_string(count) + " elements, the first at element " +
               std::to_string(first);
        if (v.rank == 4)
          out += " (" + std::to_string(first / v.stride[0]) + ", " + std::to_string(first % v.stride[0] / v.stride[1]) +
                 ", " + std::to_string(first % v.stride[1] / v.stride[2]) + ", " + std::to_string(first % v.stride[2]) +
                 ")";
        out += ";";
      }
      offset += bytes;
    }
    return out;
  };
  EXPECT_TRUE(outs[0] == outs[1]) << what << ": the run on 16 SMs differs:" << differences(outs[0], outs[1]);
  EXPECT_TRUE(outs[0] == outs[2]) << what << ": two full-GPU runs differ:" << differences(outs[0], outs[2]);
}

// x rounded to nearest (even) in dtype (bf16 or fp16), as its bits.
inline uint16_t rounded_bits(float x, DType dtype) {
  uint16_t bits;
  if (dtype == DType::kBF16) {
    const __nv_bfloat16 r = __float2bfloat16_rn(x);
    std::memcpy(&bits, &r, 2);
  } else {
    const __half r = __float2half_rn(x);
    std::memcpy(&bits, &r, 2);
  }
  return bits;
}

// Runs the backward `bwd` (gradients in q's dtype, in buf) and again with fp32 gradients (fresh
// contiguous tensors, NaN-poisoned), and expects every fp32 element written and, rounded to q's
// dtype, bit-identical to the first run's: the fp32 gradients are the sums the kernel otherwise
// rounds. And not all of them representable in q's dtype (else they were rounded before the
// store). bwd must give the same sums twice: deterministic mode, or dq with one KV block.
inline void expect_fp32_gradients_round_to_dtype(check::DeviceBuffers& buf, const BackwardArgs& bwd,
                                                 const std::string& what) {
  const check::DeviceBuffers::Tensor* low[3] = {&buf.dq, &buf.dk, &buf.dv};
  for (const auto* t : low)
    ASSERT_EQ(cudaMemset(t->data, 0xFF, t->alloc_elems * size_of(t->view.dtype)), cudaSuccess);
  Status st = backward(bwd);
  if (st.code == StatusCode::kUnsupported) GTEST_SKIP() << what << ": " << st.message;
  ASSERT_TRUE(st.ok()) << what << ": " << st.message;

  struct Fp32Grad {
    float* data = nullptr;
    ~Fp32Grad() { cudaFree(data); }
  } f32[3];
  // The gradients as bwd passes them (rank 3 for a variable-length batch), elements of buf's.
  const TensorView* low_views[3] = {&bwd.dq, &bwd.dk, &bwd.dv};
  BackwardArgs bwd32 = bwd;
  TensorView* views[3] = {&bwd32.dq, &bwd32.dk, &bwd32.dv};
  for (int g = 0; g < 3; ++g) {
    const TensorView& v = *low_views[g];
    ASSERT_EQ(cudaMalloc(&f32[g].data, v.numel() * sizeof(float) + 16), cudaSuccess);
    ASSERT_EQ(cudaMemset(f32[g].data, 0xFF, v.numel() * sizeof(float)), cudaSuccess);
    TensorView c = v;
    c.data = f32[g].data;
    c.dtype = DType::kFP32;
    for (int64_t d = v.rank - 1, stride = 1; d >= 0; stride *= v.shape[d], --d) c.stride[d] = stride;
    *views[g] = c;
  }
  st = backward(bwd32);
  ASSERT_TRUE(st.ok()) << what << " (fp32 gradients): " << st.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const char* names[3] = {"dq", "dk", "dv"};
  int64_t inexact = 0;
  for (int g = 0; g < 3; ++g) {
    const TensorView& v = *low_views[g];
    const int64_t base = (static_cast<const char*>(v.data) - static_cast<const char*>(low[g]->data)) / 2;
    std::vector<uint16_t> got_low(low[g]->alloc_elems);
    std::vector<float> got32(v.numel());
    ASSERT_EQ(cudaMemcpy(got_low.data(), low[g]->data, got_low.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got32.data(), f32[g].data, got32.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t unwritten = 0, differ = 0;
    for (int64_t i = 0; i < v.numel(); ++i) {
      int64_t offset = base;  // element i (row-major over v's shape) in the strided low-precision tensor
      for (int64_t d = v.rank - 1, rest = i; d >= 0; rest /= v.shape[d], --d) offset += rest % v.shape[d] * v.stride[d];
      const float x = got32[i];
      if (std::isnan(x)) { ++unwritten; continue; }
      const uint16_t r = rounded_bits(x, v.dtype);
      differ += r != got_low[offset];
      float back;
      if (v.dtype == DType::kBF16) { __nv_bfloat16 b; std::memcpy(&b, &r, 2); back = __bfloat162float(b); }
      else { __half h; std::memcpy(&h, &r, 2); back = __half2float(h); }
      inexact += back != x;
    }
    EXPECT_EQ(unwritten, 0) << what << ": " << names[g] << " (fp32) elements not written";
    EXPECT_EQ(differ, 0) << what << ": " << names[g] << " (fp32) elements whose rounding is not the "
                         << to_string(v.dtype) << " run's, of " << v.numel();
  }
  EXPECT_GT(inexact, 0) << what << ": every fp32 gradient is a " << to_string(low[0]->view.dtype) << " value";
}

}  // namespace hfa::testing
