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

  python bench_varlen_peers.py --json out.json
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
    add_timer_args(ap, max_seconds=10.0)
    args = ap.parse_args()
    timer = timer_from(args)
    rng = random.Random(args.seed)
    fa3 = None
    if fa3_available():
        from fa3_fwd_interface import flash_attn_varlen_func as fa3
    else:
        print("bench_varlen_peers: fa3 not importable (the fa3_fwd wheel): its rows say so", file=sys.stderr)
    rows = []
    print(f"{'d':>4} {'causal':>6} {'seqs':>4} {'mean':>5}  {'hfa':>7} {'fa3':>7} {'dense':>7}  hfa/fa3 hfa/dense")
    for d in (int(x) for x in args.headdims.split(",")):
        heads = 2048 // d
        for causal in (False, True):
            for _ in range(args.batches):
                lens, left = [], args.total
                while left > 0:
                    n = min(left, rng.randint(args.min, args.max))
                    lens.append(n)
                    left -= n
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


if __name__ == "__main__":
    main()
