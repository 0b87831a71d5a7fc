// quantize_fp8 on a GPU: its e4m3 values and descales against the transform computed on the host
// in fp64 (mean key, signs, Walsh-Hadamard), and the FP8 forward of its outputs against the fp64
// attention of the original bf16 inputs. Failed calls write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "check/check.h"
#include "check/host_tensors.h"
#include "common/hadamard.h"
#include "gpu_test_util.h"
#include "reference/reference.h"

namespace hfa::testing {
namespace {

// A device tensor owned by the test (check::DeviceBuffers::Tensor, for the host_tensors helpers).
struct OwnedTensor {
  check::DeviceBuffers::Tensor t;
  OwnedTensor(DType dtype, std::initializer_list<int64_t> shape) {
    t.view = make_tensor(nullptr, dtype, shape);
    t.alloc_elems = t.view.numel();
    EXPECT_EQ(cudaMalloc(&t.data, std::max<int64_t>(t.alloc_elems, 1) * size_of(dtype)), cudaSuccess);
    EXPECT_EQ(cudaMemset(t.data, 0xFF, std::max<int64_t>(t.alloc_elems, 1) * size_of(dtype)), cudaSuccess);
    t.view.data = t.data;
  }
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  ~OwnedTensor() { cudaFree(t.data); }
  std::vector<double> values() const {  // e4m3 codes as doubles, (batch, seqlen, heads, d) order
    std::vector<uint8_t> bytes;
    EXPECT_TRUE(check::download(t, &bytes).ok());
    return check::to_contiguous(t.view, bytes);
  }
  std::vector<float> floats() const {
    std::vector<float> host;
    EXPECT_TRUE(check::copy_to_host(t, &host).ok());
    return host;
  }
};

// x (one row of d values) -> W diag(signs) x / sqrt(d): what quantize_fp8 applies to Q and K.
void hadamard_row(double* x, int d, uint64_t seed) {
  for (int c = 0; c < d; ++c) x[c] *= hadamard_sign(seed, c);
  for (int s = 1; s < d; s *= 2)
    for (int c = 0; c < d; ++c)
      if (!(c & s)) {
        const double a = x[c], b = x[c + s];
        x[c] = a + b;
        x[c + s] = a - b;
      }
  for (int c = 0; c < d; ++c) x[c] /= std::sqrt(static_cast<double>(d));
}

struct Options {
  bool block, hadamard, mean;
};

std::string option_name(const ::testing::TestParamInfo<Options>& info) {
  return std::string(info.param.block ? "block" : "per_head") + (info.param.hadamard ? "_hadamard" : "") +
         (info.param.mean ? "_mean_key" : "");
}

class QuantizeFp8 : public ::testing::TestWithParam<Options> {
 protected:
  void SetUp() override {
    HFA_SKIP_WITHOUT_GPU();
    c.head_dim = compiled_head_dims()[0];
    c.batch = 2;
    c.seqlen_q = 200;
    c.seqlen_k = 300;
    c.heads_q = 6;
    c.heads_kv = 2;
    c.layout = check::Layout::kPadded;  // strided inputs
    ASSERT_TRUE(buf.allocate(c).ok());
    ASSERT_TRUE(buf.fill_random(5).ok());
  }
  check::Config c;
  check::DeviceBuffers buf;
  static constexpr uint64_t kSeed = 1234;
};

TEST_P(QuantizeFp8, MatchesTheHostTransformAndAttention) {
  const Options opt = GetParam();
  const int B = c.batch, Sq = c.seqlen_q, Sk = c.seqlen_k, Hq = c.heads_q, Hk = c.heads_kv, D = c.head_dim;
  const int nbq = (Sq + 127) / 128, nbk = (Sk + 127) / 128;
  OwnedTensor q8(DType::kE4M3, {B, Sq, Hq, D}), k8(DType::kE4M3, {B, Sk, Hk, D}), v8(DType::kE4M3, {B, Sk, Hk, D});
  OwnedTensor qs = opt.block ? OwnedTensor(DType::kFP32, {B, Hq, nbq}) : OwnedTensor(DType::kFP32, {B, Hk});
  OwnedTensor ks = opt.block ? OwnedTensor(DType::kFP32, {B, Hk, nbk}) : OwnedTensor(DType::kFP32, {B, Hk});
  OwnedTensor vs(DType::kFP32, {B, Hk});
  QuantizeFp8Args a;
  a.q = buf.q.view; a.k = buf.k.view; a.v = buf.v.view;
  a.q_out = q8.t.view; a.k_out = k8.t.view; a.v_out = v8.t.view;
  a.q_descale = qs.t.view; a.k_descale = ks.t.view; a.v_descale = vs.t.view;
  a.block = opt.block;
  a.hadamard = opt.hadamard;
  a.hadamard_seed = kSeed;
  a.subtract_mean_key = opt.mean;
  const Status st = quantize_fp8(a);
  ASSERT_TRUE(st.ok()) << st.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // The inputs as the host sees them, transformed as the kernel should have.
  std::vector<uint8_t> raw;
  ASSERT_TRUE(check::download(buf.q, &raw).ok());
  const std::vector<double> q_in = check::to_contiguous(buf.q.view, raw);
  ASSERT_TRUE(check::download(buf.k, &raw).ok());
  const std::vector<double> k_in = check::to_contiguous(buf.k.view, raw);
  ASSERT_TRUE(check::download(buf.v, &raw).ok());
  const std::vector<double> v_in = check::to_contiguous(buf.v.view, raw);
  std::vector<double> qx = q_in, kx = k_in;
  if (opt.mean)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hk; ++h)
        for (int d = 0; d < D; ++d) {
          double sum = 0;
          for (int s = 0; s < Sk; ++s) sum += k_in[((int64_t(b) * Sk + s) * Hk + h) * D + d];
          for (int s = 0; s < Sk; ++s) kx[((int64_t(b) * Sk + s) * Hk + h) * D + d] -= sum / Sk;
        }
  if (opt.hadamard) {
    for (size_t i = 0; i < qx.size(); i += D) hadamard_row(&qx[i], D, kSeed);
    for (size_t i = 0; i < kx.size(); i += D) hadamard_row(&kx[i], D, kSeed);
  }

  // Each tensor: the descale is amax / 448 of its group, every value within e4m3's rounding.
  struct Case {
    const char* name; const std::vector<double>& x; const OwnedTensor& out; const OwnedTensor& descale;
    int S, H; bool block; int group;
  };
  const Case cases[] = {{"q", qx, q8, qs, Sq, Hq, opt.block, Hq / Hk},
                        {"k", kx, k8, ks, Sk, Hk, opt.block, 1},
                        {"v", v_in, v8, vs, Sk, Hk, false, 1}};
  for (const Case& cs : cases) {
    const std::vector<double> codes = cs.out.values();
    const std::vector<float> descale = cs.descale.floats();
    const int nb = (cs.S + 127) / 128;
    auto group_of = [&](int b, int s, int h) {
      return cs.block ? (int64_t(b) * cs.H + h) * nb + s / 128 : int64_t(b) * (cs.H / cs.group) + h / cs.group;
    };
    std::vector<double> amax(descale.size(), 0.0);
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < cs.S; ++s)
        for (int h = 0; h < cs.H; ++h)
          for (int d = 0; d < D; ++d) {
            double& m = amax[group_of(b, s, h)];
            m = std::max(m, std::fabs(cs.x[((int64_t(b) * cs.S + s) * cs.H + h) * D + d]));
          }
    for (size_t g = 0; g < amax.size(); ++g)
      EXPECT_NEAR(descale[g], amax[g] / 448.0, 1e-5 * amax[g] / 448.0) << cs.name << " descale " << g;
    int64_t bad = 0;
    double worst = 0;
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < cs.S; ++s)
        for (int h = 0; h < cs.H; ++h)
          for (int d = 0; d < D; ++d) {
            const int64_t i = ((int64_t(b) * cs.S + s) * cs.H + h) * D + d;
            const double scale = descale[group_of(b, s, h)];
            const double err = std::fabs(codes[i] * scale - cs.x[i]);
            // Round to nearest: half an e4m3 step, 2^-4 of |x| (normals) or 2^-10 x scale (subnormals).
            const double bound = std::fabs(cs.x[i]) * 0x1p-4 + scale * 0x1p-10 + 1e-6 * scale * 448;
            if (err > bound) ++bad;
            worst = std::max(worst, err / bound);
          }
    EXPECT_EQ(bad, 0) << cs.name << ": values off by more than e4m3's rounding (worst " << worst << "x)";
  }

  // The FP8 forward of the outputs (k8 for block scales, k7 otherwise) is the attention of the
  // original inputs up to FP8 error; with the mean key subtracted only the LSE moves.
  OwnedTensor out(DType::kBF16, {B, Sq, Hq, D}), lse(DType::kFP32, {B, Hq, Sq});
  ForwardArgs f;
  f.q = q8.t.view; f.k = k8.t.view; f.v = v8.t.view;
  f.out = out.t.view;
  f.lse = lse.t.view;
  (opt.block ? f.q_block_descale : f.q_descale) = qs.t.view;
  (opt.block ? f.k_block_descale : f.k_descale) = ks.t.view;
  f.v_descale = vs.t.view;
  f.kernel = opt.block ? "k8" : "k7";
  const Status fst = forward(f);
  ASSERT_TRUE(fst.ok()) << fst.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> obytes;
  ASSERT_TRUE(check::download(out.t, &obytes).ok());
  const std::vector<double> o = check::to_contiguous(out.t.view, obytes);
  const std::vector<float> l = lse.floats();
  reference::Shape shape;
  shape.batch = B; shape.seqlen_q = Sq; shape.seqlen_k = Sk; shape.heads_q = Hq; shape.heads_kv = Hk;
  shape.head_dim = D;
  shape.scale = 1.0 / std::sqrt(static_cast<double>(D));
  double err2 = 0, ref2 = 0, lse_err = 0;
  std::vector<double> ref(D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < Sq; ++i) {
        double ref_lse;
        reference::forward_row(shape, q_in.data(), k_in.data(), v_in.data(), b, h, i, ref.data(), &ref_lse);
        for (int d = 0; d < D; ++d) {
          const double e = o[shape.q_index(b, i, h) + d] - ref[d];
          err2 += e * e;
          ref2 += ref[d] * ref[d];
        }
        if (!opt.mean) lse_err = std::max(lse_err, std::fabs(l[(int64_t(b) * Hq + h) * Sq + i] - ref_lse));
      }
  // N(0, 1) inputs: FP8's relative RMS error is a few percent; a wrong transform is ~100%.
  EXPECT_LT(std::sqrt(err2 / ref2), 0.06) << "relative RMS error of O";
  EXPECT_LT(lse_err, 0.05) << "LSE";
}

INSTANTIATE_TEST_SUITE_P(Options, QuantizeFp8,
                         ::testing::Values(Options{false, false, false}, Options{true, false, false},
                                           Options{false, true, false}, Options{true, true, false},
                                           Options{true, true, true}, Options{false, false, true}),
                         option_name);

// A failed call launches nothing: the e4m3 outputs and the descales keep their poison.
TEST(QuantizeFp8Errors, FailedCallsWriteNothing) {
  HFA_SKIP_WITHOUT_GPU();
  check::Config c;
  c.head_dim = compiled_head_dims()[0];
  c.seqlen_q = c.seqlen_k = 200;
  c.heads_q = 4;
  c.heads_kv = 2;
  check::DeviceBuffers buf;
  ASSERT_TRUE(buf.allocate(c).ok());
  ASSERT_TRUE(buf.fill_random(3).ok());
  const int D = c.head_dim;
  OwnedTensor q8(DType::kE4M3, {1, 200, 4, D}), k8(DType::kE4M3, {1, 200, 2, D}), v8(DType::kE4M3, {1, 200, 2, D});
  OwnedTensor qs(DType::kFP32, {1, 2}), ks(DType::kFP32, {1, 2}), vs(DType::kFP32, {1, 2});
  auto args = [&] {
    QuantizeFp8Args a;
    a.q = buf.q.view; a.k = buf.k.view; a.v = buf.v.view;
    a.q_out = q8.t.view; a.k_out = k8.t.view; a.v_out = v8.t.view;
    a.q_descale = qs.t.view; a.k_descale = ks.t.view; a.v_descale = vs.t.view;
    return a;
  };
  QuantizeFp8Args a = args();
  a.block = true;  // per-head descales given
  EXPECT_EQ(quantize_fp8(a).code, StatusCode::kInvalidArgument);
  a = args();
  a.v_out.dtype = DType::kBF16;
  EXPECT_EQ(quantize_fp8(a).code, StatusCode::kInvalidArgument);
  a = args();
  a.k.dtype = DType::kFP16;
  EXPECT_EQ(quantize_fp8(a).code, StatusCode::kInvalidArgument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const OwnedTensor* t : {&q8, &k8, &v8, &qs, &ks, &vs}) {
    const std::vector<unsigned char> bytes = download_bytes({&t->t});
    for (unsigned char b : bytes) ASSERT_EQ(b, 0xFF) << "a failed quantize_fp8 wrote an output";
  }
  // The same arguments, fixed, run (the test above is not vacuous).
  ASSERT_TRUE(quantize_fp8(args()).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_NE(download_bytes({&vs.t})[0], 0xFF);
}

}  // namespace
}  // namespace hfa::testing
