#!/usr/bin/env python3
"""The FP8 accuracy study of issue 19 (FlashAttention-3 paper, section 4.3): Q, K, V entries
N(0, 1) + N(0, 100) * Bernoulli(0.001), batch 2, seqlen 4096, 16 heads, d = 128; RMSE of O against
the fp64 attention of the same (fp32) inputs. Rows: hfa's bf16 forward, k7 and k8 with every
quantize_fp8 option, and FlashAttention-3's FP8 forward (the fa3_fwd wheel) on hfa's per-(batch,
head) quantization with and without the Hadamard transform, all in this run. Writes rows
{"impl", "kind": "rmse", "rmse", "variant"} (DESIGN.md schema) to --json.

  python fp8_accuracy.py --json fp8-accuracy.json
"""
import argparse

import torch

import hfa
from bench_peers import write_run_json  # the run document, as every benchmark writes it


def inputs(seed, b=2, s=4096, h=16, d=128):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def one():
        x = torch.randn(b, s, h, d, device="cuda", generator=g)
        outlier = torch.rand(b, s, h, d, device="cuda", generator=g) < 0.001
        return x + torch.randn(b, s, h, d, device="cuda", generator=g) * 10 * outlier
    return one(), one(), one()


def reference(q, k, v):
    """fp64 attention, one (batch, head) at a time (the fp64 score matrix of all 32 is 4 GB)."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    scale = q.shape[-1] ** -0.5
    for b in range(q.shape[0]):
        for h in range(q.shape[2]):
            s = (q[b, :, h].double() @ k[b, :, h].double().T) * scale
            out[b, :, h] = torch.softmax(s, dim=-1) @ v[b, :, h].double()
    return out


def rmse(o, ref):
    return ((o.double() - ref) ** 2).mean().sqrt().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    q, k, v = inputs(args.seed)
    ref = reference(q, k, v)
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    rows = []

    def add(impl, variant, o):
        r = dict(impl=impl, kind="rmse", variant=variant, rmse=rmse(o, ref), dtype="e4m3" if impl != "hfa_bf16" else "bf16",
                 d=128, seqlen_q=4096, seqlen_k=4096, batch=2, heads_q=16, heads_kv=16, causal=0)
        rows.append(r)
        print(f"{impl:>10} {variant:<34} rmse {r['rmse']:.3e}", flush=True)

    add("hfa_bf16", "bf16 inputs (k6)", hfa.attention(qb, kb, vb))
    options = [("per-tensor", dict(block=False, hadamard=False)),
               ("per-tensor + hadamard", dict(block=False, hadamard=True)),
               ("per-tensor + hadamard + mean key", dict(block=False, hadamard=True, subtract_mean_key=True)),
               ("block", dict(block=True, hadamard=False)),
               ("block + hadamard", dict(block=True, hadamard=True)),
               ("block + hadamard + mean key", dict(block=True, hadamard=True, subtract_mean_key=True))]
    quantized = {}
    for name, opts in options:
        x = hfa.quantize_fp8(qb, kb, vb, hadamard_seed=1, **opts)
        quantized[name] = x
        add("k8" if opts["block"] else "k7", name, hfa.attention(x.q, x.k, x.v, **x.descales))
    try:
        from fa3_fwd_interface import flash_attn_func
        for name in ("per-tensor", "per-tensor + hadamard"):
            x = quantized[name]
            d = x.descales
            o = flash_attn_func(x.q, x.k, x.v, q_descale=d["q_descale"], k_descale=d["k_descale"],
                                v_descale=d["v_descale"])
            add("fa3_fp8", name, o[0] if isinstance(o, tuple) else o)
    except Exception as e:  # a peer that cannot run is reported as such
        rows.append(dict(impl="fa3_fp8", kind="rmse", variant="per-tensor", rmse=None, error=str(e)[:200]))
        print("fa3_fp8 could not run:", e, flush=True)
    write_run_json(args.json, rows)


if __name__ == "__main__":
    main()
