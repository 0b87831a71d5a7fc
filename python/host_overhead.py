"""Host time per call (CPU time to issue the work, not GPU time) of hfa.attention and of its peers on a
tiny problem: what an inference engine or a training step pays on the CPU for each attention call.

Usage (GPU machine, hfa installed): python python/host_overhead.py [--json FILE]

Rows: hfa.attention (no gradient; and with inputs that require one: the autograd node is recorded),
the op torch.ops.hfa.attention_fwd called directly (with its 6 required arguments, and with all 18),
and "bare": a minimal pybind11 binding compiled
here (torch.utils.cpp_extension.load_inline) that hands preallocated tensors straight to
hfa::forward, the library's own host cost plus one Python -> C++ call. Then torch SDPA's cuDNN and
FLASH backends and FlashAttention-3's flash_attn_func (when the fa3_fwd wheel is importable).
Each figure: the median over 11 rounds (the rows take turns, each round starting at the next row)
of the mean of 200 back-to-back calls (the GPU work of the tiny
problem is shorter than its host cost, so the host is what is timed).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

BARE_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <hfa/hfa.h>
static hfa::TensorView view(const at::Tensor& t) {
  hfa::TensorView v;
  v.data = t.data_ptr();
  v.dtype = hfa::DType::kBF16;
  v.rank = 4;
  for (int i = 0; i < 4; ++i) { v.shape[i] = t.size(i); v.stride[i] = t.stride(i); }
  return v;
}
void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
             at::Tensor& lse, bool causal) {
  hfa::ForwardArgs a;
  a.q = view(q); a.k = view(k); a.v = view(v); a.out = view(out);
  a.lse.data = lse.data_ptr(); a.lse.dtype = hfa::DType::kFP32; a.lse.rank = 3;
  for (int i = 0; i < 3; ++i) { a.lse.shape[i] = lse.size(i); a.lse.stride[i] = lse.stride(i); }
  a.causal = causal;
  const hfa::Status st = hfa::forward(a, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(st.ok(), st.message);
}
"""


def host_us(rows, n=200, rounds=11):
    """{name: median us per call}; the rows take turns in each round, so a slow spell of the
    machine hits all of them alike, and each round starts at the next row, so that no row is always
    the one that follows the synchronization."""
    for fn in rows.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    per_call = {name: [] for name in rows}
    names = list(rows)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = rows[name]
            t = time.perf_counter()
            for _ in range(n):
                fn()
            per_call[name].append((time.perf_counter() - t) / n * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in per_call.items()}


def bare_binding():
    """The minimal binding, or None (with the reason printed) where it cannot be compiled."""
    from torch.utils.cpp_extension import load_inline
    pkg = os.path.dirname(hfa.__file__)
    include = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include")
    try:
        return load_inline("hfa_bare_binding", cpp_sources=BARE_SOURCE, functions=["forward"],
                           extra_include_paths=[include], with_cuda=True,
                           extra_ldflags=[f"-L{pkg}", "-l:libhfa.so.0", f"-Wl,-rpath,{pkg}"])
    except Exception as e:  # noqa: BLE001  (reported, and the row left out)
        print(f"bare binding: not built ({type(e).__name__}: {str(e)[:300]})")
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    q = torch.randn(1, 128, 2, 128, device="cuda", dtype=torch.bfloat16)
    qg = q.clone().requires_grad_()
    qt = q.transpose(1, 2)
    op = torch.ops.hfa.attention_fwd.default
    rows = {
        "hfa.attention": lambda: hfa.attention(q, q, q),
        "hfa.attention (inputs require grad)": lambda: hfa.attention(qg, qg, qg),
        "torch.ops.hfa.attention_fwd (6 arguments)": lambda: op(q, q, q, False, None, "auto"),
        "torch.ops.hfa.attention_fwd (all 18 arguments)": lambda: op(
            q, q, q, False, None, "auto", None, None, None, None, None, None, False, "auto", -1, -1,
            0.0, None),
    }
    bare = bare_binding()
    if bare is not None:
        out = torch.empty_like(q)
        lse = torch.empty(1, 2, 128, device="cuda", dtype=torch.float32)
        rows["bare binding (preallocated out, hfa::forward)"] = lambda: bare.forward(q, q, q, out, lse, False)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, qt, qt)
        rows[f"torch SDPA ({name})"] = sdpa
    try:
        from fa3_fwd_interface import flash_attn_func as fa3
        rows["FlashAttention-3 flash_attn_func"] = lambda: fa3(q, q, q)
    except ImportError as e:
        print(f"FlashAttention-3: not importable ({e}); its row is left out")
    results = []
    for name, us in host_us(rows).items():
        results.append({"impl": name, "kind": "host_us", "host_us": round(us, 2)})
        print(f"host time per call, {name}: {us:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "shape": "q = k = v (1, 128, 2, 128) bf16", "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
