// Shared by the CPU validation tests (test_validation.cpp, test_validation_fp8.cpp): valid
// arguments over 16-byte aligned host buffers (validation never dereferences them), a hand-made
// Hopper DeviceInfo, and the error matcher.
#pragma once

#include <gtest/gtest.h>

#include "api/validate.h"
#include "hfa_build_config.h"

namespace hfa::validation_test {

inline constexpr int kCompiledHeadDims[] = {HFA_HEAD_DIMS_INIT};
inline constexpr int kB = 2, kSq = 33, kSk = 47, kHq = 8, kHkv = 2, kD = kCompiledHeadDims[0];

// Host buffers with 16-byte alignment: validation never dereferences them.
alignas(16) inline unsigned char g_q[16], g_k[16], g_v[16], g_o[16], g_lse[16];
alignas(16) inline unsigned char g_do[16], g_dq[16], g_dk[16], g_dv[16];

inline ForwardArgs valid_args(DType dtype = DType::kBF16) {
  ForwardArgs a;
  a.q = make_tensor(g_q, dtype, {kB, kSq, kHq, kD});
  a.k = make_tensor(g_k, dtype, {kB, kSk, kHkv, kD});
  a.v = make_tensor(g_v, dtype, {kB, kSk, kHkv, kD});
  a.out = make_tensor(g_o, dtype, {kB, kSq, kHq, kD});
  a.lse = make_tensor(g_lse, DType::kFP32, {kB, kHq, kSq});
  return a;
}

inline DeviceInfo hopper() {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.max_smem_per_block_optin = 227 * 1024;
  d.free_memory = int64_t{80} << 30;
  return d;
}

// Argument rules: normalize_forward.
inline Status normalize(const ForwardArgs& a) {
  FwdProblem p;
  return normalize_forward(a, &p);
}

// Argument rules, then the kernel's own rules on `device`.
inline Status plan(const ForwardArgs& a, const DeviceInfo& device = hopper()) {
  FwdProblem p;
  Status st = normalize_forward(a, &p);
  if (!st.ok()) return st;
  const KernelEntry* kernel = nullptr;
  return select_kernel_for(a.kernel, p, device, &kernel);
}

inline void expect_error(const Status& st, StatusCode code, std::initializer_list<const char*> words) {
  EXPECT_EQ(st.code, code) << st.message;
  for (const char* w : words) EXPECT_NE(st.message.find(w), std::string::npos) << "'" << w << "' not in: " << st.message;
}

}  // namespace hfa::validation_test
