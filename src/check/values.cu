// The value distributions of the checks' random inputs (check.h: Values), drawn on the device.
//
// Every element's value depends only on (seed, its offset in the allocation), so a fill is
// reproducible from its seed. A fill is one or two passes:
//   1. over the whole allocation (padding included): the distribution's element-wise draw;
//   2. for the distributions with structure (outlier channels, the ramp along the keys), over the
//      view's elements, where the channel and the position are known: the same draw, reshaped.
// e4m3 tensors hold value x kFp8FillScale / peak (check.h: fp8_fill_peak), rounded and saturating,
// so each distribution uses e4m3's range as N(0, 1) x 64 does; their descales carry the peak back.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "check/check.h"
#include "common/hadamard.h"  // mix64
#include "common/status_util.h"

namespace hfa::check {
namespace {

// The parameters of a distribution for one tensor (what fp8_fill_peak documents).
constexpr float kWideSigma = 3.f;
constexpr int kOutlierPeriod = 16, kOutlierChannel = 5;
constexpr float kOutlierGain = 12.f;
constexpr float kRampQueryOffset = 4.f;
constexpr float kRampPerSqrtD = 10.f;  // K's channel 0 rises by 10 sqrt(d): scores by ~40

struct Draw {
  Values values;
  InputRole role;
  int head_dim;
  float encode_gain;  // e4m3: kFp8FillScale / peak; else 1

  __device__ bool query_or_key() const { return role == InputRole::kQuery || role == InputRole::kKey; }

  // The element-wise value at allocation offset `offset` (pass 1, and the base of pass 2).
  __device__ float base(uint64_t seed, int64_t offset) const {
    const uint64_t r = mix64(seed ^ mix64(static_cast<uint64_t>(offset)));
    const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);  // [0, 1)
    if ((values == Values::kUniform && role != InputRole::kOther) ||
        (values == Values::kPositiveV && role == InputRole::kValue))
      return u2;
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);  // Box-Muller: N(0, 1)
    return values == Values::kWide && query_or_key() ? kWideSigma * z : z;
  }

  // Pass 2: the value of the element at (position, channel) of the view, `length` positions long.
  __device__ float shaped(float x, int64_t position, int64_t length, int channel) const {
    if (values == Values::kOutliers && query_or_key() && channel % kOutlierPeriod == kOutlierChannel)
      return x * kOutlierGain;
    if (values == Values::kRamp && channel == 0) {
      if (role == InputRole::kQuery) return x + kRampQueryOffset;
      if (role == InputRole::kKey)
        return x + kRampPerSqrtD * sqrtf(static_cast<float>(head_dim)) * static_cast<float>(position) /
                       static_cast<float>(length > 1 ? length : 1);
    }
    return x;
  }
};

template <typename T>
__device__ __forceinline__ void store(T* p, float x, float gain) {
  if constexpr (std::is_same_v<T, __half>) *p = __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_fp8_storage_t>)
    *p = __nv_cvt_float_to_fp8(x * gain, __NV_SATFINITE, __NV_E4M3);
  else *p = __float2bfloat16_rn(x);
}

template <typename T>
__global__ void fill_elementwise_kernel(T* data, int64_t n, uint64_t seed, Draw draw) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(data + i, draw.base(seed, i), draw.encode_gain);
}

// Pass 2 over a rank-3 or rank-4 view: its last dimension is the channel, and the position along
// the sequence is dimension 1 of rank 4 ((batch, seqlen, heads, d)) or 0 of rank 3 ((tokens, ...)).
struct ViewShape {
  int rank;
  int64_t shape[4], stride[4];
};

template <typename T>
__global__ void fill_shaped_kernel(T* data, ViewShape v, uint64_t seed, Draw draw) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  const int pos_dim = v.rank == 4 ? 1 : 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, offset = 0, position = 0;
    int channel = 0;
    for (int d = v.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % v.shape[d];
      rest /= v.shape[d];
      offset += idx * v.stride[d];
      if (d == v.rank - 1) channel = static_cast<int>(idx);
      if (d == pos_dim) position = idx;
    }
    store(data + offset, draw.shaped(draw.base(seed, offset), position, v.shape[pos_dim], channel),
          draw.encode_gain);
  }
}

template <typename T>
Status launch_fill(const TensorView& view, int64_t alloc_elems, uint64_t seed, const Draw& draw) {
  T* data = static_cast<T*>(view.data);
  const int blocks = static_cast<int>(std::min<int64_t>((alloc_elems + 255) / 256, 4096));
  fill_elementwise_kernel<<<blocks, 256>>>(data, alloc_elems, seed, draw);
  HFA_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "launching the random fill"));
  if (draw.values != Values::kOutliers && draw.values != Values::kRamp) return Status::Ok();
  ViewShape v{view.rank, {}, {}};
  for (int d = 0; d < view.rank; ++d) v.shape[d] = view.shape[d], v.stride[d] = view.stride[d];
  fill_shaped_kernel<<<blocks, 256>>>(data, v, seed, draw);
  return cuda_status(cudaGetLastError(), "launching the shaped random fill");
}

}  // namespace

const char* to_string(Values values) {
  switch (values) {
    case Values::kNormal: return "normal";
    case Values::kWide: return "wide";
    case Values::kUniform: return "uniform";
    case Values::kOutliers: return "outliers";
    case Values::kPositiveV: return "positive-v";
    case Values::kRamp: return "ramp";
  }
  return "?";
}

std::optional<Values> parse_values(const std::string& name) {
  for (Values v : kAllValues)
    if (name == to_string(v)) return v;
  return std::nullopt;
}

float fp8_fill_peak(Values values, InputRole role, int head_dim) {
  const bool qk = role == InputRole::kQuery || role == InputRole::kKey;
  switch (values) {
    case Values::kNormal: return 1.f;
    case Values::kWide: return qk ? kWideSigma : 1.f;
    case Values::kUniform: return role == InputRole::kOther ? 1.f : 0.25f;  // U[0, 1) x 256
    case Values::kOutliers: return qk ? kOutlierGain : 1.f;
    case Values::kPositiveV: return role == InputRole::kValue ? 0.25f : 1.f;
    case Values::kRamp:
      if (role == InputRole::kQuery) return 2.f;  // channel 0 about 4 +- 3
      if (role == InputRole::kKey) return kRampPerSqrtD * std::sqrt(static_cast<float>(head_dim)) / 4.f;
      return 1.f;
  }
  return 1.f;
}

Status fill_values(const TensorView& view, int64_t alloc_elems, Values values, InputRole role,
                   uint64_t seed) {
  if (alloc_elems == 0) return Status::Ok();
  if (view.rank != 3 && view.rank != 4)
    return make_error(StatusCode::kInvalidArgument, "fill_values: a rank-3 or rank-4 view, got rank %d",
                      view.rank);
  const int head_dim = static_cast<int>(view.shape[view.rank - 1]);
  Draw draw{values, role, head_dim, 1.f};
  switch (view.dtype) {
    case DType::kFP16: return launch_fill<__half>(view, alloc_elems, seed, draw);
    case DType::kBF16: return launch_fill<__nv_bfloat16>(view, alloc_elems, seed, draw);
    case DType::kE4M3:
      draw.encode_gain = kFp8FillScale / fp8_fill_peak(values, role, head_dim);
      return launch_fill<__nv_fp8_storage_t>(view, alloc_elems, seed, draw);
    default:
      return make_error(StatusCode::kInvalidArgument, "fill_values: dtype %s; bf16, fp16 or e4m3",
                        hfa::to_string(view.dtype));
  }
}

}  // namespace hfa::check
