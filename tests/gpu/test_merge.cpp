// merge_attention (the exact merge of partial results that flash decode and hfa.distributed use)
// vs an fp64 merge on the host: random parts, some of which saw no key (LSE = -inf, their O NaN:
// never read), rows where no part saw a key, 1 to 256 parts, every head dim and dtype pair, a
// padded layout, the output written in place over one of the parts; outputs poisoned first.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_test_util.h"

namespace hfa {
namespace {

double round_to(DType dt, double x) {
  if (dt == DType::kBF16) return __bfloat162float(__float2bfloat16(static_cast<float>(x)));
  if (dt == DType::kFP16) return __half2float(__float2half(static_cast<float>(x)));
  return static_cast<float>(x);
}
void store(DType dt, void* base, int64_t i, double x) {
  if (dt == DType::kBF16) static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(static_cast<float>(x));
  else if (dt == DType::kFP16) static_cast<__half*>(base)[i] = __float2half(static_cast<float>(x));
  else static_cast<float*>(base)[i] = static_cast<float>(x);
}
double load(DType dt, const void* base, int64_t i) {
  if (dt == DType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  if (dt == DType::kFP16) return __half2float(static_cast<const __half*>(base)[i]);
  return static_cast<const float*>(base)[i];
}
double unit_roundoff(DType dt) {
  return dt == DType::kBF16 ? 1.0 / 256 : dt == DType::kFP16 ? 1.0 / 2048 : 1.0 / (1 << 23);
}

struct MergeCase {
  int parts, batch, seqlen, heads, head_dim;
  DType part_dtype, out_dtype;
  int head_pad = 0;       // extra elements between heads of o_parts (a strided layout)
  bool in_place = false;  // out is o_parts[parts - 1] (then out_dtype == part_dtype)
};

void run_case(const MergeCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "parts " << c.parts << " b " << c.batch << " s " << c.seqlen
                                    << " h " << c.heads << " d " << c.head_dim << " "
                                    << to_string(c.part_dtype) << " -> " << to_string(c.out_dtype)
                                    << (c.in_place ? " in place" : ""));
  const int P = c.parts, B = c.batch, S = c.seqlen, H = c.heads, D = c.head_dim;
  const int64_t head_stride = D + c.head_pad, row_stride = H * head_stride;
  const int64_t batch_stride = S * row_stride, part_stride = B * batch_stride;
  const int64_t part_elems = P * part_stride, lse_elems = int64_t{P} * B * H * S;
  const size_t pbytes = size_of(c.part_dtype), obytes = size_of(c.out_dtype);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<unsigned char> o_host(part_elems * pbytes);
  std::vector<float> lse_host(lse_elems);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // A part sees no key with probability 1/4; every part of a row's first head in batch 0 none.
  for (int s = 0; s < P; ++s)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < S; ++t) {
          const bool empty = uniform(rng) < 0.25 || (b == 0 && h == 0 && t % 3 == 0);
          lse_host[((int64_t{s} * B + b) * H + h) * S + t] =
              empty ? -std::numeric_limits<float>::infinity() : static_cast<float>(8 * normal(rng));
          for (int x = 0; x < D; ++x)
            store(c.part_dtype, o_host.data(), s * part_stride + b * batch_stride + t * row_stride + h * head_stride + x,
                  empty ? nan : normal(rng));
        }
  void *o_dev = nullptr, *lse_dev = nullptr, *out_dev = nullptr, *lse_out_dev = nullptr;
  const int64_t out_elems = int64_t{B} * S * H * D;
  ASSERT_EQ(cudaMalloc(&o_dev, o_host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lse_dev, lse_elems * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out_dev, out_elems * obytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lse_out_dev, int64_t{B} * H * S * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(o_dev, o_host.data(), o_host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lse_dev, lse_host.data(), lse_elems * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(out_dev, 0xFF, out_elems * obytes), cudaSuccess);  // poison: NaN
  ASSERT_EQ(cudaMemset(lse_out_dev, 0xFF, int64_t{B} * H * S * 4), cudaSuccess);

  MergeArgs a;
  a.o_parts = make_tensor(o_dev, c.part_dtype, {P, B, S, H, D},
                          {part_stride, batch_stride, row_stride, head_stride, 1});
  a.lse_parts = make_tensor(lse_dev, DType::kFP32, {P, B, H, S});
  a.lse = make_tensor(lse_out_dev, DType::kFP32, {B, H, S});
  void* out_ptr = out_dev;
  if (c.in_place) {
    out_ptr = static_cast<unsigned char*>(o_dev) + (P - 1) * part_stride * pbytes;
    a.out = make_tensor(out_ptr, c.part_dtype, {B, S, H, D}, {batch_stride, row_stride, head_stride, 1});
  } else {
    a.out = make_tensor(out_dev, c.out_dtype, {B, S, H, D});
  }
  const Status st = merge_attention(a);
  ASSERT_TRUE(st.ok()) << st.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> out_host(c.in_place ? o_host.size() : out_elems * obytes);
  std::vector<float> lse_out(int64_t{B} * H * S);
  ASSERT_EQ(cudaMemcpy(out_host.data(), c.in_place ? o_dev : out_dev, out_host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lse_out.data(), lse_out_dev, lse_out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  int failures = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < S; ++t) {
        double mx = -INFINITY;
        for (int s = 0; s < P; ++s) mx = std::max(mx, double(lse_host[((int64_t{s} * B + b) * H + h) * S + t]));
        double sum = 0;
        for (int s = 0; s < P; ++s)
          if (mx != -INFINITY) sum += std::exp(lse_host[((int64_t{s} * B + b) * H + h) * S + t] - mx);
        const double lse = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
        const float got_lse = lse_out[(int64_t{b} * H + h) * S + t];
        if (mx == -INFINITY ? got_lse != -INFINITY : !(std::fabs(got_lse - lse) <= 1e-5 * (1 + std::fabs(lse))))
          if (failures++ < 5) ADD_FAILURE() << "lse (b " << b << ", h " << h << ", t " << t << "): " << got_lse << " vs " << lse;
        for (int x = 0; x < D; ++x) {
          double ref = 0, mag = 0;
          for (int s = 0; s < P; ++s) {
            const double l = lse_host[((int64_t{s} * B + b) * H + h) * S + t];
            if (l == -INFINITY) continue;
            const double v = load(c.part_dtype, o_host.data(), s * part_stride + b * batch_stride + t * row_stride + h * head_stride + x);
            ref += std::exp(l - lse) * v;
            mag = std::max(mag, std::fabs(v));
          }
          const int64_t oi = c.in_place ? (P - 1) * part_stride + b * batch_stride + t * row_stride + h * head_stride + x
                                        : ((int64_t{b} * S + t) * H + h) * D + x;
          const double got = load(c.in_place ? c.part_dtype : c.out_dtype, out_host.data(), oi);
          // the output's rounding, plus fp32 weights (ex2.approx: a few ulp) times the parts' size
          const double tol = unit_roundoff(c.out_dtype) * std::fabs(ref) + 1e-5 * mag + 1e-7;
          if (!(std::fabs(got - ref) <= tol) && failures++ < 5)
            ADD_FAILURE() << "out (b " << b << ", t " << t << ", h " << h << ", col " << x << "): " << got
                          << " vs " << ref << " (tol " << tol << ")";
        }
      }
  EXPECT_EQ(failures, 0);
  cudaFree(o_dev), cudaFree(lse_dev), cudaFree(out_dev), cudaFree(lse_out_dev);
}

TEST(MergeAttention, MatchesFp64Merge) {
  HFA_SKIP_WITHOUT_GPU();
  const DType dts[] = {DType::kFP32, DType::kBF16, DType::kFP16};
  uint64_t seed = 1;
  for (int d : {64, 128, 256})
    for (DType pd : dts)
      for (DType od : dts) run_case({3, 2, 5, 3, d, pd, od}, seed++);
  run_case({1, 1, 7, 2, 128, DType::kBF16, DType::kBF16}, seed++);
  run_case({256, 1, 2, 2, 64, DType::kFP32, DType::kBF16}, seed++);      // the most parts
  run_case({37, 2, 3, 4, 128, DType::kFP32, DType::kFP16}, seed++);      // not a multiple of the unroll
  run_case({4, 2, 9, 3, 128, DType::kBF16, DType::kBF16, 8}, seed++);    // padded heads
  run_case({2, 2, 9, 3, 128, DType::kBF16, DType::kBF16, 4, true}, seed++);   // in place (the ring)
  run_case({5, 1, 17, 2, 256, DType::kFP32, DType::kFP32, 0, true}, seed++);
}

TEST(MergeAttention, EmptyRowsLaunchNothingAndErrorsTouchNothing) {
  HFA_SKIP_WITHOUT_GPU();
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4096 * 4), cudaSuccess);
  MergeArgs a;
  a.o_parts = make_tensor(buf, DType::kFP32, {2, 1, 0, 2, 64});
  a.lse_parts = make_tensor(buf + 2048, DType::kFP32, {2, 1, 2, 0});
  a.out = make_tensor(buf + 1024, DType::kFP32, {1, 0, 2, 64});
  EXPECT_TRUE(merge_attention(a).ok());
  a.o_parts = make_tensor(buf, DType::kFP32, {2, 1, 3, 2, 64});
  a.lse_parts = make_tensor(buf + 2048, DType::kFP32, {2, 1, 2, 4});  // seqlen 4 vs 3
  a.out = make_tensor(buf + 1024, DType::kFP32, {1, 3, 2, 64});
  ASSERT_EQ(cudaMemset(buf + 1024, 0x7F, 4 * 384), cudaSuccess);
  const Status st = merge_attention(a);
  EXPECT_EQ(st.code, StatusCode::kInvalidArgument);
  EXPECT_NE(st.message.find("lse_parts"), std::string::npos) << st.message;
  std::vector<unsigned> back(384);
  ASSERT_EQ(cudaMemcpy(back.data(), buf + 1024, 384 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (unsigned x : back) ASSERT_EQ(x, 0x7F7F7F7Fu) << "an error wrote the output";
  cudaFree(buf);
}

}  // namespace
}  // namespace hfa
