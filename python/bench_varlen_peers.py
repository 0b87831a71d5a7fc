#!/usr/bin/env python3
"""Variable-length batches (issue 22): hfa next to FlashAttention-3's flash_attn_varlen_func, in one
process on one GPU, with the dense batch at the mean length as the yardstick.

For each (head dim, causal) and each of --batches packed batches (--total tokens in sequences of
random lengths --min..--max, keys = queries, seeded), times interleaved:
  - hfa.attention_varlen ("k6": the Hopper forward's varlen path; JSON kind "fwd_varlen")
  - FlashAttention-3's flash_attn_varlen_func ("fa3", the fa3_fwd wheel; kind "fwd_varlen")
  - hfa.attention on the dense batch at the packed batch's mean length, the same token count
    (kind "fwd", seqlen_q = the mean length rounded): the target is varlen TFLOPS >= 0.95x it
TFLOPS count each sequence's own (causal: halved) score matrix. Timing as bench_peers.py (cold
L2, median). Heads: 2048 / d.

With --bwd, the backward instead (kind "bwd_varlen", 2.5x the forward's FLOPs; each timed call is
torch.autograd.grad of a retained graph, so the autograd engine's cost is in every row):
  - hfa.attention_varlen's backward ("bwd_sm90": head dims 64 and 128)
  - torch's FLASH backend (FlashAttention-2's varlen kernels) on nested jagged tensors through SDPA
    ("sdpa_flash")
  - FlashAttention-3: the fa3_fwd wheel has no backward: its rows say so
  - hfa.attention's backward on the dense batch at the mean length (kind "bwd")

  python bench_varlen_peers.py --json out.json
  python bench_varlen_peers.py --bwd --headdims 64,128 --json out_bwd.json
"""
import argparse
import random
import sys

import torch

import hfa
from bench_peers import add_timer_args, fa3_available, timer_from, write_run_json


def flops(lens, heads, d, causal):
    return sum(4.0 * heads * d * s * s * (0.5 if causal else 1.0) for s in lens)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total", type=int, default=16384)
    ap.add_argument("--min", type=int, default=100)
    ap.add_argument("--max", type=int, default=4000)
    ap.add_argument("--batches", type=int, default=3, help="random batches per (d, causal)")
    ap.add_argument("--headdims", default="64,128,256")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json")
    ap.add_argument("--bwd", action="store_true", help="time the backward (see above)")
    add_timer_args(ap, max_seconds=10.0)
    args = ap.parse_args()
    timer = timer_from(args)
    rng = random.Random(args.seed)
    fa3 = None
    if fa3_available():
        from fa3_fwd_interface import flash_attn_varlen_func as fa3
    else:
        print("bench_varlen_peers: fa3 not importable (the fa3_fwd wheel): its rows say so", file=sys.stderr)
    if args.bwd:
        return backward_main(args, timer, rng)
    rows = []
    print(f"{'d':>4} {'causal':>6} {'seqs':>4} {'mean':>5}  {'hfa':>7} {'fa3':>7} {'dense':>7}  hfa/fa3 hfa/dense")
    for d in (int(x) for x in args.headdims.split(",")):
        heads = 2048 // d
        for causal in (False, True):
            for _ in range(args.batches):
                lens = random_lengths(rng, args)
                cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
                q, k, v = (torch.randn(args.total, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                mean = round(args.total / len(lens))
                dense_batch = max(1, args.total // mean)
                dq, dk, dv = (torch.randn(dense_batch, mean, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                f = flops(lens, heads, d, causal)
                base = dict(dtype="bf16", d=d, causal=causal, heads_q=heads, heads_kv=heads, gbps=None,
                            check=None)
                varlen = dict(base, kind="fwd_varlen", seqlen_q=max(lens), seqlen_k=max(lens),
                              batch=len(lens), total_q=args.total, varlen_lengths=lens)
                results = {}
                impls = [("k6", lambda: hfa.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal))]
                impls.append(("fa3", (lambda: fa3(q, k, v, cu, cu, max(lens), max(lens), causal=causal)) if fa3 else None))
                impls.append(("dense", lambda: hfa.attention(dq, dk, dv, causal=causal)))
                for name, fn in impls:
                    if fn is None:
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None, error="not importable here"))
                        continue
                    try:
                        ms, iters = timer.median_ms(fn)
                    except Exception as e:  # a peer that cannot run is reported, never replaced
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None, error=str(e)[:300]))
                        continue
                    if name == "dense":
                        df = flops([mean] * dense_batch, heads, d, causal)
                        results[name] = df / (ms * 1e-3) / 1e12
                        rows.append(dict(base, impl="k6", kind="fwd", seqlen_q=mean, seqlen_k=mean,
                                         batch=dense_batch, ms=ms, tflops=results[name], iters=iters,
                                         note="dense yardstick of the varlen batch before it"))
                    else:
                        results[name] = f / (ms * 1e-3) / 1e12
                        rows.append(dict(varlen, impl=name, ms=ms, tflops=results[name], iters=iters))
                h, a, dn = results.get("k6"), results.get("fa3"), results.get("dense")
                fmt = lambda x: f"{x:7.1f}" if x else "      -"
                ratio = lambda x, y: f"{x / y:7.3f}" if x and y else "      -"
                print(f"{d:4d} {int(causal):6d} {len(lens):4d} {mean:5d}  {fmt(h)} {fmt(a)} {fmt(dn)}  {ratio(h, a)} {ratio(h, dn)}",
                      flush=True)
    if args.json:
        write_run_json(args.json, rows)


def random_lengths(rng, args):
    lens, left = [], args.total
    while left > 0:
        n = min(left, rng.randint(args.min, args.max))
        lens.append(n)
        left -= n
    return lens


def grad_timer(fn, inputs, dout):
    """A callable running the backward of fn(*inputs) (graph built once, retained)."""
    out = fn(*inputs)
    return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)


def backward_main(args, timer, rng):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    rows = []
    print(f"{'d':>4} {'causal':>6} {'seqs':>4} {'mean':>5}  {'hfa':>7} {'flash':>7} {'dense':>7}  hfa/flash hfa/dense")
    for d in (int(x) for x in args.headdims.split(",")):
        heads = 2048 // d
        for causal in (False, True):
            for _ in range(args.batches):
                lens = random_lengths(rng, args)
                cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
                q, k, v = (torch.randn(args.total, heads, d, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                dout = torch.randn_like(q)
                mean = round(args.total / len(lens))
                dense_batch = max(1, args.total // mean)
                dense = [torch.randn(dense_batch, mean, heads, d, device="cuda", dtype=torch.bfloat16,
                                     requires_grad=True) for _ in range(3)]
                f = 2.5 * flops(lens, heads, d, causal)
                base = dict(dtype="bf16", d=d, causal=causal, heads_q=heads, heads_kv=heads, gbps=None, check=None)
                varlen = dict(base, kind="bwd_varlen", seqlen_q=max(lens), seqlen_k=max(lens),
                              batch=len(lens), total_q=args.total, varlen_lengths=lens)
                offsets = cu.long()

                def flash_nested(q, k, v):
                    nt = [torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in (q, k, v)]
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        o = F.scaled_dot_product_attention(*nt, is_causal=causal)
                    return o.transpose(1, 2).values()

                results = {}
                impls = [("bwd_sm90", lambda: grad_timer(
                             lambda q, k, v: hfa.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal),
                             (q, k, v), dout)),
                         ("sdpa_flash", lambda: grad_timer(flash_nested, (q, k, v), dout)),
                         ("fa3", None),
                         ("dense", lambda: grad_timer(lambda q, k, v: hfa.attention(q, k, v, causal=causal),
                                                      tuple(dense), torch.randn_like(dense[0])))]
                for name, make in impls:
                    if make is None:
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None,
                                         error="the fa3_fwd wheel has no backward"))
                        continue
                    try:
                        ms, iters = timer.median_ms(make())
                    except Exception as e:  # a peer that cannot run is reported, never replaced
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None, error=str(e)[:300]))
                        print(f"  {name}: {str(e)[:200]}", file=sys.stderr)
                        continue
                    if name == "dense":
                        results[name] = 2.5 * flops([mean] * dense_batch, heads, d, causal) / (ms * 1e-3) / 1e12
                        rows.append(dict(base, impl="bwd_sm90", kind="bwd", seqlen_q=mean, seqlen_k=mean,
                                         batch=dense_batch, ms=ms, tflops=results[name], iters=iters,
                                         note="dense yardstick of the varlen batch before it"))
                    else:
                        results[name] = f / (ms * 1e-3) / 1e12
                        rows.append(dict(varlen, impl=name, ms=ms, tflops=results[name], iters=iters))
                h, a, dn = results.get("bwd_sm90"), results.get("sdpa_flash"), results.get("dense")
                fmt = lambda x: f"{x:7.1f}" if x else "      -"
                ratio = lambda x, y: f"{x / y:9.3f}" if x and y else "        -"
                print(f"{d:4d} {int(causal):6d} {len(lens):4d} {mean:5d}  {fmt(h)} {fmt(a)} {fmt(dn)}  {ratio(h, a)} {ratio(h, dn)}",
                      flush=True)
    if args.json:
        write_run_json(args.json, rows)


if __name__ == "__main__":
    main()
