// Calls hfa::forward on a small causal GQA problem and checks a few rows against a direct
// computation on the host. Without a GPU it only shows that it links and lists the kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <hfa/hfa.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const std::vector<hfa::KernelInfo> kernels = hfa::list_kernels();
  std::printf("hfa_consumer: linked against hfa with %zu kernels\n", kernels.size());
  if (kernels.empty()) return 1;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("hfa_consumer: no CUDA device; skipping the run\n");
    return 0;
  }

  const int b = 1, s = 96, hq = 4, hkv = 2, d = 64;
  const size_t q_elems = size_t{b} * s * hq * d, kv_elems = size_t{b} * s * hkv * d;
  std::vector<__nv_bfloat16> q(q_elems), k(kv_elems), v(kv_elems), o(q_elems);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = __float2bfloat16(normal(rng));

  void *dq, *dk, *dv, *dout;
  cudaMalloc(&dq, q_elems * 2);
  cudaMalloc(&dk, kv_elems * 2);
  cudaMalloc(&dv, kv_elems * 2);
  cudaMalloc(&dout, q_elems * 2);
  cudaMemcpy(dq, q.data(), q_elems * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), kv_elems * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), kv_elems * 2, cudaMemcpyHostToDevice);

  hfa::ForwardArgs args;
  args.q = hfa::make_tensor(dq, hfa::DType::kBF16, {b, s, hq, d});
  args.k = hfa::make_tensor(dk, hfa::DType::kBF16, {b, s, hkv, d});
  args.v = hfa::make_tensor(dv, hfa::DType::kBF16, {b, s, hkv, d});
  args.out = hfa::make_tensor(dout, hfa::DType::kBF16, {b, s, hq, d});
  args.causal = true;
  hfa::Status st = hfa::forward(args);
  if (!st.ok()) {
    std::printf("hfa_consumer: forward failed: %s\n", st.message.c_str());
    return 1;
  }
  cudaMemcpy(o.data(), dout, q_elems * 2, cudaMemcpyDeviceToHost);

  double max_err = 0;
  for (int h = 0; h < hq; ++h)
    for (int i : {0, 1, s / 2, s - 1}) {
      std::vector<double> p(i + 1);
      double m = -INFINITY, l = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += __bfloat162float(q[(i * hq + h) * d + c]) * __bfloat162float(k[(j * hkv + h / 2) * d + c]);
        p[j] = dot / std::sqrt(double(d));
        m = std::max(m, p[j]);
      }
      for (double& x : p) l += (x = std::exp(x - m));
      for (int c = 0; c < d; ++c) {
        double ref = 0;
        for (int j = 0; j <= i; ++j) ref += p[j] / l * __bfloat162float(v[(j * hkv + h / 2) * d + c]);
        max_err = std::max(max_err, std::fabs(ref - __bfloat162float(o[(i * hq + h) * d + c])));
      }
    }
  std::printf("hfa_consumer: max abs error %.3e\n", max_err);
  return max_err < 2e-2 ? 0 : 1;
}
