"""Host time per call (launch overhead, not GPU time) of hfa kernels and of torch SDPA's cuDNN
backend on a tiny problem: what an inference engine pays on the CPU for each attention call.
Usage (GPU machine, binding installed): python python/host_overhead.py"""
import time, torch, hfa
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.randn(1, 128, 2, 128, device="cuda", dtype=torch.bfloat16)
def host_us(fn, n=300):
    for _ in range(20): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    t1 = time.perf_counter(); torch.cuda.synchronize()
    return (t1 - t) / n * 1e6
qt = q.transpose(1, 2)
def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION): F.scaled_dot_product_attention(qt, qt, qt)
for k in ["k5", "k4", "k2"]:
    print(f"host time per call, hfa {k}: {host_us(lambda: hfa.attention(q, q, q, kernel=k)):.1f} us")
print(f"host time per call, cudnn (SDPA): {host_us(cudnn):.1f} us")
