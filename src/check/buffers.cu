// Device buffers for checks and benchmarks: layouts, random fill, poisoning, timing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "check/check.h"
#include "common/hadamard.h"  // mix64
#include "common/status_util.h"

namespace hfa::check {

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::kPacked: return "packed";
    case Layout::kPadded: return "padded";
    case Layout::kHeadsMajor: return "heads-major";
  }
  return "?";
}

std::string Config::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "kernel=%s dtype=%s%s%s%s b=%d sq=%d sk=%d hq=%d hkv=%d d=%d causal=%d layout=%s",
                kernel.c_str(), hfa::to_string(dtype), dtype == DType::kE4M3 ? " out=" : "",
                dtype == DType::kE4M3 ? hfa::to_string(fp8_out_dtype) : "",
                dtype == DType::kE4M3 && fp8_block_scales ? " block-scales" : "", batch, seqlen_q, seqlen_k, heads_q, heads_kv,
                head_dim, causal ? 1 : 0, to_string(layout));
  std::string out = buf;
  if (window_left != -1 || window_right != -1)
    out += " window=(" + std::to_string(window_left) + "," + std::to_string(window_right) + ")";
  if (softcap > 0.f) {
    std::snprintf(buf, sizeof(buf), " softcap=%g", static_cast<double>(softcap));
    out += buf;
  }
  if (sinks) out += " sinks";
  if (values != Values::kNormal) out += std::string(" values=") + to_string(values);
  if (varlen()) {
    const std::vector<int> cu_q = cu_seqlens(false), cu_k = cu_seqlens(true);
    std::snprintf(buf, sizeof(buf), " varlen: %zu sequences, %d queries, %d keys%s%s",
                  varlen_q.size(), cu_q.back(), cu_k.back(), seqused_k.empty() ? "" : ", seqused_k",
                  varlen_tail ? ", tail rows" : "");
    out += buf;
  }
  return out;
}

std::vector<int> Config::cu_seqlens(bool keys) const {
  const std::vector<int>& lens = keys ? varlen_k : varlen_q;
  std::vector<int> cu(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) cu[b + 1] = cu[b] + lens[b];
  return cu;
}

void use_kernel_inputs(Config* c, const std::string& kernel) {
  for (const KernelInfo& info : list_kernels())
    if (info.name == kernel && info.fp8) {
      c->dtype = DType::kE4M3;
      c->fp8_block_scales = info.fp8_block_scales;
    }
}

double forward_flops(const Config& c) {
  if (c.varlen()) {
    double sum = 0;
    for (size_t b = 0; b < c.varlen_q.size(); ++b) {
      Config one = c;
      one.varlen_q.clear();
      one.batch = 1;
      one.seqlen_q = c.varlen_q[b];
      one.seqlen_k = c.used_keys(static_cast<int>(b));
      sum += forward_flops(one);
    }
    return sum;
  }
  const double per_pair = 4.0 * c.batch * c.heads_q * c.head_dim;
  if (c.window_left == -1 && c.window_right == -1)
    return c.causal ? per_pair * c.seqlen_q * c.seqlen_k * 0.5 : per_pair * c.seqlen_q * c.seqlen_k;
  double pairs = 0;  // visible keys per query row: [i + off - left, i + off + right] within the keys
  const int64_t off = static_cast<int64_t>(c.seqlen_k) - c.seqlen_q;
  const int right = c.causal ? 0 : c.window_right;
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    const int64_t lo = c.window_left < 0 ? 0 : std::max<int64_t>(0, i + off - c.window_left);
    const int64_t hi = right < 0 ? c.seqlen_k : std::min<int64_t>(c.seqlen_k, i + off + right + 1);
    pairs += static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  return per_pair * pairs;
}

namespace {

// Strides (elements) of a (batch, seqlen, heads, head_dim) tensor in `layout`.
std::array<int64_t, kMaxRank> attention_strides(Layout layout, int64_t s, int64_t h, int64_t d,
                                               int elem_bytes) {
  switch (layout) {
    case Layout::kPacked: return {s * h * d, h * d, d, 1};
    case Layout::kPadded: {
      const int64_t x = elem_bytes == 1 ? 2 : 1;  // the pads stay 16-byte multiples for e4m3
      const int64_t head = d + 8 * x, row = h * head + 16 * x, batch = s * row + 64 * x;
      return {batch, row, head, 1};
    }
    case Layout::kHeadsMajor: return {h * s * d, d, s * d, 1};
  }
  return {0, 0, 0, 1};
}

int64_t span_elems(const TensorView& t) {  // elements from the first to one past the last
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return 0;
    last += (t.shape[i] - 1) * t.stride[i];
  }
  return last + 1;
}

Status alloc(DeviceBuffers::Tensor* t, TensorView view) {
  t->alloc_elems = span_elems(view);
  const size_t bytes = std::max<int64_t>(t->alloc_elems, 1) * size_of(view.dtype);
  HFA_RETURN_IF_ERROR(cuda_status(cudaMalloc(&t->data, bytes), "allocating a test tensor"));
  view.data = t->data;
  t->view = view;
  return Status::Ok();
}

}  // namespace

DeviceBuffers::~DeviceBuffers() {
  for (Tensor* t : {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &q_descale, &k_descale, &v_descale,
                    &q_block_descale, &k_block_descale, &sinks, &dsinks, &cu_seqlens_q,
                    &cu_seqlens_k, &seqused_k})
    if (t->data) cudaFree(t->data);
}

Status DeviceBuffers::allocate(const Config& config_) {
  config = config_;
  Config c = config_;  // a variable-length batch: its packed rows as one batch entry
  if (c.varlen()) {
    if (c.varlen_k.size() != c.varlen_q.size() ||
        (!c.seqused_k.empty() && c.seqused_k.size() != c.varlen_q.size()))
      return make_error(StatusCode::kInvalidArgument, "varlen_k, seqused_k: one entry per sequence");
    c.batch = 1;
    c.seqlen_q = c.cu_seqlens(false).back() + c.varlen_tail;
    c.seqlen_k = c.cu_seqlens(true).back() + c.varlen_tail;
    auto upload = [](Tensor* t, const std::vector<int>& values) {
      HFA_RETURN_IF_ERROR(alloc(t, make_tensor(nullptr, DType::kI32, {static_cast<int64_t>(values.size())})));
      return cuda_status(cudaMemcpy(t->data, values.data(), values.size() * sizeof(int),
                                    cudaMemcpyHostToDevice), "copying cu_seqlens");
    };
    HFA_RETURN_IF_ERROR(upload(&cu_seqlens_q, config.cu_seqlens(false)));
    HFA_RETURN_IF_ERROR(upload(&cu_seqlens_k, config.cu_seqlens(true)));
    if (!c.seqused_k.empty()) HFA_RETURN_IF_ERROR(upload(&seqused_k, c.seqused_k));
  }
  auto attention = [&](int64_t s, int64_t h) {
    TensorView t = make_tensor(nullptr, c.dtype, {c.batch, s, h, c.head_dim});
    t.stride = attention_strides(c.layout, s, h, c.head_dim, size_of(c.dtype));
    return t;
  };
  HFA_RETURN_IF_ERROR(alloc(&q, attention(c.seqlen_q, c.heads_q)));
  HFA_RETURN_IF_ERROR(alloc(&k, attention(c.seqlen_k, c.heads_kv)));
  HFA_RETURN_IF_ERROR(alloc(&v, attention(c.seqlen_k, c.heads_kv)));
  TensorView out = attention(c.seqlen_q, c.heads_q);
  out.dtype = c.out_dtype();
  HFA_RETURN_IF_ERROR(alloc(&o, out));
  if (c.dtype == DType::kE4M3) {
    const auto blocks = [](int64_t s) { return (s + kFp8ScaleBlock - 1) / kFp8ScaleBlock; };
    if (c.fp8_block_scales) {
      HFA_RETURN_IF_ERROR(alloc(&q_block_descale, make_tensor(nullptr, DType::kFP32,
                                                              {c.batch, c.heads_q, blocks(c.seqlen_q)})));
      HFA_RETURN_IF_ERROR(alloc(&k_block_descale, make_tensor(nullptr, DType::kFP32,
                                                              {c.batch, c.heads_kv, blocks(c.seqlen_k)})));
    } else {
      for (Tensor* t : {&q_descale, &k_descale})
        HFA_RETURN_IF_ERROR(alloc(t, make_tensor(nullptr, DType::kFP32, {c.batch, c.heads_kv})));
    }
    HFA_RETURN_IF_ERROR(alloc(&v_descale, make_tensor(nullptr, DType::kFP32, {c.batch, c.heads_kv})));
  }
  if (c.backward) {
    HFA_RETURN_IF_ERROR(alloc(&dout, attention(c.seqlen_q, c.heads_q)));
    HFA_RETURN_IF_ERROR(alloc(&dq, attention(c.seqlen_q, c.heads_q)));
    HFA_RETURN_IF_ERROR(alloc(&dk, attention(c.seqlen_k, c.heads_kv)));
    HFA_RETURN_IF_ERROR(alloc(&dv, attention(c.seqlen_k, c.heads_kv)));
  }
  if (c.sinks) {  // every other float when padded: a stride the kernels must honour
    const int64_t stride = c.layout == Layout::kPadded ? 2 : 1;
    HFA_RETURN_IF_ERROR(alloc(&sinks, make_tensor(nullptr, DType::kFP32, {c.heads_q}, {stride})));
    if (c.backward)
      HFA_RETURN_IF_ERROR(alloc(&dsinks, make_tensor(nullptr, DType::kFP32, {c.heads_q}, {stride})));
  }
  if (c.with_lse || c.backward) {
    TensorView l = make_tensor(nullptr, DType::kFP32, {c.batch, c.heads_q, c.seqlen_q});
    if (c.layout == Layout::kPadded) l.stride = {c.heads_q * (c.seqlen_q + 4LL) + 8, c.seqlen_q + 4LL, 1};
    HFA_RETURN_IF_ERROR(alloc(&lse, l));
  }
  return Status::Ok();
}

Status DeviceBuffers::fill_random(uint64_t seed) {
  uint64_t salt = 0;
  const InputRole roles[] = {InputRole::kQuery, InputRole::kKey, InputRole::kValue, InputRole::kOther};
  const Tensor* inputs[] = {&q, &k, &v, &dout};
  for (int i = 0; i < 4; ++i) {
    ++salt;
    const Values values = i < 3 ? config.values : Values::kNormal;
    HFA_RETURN_IF_ERROR(fill_values(inputs[i]->view, inputs[i]->alloc_elems, values, roles[i],
                                    seed * 0x100000001B3ull + salt));
  }
  // The descales of e4m3 inputs, with the peak the fill divided their values by.
  const std::pair<Tensor*, InputRole> descales[] = {
      {&q_descale, InputRole::kQuery}, {&k_descale, InputRole::kKey}, {&v_descale, InputRole::kValue},
      {&q_block_descale, InputRole::kQuery}, {&k_block_descale, InputRole::kKey}};
  for (auto [t, role] : descales) {
    ++salt;
    if (t->alloc_elems == 0) continue;
    const double peak = fp8_fill_peak(config.values, role, config.head_dim);
    std::vector<float> host(t->alloc_elems);
    for (int64_t i = 0; i < t->alloc_elems; ++i) {
      const double u = static_cast<double>(mix64(seed * 0x100000001B3ull + salt + mix64(i)) >> 11) * 0x1p-53;
      host[i] = static_cast<float>((0.75 + 0.5 * u) * peak / kFp8FillScale);
    }
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(t->data, host.data(), host.size() * sizeof(float),
                                               cudaMemcpyHostToDevice), "copying descales"));
  }
  if (sinks.data) {  // [-1, 4): around the largest scores of N(0, 1) inputs, so they matter
    ++salt;
    std::vector<float> host(sinks.alloc_elems);
    for (int64_t i = 0; i < sinks.alloc_elems; ++i)
      host[i] = static_cast<float>(-1.0 + 5.0 * static_cast<double>(mix64(seed * 0x100000001B3ull + salt + mix64(i)) >> 11) * 0x1p-53);
    HFA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(sinks.data, host.data(), host.size() * sizeof(float),
                                               cudaMemcpyHostToDevice), "copying sinks"));
  }
  return cuda_status(cudaDeviceSynchronize(), "random fill");
}

Status DeviceBuffers::poison_outputs() {
  for (Tensor* t : {&o, &lse, &dq, &dk, &dv, &dsinks})
    if (t->data)
      HFA_RETURN_IF_ERROR(cuda_status(
          cudaMemset(t->data, 0xFF, std::max<int64_t>(t->alloc_elems, 1) * size_of(t->view.dtype)),
          "poisoning outputs"));
  return cuda_status(cudaDeviceSynchronize(), "poisoning outputs");
}

namespace {
// A (1, total, heads, head_dim) buffer as the packed (total, heads, head_dim) view a variable-length
// batch takes; a (1, heads, total) LSE as (heads, total).
TensorView drop_batch(TensorView t) {
  for (int i = 0; i + 1 < t.rank; ++i) t.shape[i] = t.shape[i + 1], t.stride[i] = t.stride[i + 1];
  --t.rank;
  return t;
}
}  // namespace

ForwardArgs DeviceBuffers::forward_args() const {
  ForwardArgs a;
  const bool varlen = config.varlen();
  auto view = [&](const Tensor& t) { return varlen ? drop_batch(t.view) : t.view; };
  a.q = view(q);
  a.k = view(k);
  a.v = view(v);
  a.out = view(o);
  if (lse.data) a.lse = view(lse);
  if (varlen) {
    a.cu_seqlens_q = cu_seqlens_q.view;
    a.cu_seqlens_k = cu_seqlens_k.view;
    if (seqused_k.data) a.seqused_k = seqused_k.view;
    a.max_seqlen_q = *std::max_element(config.varlen_q.begin(), config.varlen_q.end());
    a.max_seqlen_k = *std::max_element(config.varlen_k.begin(), config.varlen_k.end());
  }
  if (q_descale.data) {
    a.q_descale = q_descale.view;
    a.k_descale = k_descale.view;
  }
  if (q_block_descale.data) {
    a.q_block_descale = q_block_descale.view;
    a.k_block_descale = k_block_descale.view;
  }
  if (v_descale.data) a.v_descale = v_descale.view;
  a.causal = config.causal;
  a.window_left = config.window_left;
  a.window_right = config.window_right;
  a.softcap = config.softcap;
  if (sinks.data) a.sinks = sinks.view;
  a.softmax_scale = config.softmax_scale;
  a.kernel = config.kernel;
  return a;
}

BackwardArgs DeviceBuffers::backward_args() const {
  const ForwardArgs f = forward_args();
  BackwardArgs a;
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.out = f.out;
  a.lse = f.lse;
  a.causal = f.causal;
  a.window_left = f.window_left;
  a.window_right = f.window_right;
  a.softcap = f.softcap;
  a.sinks = f.sinks;
  if (dsinks.data) a.dsinks = dsinks.view;
  a.softmax_scale = f.softmax_scale;
  a.kernel = f.kernel;
  a.deterministic = config.deterministic;
  a.cu_seqlens_q = f.cu_seqlens_q;
  a.cu_seqlens_k = f.cu_seqlens_k;
  a.seqused_k = f.seqused_k;
  a.max_seqlen_q = f.max_seqlen_q;
  a.max_seqlen_k = f.max_seqlen_k;
  auto view = [&](const Tensor& t) { return config.varlen() ? drop_batch(t.view) : t.view; };
  a.dout = view(dout);
  a.dq = view(dq);
  a.dk = view(dk);
  a.dv = view(dv);
  return a;
}

Status run_check(const Config& c, uint64_t seed, int64_t max_rows, CheckResult* result) {
  DeviceBuffers buffers;
  Status st = buffers.allocate(c);
  if (!st.ok()) {
    result->pass = false;
    result->message = st.message;
    return st;
  }
  return run_check(buffers, seed, max_rows, result);
}

// Busy-waits ~`cycles` GPU clocks: queued before a start event, it keeps the GPU busy while the
// host prepares the timed launch, so the events bracket device time only.
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Median of `iters` timed calls of `launch` after `warmup` calls (see time_forward in check.h).
Status time_launches(const std::function<Status()>& launch, int warmup, int iters, double* median_ms) {
  int device = 0, l2_bytes = 0;
  HFA_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
  HFA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device),
                                  "reading the L2 size"));
  const size_t flush_bytes = 2 * static_cast<size_t>(l2_bytes);
  void* flush = nullptr;
  HFA_RETURN_IF_ERROR(cuda_status(cudaMalloc(&flush, flush_bytes), "allocating the L2 flush buffer"));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  Status st;
  for (int it = 0; it < warmup + iters && st.ok(); ++it) {
    cudaMemsetAsync(flush, it & 0xFF, flush_bytes);  // evict Q/K/V from L2: time cold inputs
    spin_kernel<<<1, 1>>>(2000000);                   // ~1 ms: hides the host launch overhead
    cudaEventRecord(start);
    st = launch();
    cudaEventRecord(stop);
    if (st.ok()) st = cuda_status(cudaEventSynchronize(stop), "timed launch");
    float ms = 0;
    if (st.ok() && it >= warmup) {
      cudaEventElapsedTime(&ms, start, stop);
      times.push_back(ms);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(flush);
  HFA_RETURN_IF_ERROR(st);
  if (times.empty()) return make_error(StatusCode::kInvalidArgument, "iters: must be at least 1");
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  *median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  return Status::Ok();
}

Status time_forward(DeviceBuffers& buffers, int warmup, int iters, double* median_ms) {
  const ForwardArgs args = buffers.forward_args();
  return time_launches([&] { return forward(args); }, warmup, iters, median_ms);
}

Status time_backward(DeviceBuffers& buffers, int warmup, int iters, double* median_ms) {
  const BackwardArgs args = buffers.backward_args();
  return time_launches([&] { return backward(args); }, warmup, iters, median_ms);
}

}  // namespace hfa::check
