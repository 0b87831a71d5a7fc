// On a GPU: a call that fails launches nothing and leaves every output byte as it was.
#include <gtest/gtest.h>

#include <cstring>

#include "check/check.h"
#include "gpu_test_util.h"

namespace hfa::testing {
namespace {

bool all_poisoned(const std::vector<unsigned char>& bytes) {
  for (unsigned char b : bytes)
    if (b != 0xFF) return false;
  return true;
}

class ErrorsTouchNothing : public ::testing::Test {
 protected:
  void SetUp() override {
    HFA_SKIP_WITHOUT_GPU();
    c.head_dim = compiled_head_dims()[0];
    c.seqlen_q = c.seqlen_k = 200;
    c.heads_q = 4;
    c.heads_kv = 2;
    ASSERT_TRUE(buf.allocate(c).ok());
    ASSERT_TRUE(buf.fill_random(21).ok());
    ASSERT_TRUE(buf.poison_outputs().ok());
  }
  void expect_untouched(const Status& st, StatusCode code) {
    EXPECT_EQ(st.code, code) << st.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(all_poisoned(download_bytes({&buf.o}))) << "out was written by a failed call";
    EXPECT_TRUE(all_poisoned(download_bytes({&buf.lse}))) << "lse was written by a failed call";
  }
  check::Config c;
  check::DeviceBuffers buf;
};

TEST_F(ErrorsTouchNothing, InvalidArgument) {
  ForwardArgs a = buf.forward_args();
  a.k.dtype = DType::kFP16;
  expect_untouched(forward(a), StatusCode::kInvalidArgument);
}

TEST_F(ErrorsTouchNothing, UnsupportedHeadDim) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "k2";
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out}) t->shape[3] = 40;  // fewer columns, same memory
  expect_untouched(forward(a), StatusCode::kUnsupported);
}

TEST_F(ErrorsTouchNothing, MisalignedPointer) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "k2";
  a.q.data = static_cast<char*>(a.q.data) + 2;
  expect_untouched(forward(a), StatusCode::kUnsupported);
}

// e4m3 inputs: a bf16/fp16 kernel refuses them by name, and missing descales or an e4m3 output
// are invalid; nothing is written either way.
class Fp8ErrorsTouchNothing : public ErrorsTouchNothing {
 protected:
  void SetUp() override {
    c.dtype = DType::kE4M3;
    ErrorsTouchNothing::SetUp();
  }
};

TEST_F(Fp8ErrorsTouchNothing, Bf16KernelRefusesE4m3) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "k6";
  const Status st = forward(a);
  EXPECT_NE(st.message.find("k6"), std::string::npos) << st.message;
  expect_untouched(st, StatusCode::kUnsupported);
}

TEST_F(Fp8ErrorsTouchNothing, MissingDescale) {
  ForwardArgs a = buf.forward_args();
  a.v_descale = TensorView{};
  expect_untouched(forward(a), StatusCode::kInvalidArgument);
}

TEST_F(Fp8ErrorsTouchNothing, K8RefusesPerHeadDescales) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "k8";
  const Status st = forward(a);
  EXPECT_NE(st.message.find("k8"), std::string::npos) << st.message;
  expect_untouched(st, StatusCode::kUnsupported);
}

TEST_F(Fp8ErrorsTouchNothing, E4m3Output) {
  ForwardArgs a = buf.forward_args();
  a.out.dtype = DType::kE4M3;
  expect_untouched(forward(a), StatusCode::kInvalidArgument);
}

TEST_F(ErrorsTouchNothing, UnknownKernel) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "fastest";
  expect_untouched(forward(a), StatusCode::kInvalidArgument);
}

// K1 materializes S: a problem whose S cannot fit is a clear error before any launch. The shapes
// are claimed, not allocated: the error must come before anything reads them.
TEST_F(ErrorsTouchNothing, K1OutOfMemoryForHugeS) {
  ForwardArgs a = buf.forward_args();
  a.kernel = "k1";
  const int64_t s = 1 << 19, h = 64;  // S would be 64 * 2^38 * 4 bytes = 64 TiB
  a.q = make_tensor(a.q.data, c.dtype, {1, s, h, c.head_dim});
  a.out = make_tensor(a.out.data, c.dtype, {1, s, h, c.head_dim});
  a.k = make_tensor(a.k.data, c.dtype, {1, s, h, c.head_dim});
  a.v = make_tensor(a.v.data, c.dtype, {1, s, h, c.head_dim});
  a.lse = TensorView{};
  const Status st = forward(a);
  EXPECT_NE(st.message.find("materializes S"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("GiB"), std::string::npos) << st.message;
  expect_untouched(st, StatusCode::kOutOfMemory);
}

// The backward: a rejected call leaves dq, dk, dv as they were.
class BackwardErrorsTouchNothing : public ErrorsTouchNothing {
 protected:
  void SetUp() override {
    HFA_SKIP_WITHOUT_GPU();
    c.backward = true;
    ErrorsTouchNothing::SetUp();
  }
  void expect_gradients_untouched(const Status& st, StatusCode code) {
    EXPECT_EQ(st.code, code) << st.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const auto* t : {&buf.dq, &buf.dk, &buf.dv})
      EXPECT_TRUE(all_poisoned(download_bytes({t}))) << "a gradient was written by a failed call";
  }
};

TEST_F(BackwardErrorsTouchNothing, InvalidArgument) {
  BackwardArgs a = buf.backward_args();
  a.dq.dtype = DType::kFP16;
  expect_gradients_untouched(backward(a), StatusCode::kInvalidArgument);
  a = buf.backward_args();
  a.lse = TensorView{};
  expect_gradients_untouched(backward(a), StatusCode::kInvalidArgument);
}

TEST_F(BackwardErrorsTouchNothing, Unsupported) {
  BackwardArgs a = buf.backward_args();
  a.dout.data = static_cast<char*>(a.dout.data) + 2;
  expect_gradients_untouched(backward(a), StatusCode::kUnsupported);
  a = buf.backward_args();
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv}) t->shape[3] = 40;
  expect_gradients_untouched(backward(a), StatusCode::kUnsupported);
}

TEST_F(BackwardErrorsTouchNothing, UnknownKernel) {
  BackwardArgs a = buf.backward_args();
  a.kernel = "k6";  // forward only
  expect_gradients_untouched(backward(a), StatusCode::kInvalidArgument);
}

TEST(EmptyProblems, BatchZeroOnGpuSucceeds) {
  HFA_SKIP_WITHOUT_GPU();
  for (const std::string& k : kernel_names()) {
    ForwardArgs a;
    a.kernel = k;
    a.q = make_tensor(nullptr, DType::kBF16, {0, 10, 2, compiled_head_dims()[0]});
    a.k = a.v = a.out = a.q;
    Status st = forward(a);
    EXPECT_TRUE(st.ok()) << k << ": " << st.message;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace hfa::testing
