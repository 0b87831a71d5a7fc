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


def nested_flash(causal):
    """torch's FLASH backend through SDPA on nested jagged tensors (packed (total, heads, d) in and
    out), for a batch's offsets."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def run(q, k, v, offsets):
        nt = [torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(*nt, is_causal=causal)
        return o.transpose(1, 2).values()
    return run


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
    elif not args.bwd:
        print("bench_varlen_peers: fa3 not importable (the fa3_fwd wheel): its rows say so", file=sys.stderr)
    # The forward: hfa's k6, FA3; the backward: bwd_sm90, torch FLASH (nested), FA3 (none).
    kind, factor = ("bwd", 2.5) if args.bwd else ("fwd", 1.0)
    hfa_name, peer = ("bwd_sm90", "sdpa_flash") if args.bwd else ("k6", "fa3")
    rows = []
    print(f"{'d':>4} {'causal':>6} {'seqs':>4} {'mean':>5}  {'hfa':>7} {peer:>10} {'dense':>7}  hfa/peer hfa/dense")
    for d in (int(x) for x in args.headdims.split(",")):
        heads = 2048 // d
        for causal in (False, True):
            for _ in range(args.batches):
                lens = random_lengths(rng, args)
                cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
                packed = lambda n: torch.randn(n, heads, d, device="cuda", dtype=torch.bfloat16,
                                               requires_grad=args.bwd)
                q, k, v = (packed(args.total) for _ in range(3))
                mean = round(args.total / len(lens))
                dense_batch = max(1, args.total // mean)
                dense = [torch.randn(dense_batch, mean, heads, d, device="cuda", dtype=torch.bfloat16,
                                     requires_grad=args.bwd) for _ in range(3)]
                base = dict(dtype="bf16", d=d, causal=causal, heads_q=heads, heads_kv=heads, gbps=None,
                            check=None)
                varlen = dict(base, kind=kind + "_varlen", seqlen_q=max(lens), seqlen_k=max(lens),
                              batch=len(lens), total_q=args.total, varlen_lengths=lens)
                ours = lambda q, k, v: hfa.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
                theirs = lambda q, k, v: fa3(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
                dense_fn = lambda q, k, v: hfa.attention(q, k, v, causal=causal)
                if args.bwd:
                    flash = nested_flash(causal)
                    dout = torch.randn_like(q)
                    impls = [(hfa_name, lambda: grad_timer(ours, (q, k, v), dout), None),
                             (peer, lambda: grad_timer(lambda *x: flash(*x, cu.long()), (q, k, v), dout), None),
                             ("fa3", None, "the fa3_fwd wheel has no backward"),
                             ("dense", lambda: grad_timer(dense_fn, tuple(dense), torch.randn_like(dense[0])), None)]
                else:
                    impls = [(hfa_name, lambda: (lambda: ours(q, k, v)), None),
                             (peer, (lambda: (lambda: theirs(q, k, v))) if fa3 else None, "not importable here"),
                             ("dense", lambda: (lambda: dense_fn(*dense)), None)]
                results = {}
                for name, make, why in impls:
                    if make is None:
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None, error=why))
                        continue
                    try:
                        ms, iters = timer.median_ms(make())
                    except Exception as e:  # a peer that cannot run is reported, never replaced
                        rows.append(dict(varlen, impl=name, ms=None, tflops=None, error=str(e)[:300]))
                        print(f"  {name}: {str(e)[:200]}", file=sys.stderr)
                        continue
                    if name == "dense":
                        results[name] = factor * flops([mean] * dense_batch, heads, d, causal) / (ms * 1e-3) / 1e12
                        rows.append(dict(base, impl=hfa_name, kind=kind, seqlen_q=mean, seqlen_k=mean,
                                         batch=dense_batch, ms=ms, tflops=results[name], iters=iters,
                                         note="dense yardstick of the varlen batch before it"))
                    else:
                        results[name] = factor * flops(lens, heads, d, causal) / (ms * 1e-3) / 1e12
                        rows.append(dict(varlen, impl=name, ms=ms, tflops=results[name], iters=iters))
                h, a, dn = results.get(hfa_name), results.get(peer), results.get("dense")
                fmt = lambda x: f"{x:7.1f}" if x else "      -"
                ratio = lambda x, y: f"{x / y:8.3f}" if x and y else "       -"
                print(f"{d:4d} {int(causal):6d} {len(lens):4d} {mean:5d}  {fmt(h)} {fmt(a):>10} {fmt(dn)}  {ratio(h, a)} {ratio(h, dn)}",
                      flush=True)
    if args.json:
        write_run_json(args.json, rows)


if __name__ == "__main__":
    main()
