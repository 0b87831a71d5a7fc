#!/usr/bin/env python3
"""The FP8 peers of k7 on the DESIGN.md sweep, timed as bench_peers.py times (cold L2, ~1 ms of
GPU spin before the start event, median of --iters): FlashAttention-3's FP8 forward ("fa3_fp8",
the fa3_fwd wheel: e4m3 q/k/v with fp32 (batch, heads_kv) descales, bf16 out) and the FP8 GEMM
ceiling ("cublas_gemm_fp8": torch._scaled_mm, 8192^3). hfa's k7 and k8 are timed by hfa-bench in
the same device call; --merge takes their JSON files and prints each / fa3_fp8 per configuration
and their geometric means. No hfa import: this runs on a machine with only torch and the wheel.

  python bench_fp8_peers.py --merge sweep-k7.json sweep-k8.json --json fp8-peers.json
"""
import argparse
import datetime
import json
import math
import os
import statistics

import sys
import types

import torch

# bench_peers imports the hfa binding at the top, which this script does not need: a stand-in
# module lets its timer and sweep be reused on a machine where the binding is not installed.
sys.modules.setdefault("hfa", types.ModuleType("hfa"))
from bench_peers import Timer, sweep  # noqa: E402


def fa3_fp8_fn(cfg):
    from fa3_fwd_interface import flash_attn_func
    b, s, h, d = cfg["batch"], cfg["s"], cfg["heads"], cfg["d"]
    q, k, v = ((torch.randn(b, s, h, d, device="cuda") * 64).to(torch.float8_e4m3fn) for _ in range(3))
    desc = [torch.full((b, h), 1 / 64, device="cuda") for _ in range(3)]
    return lambda: flash_attn_func(q, k, v, causal=cfg["causal"], q_descale=desc[0],
                                   k_descale=desc[1], v_descale=desc[2])


def fp8_gemm_tflops(timer, n=8192):
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    ms, _ = timer.median_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    return ms, 2 * n ** 3 / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--merge", nargs="*", default=[], help="hfa-bench --json files of the same run (k7, k8 rows)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=6.0)
    args = ap.parse_args()
    timer = Timer(args.warmup, args.iters, args.max_seconds)
    rows = []
    ms, tf = fp8_gemm_tflops(timer)
    rows.append(dict(impl="cublas_gemm_fp8", kind="gemm", dtype="e4m3", ms=ms, tflops=tf, check=None))
    print(f"cublas_gemm_fp8 8192^3: {tf:.1f} TFLOPS", flush=True)
    for cfg in sweep([64, 128, 256], [512, 1024, 2048, 4096, 8192, 16384]):
        flops = 4 * cfg["batch"] * cfg["heads"] * cfg["s"] ** 2 * cfg["d"] * (0.5 if cfg["causal"] else 1)
        row = dict(impl="fa3_fp8", kind="fwd", dtype="e4m3", d=cfg["d"], causal=int(cfg["causal"]),
                   seqlen_q=cfg["s"], seqlen_k=cfg["s"], batch=cfg["batch"], heads_q=cfg["heads"],
                   heads_kv=cfg["heads"], check=None)
        try:
            ms, iters = timer.median_ms(fa3_fp8_fn(cfg))
            row.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12, iters=iters)
        except Exception as e:  # a peer that cannot run is reported as such
            row.update(ms=None, tflops=None, error=str(e)[:200])
        rows.append(row)
        print(row, flush=True)
    peer = {(r["d"], r["causal"], r["seqlen_q"]): r for r in rows if r["impl"] == "fa3_fp8"}
    for merge in args.merge:
        hfa_rows = json.load(open(merge))["rows"]
        rows += hfa_rows
        ratios = []
        impl = hfa_rows[0]["impl"] if hfa_rows else "?"
        print(f"{'d':>4} {'causal':>6} {'s':>6} {impl:>8} {'fa3_fp8':>8} {'ratio':>6}")
        for r in hfa_rows:
            p = peer.get((r["d"], int(r["causal"]), r["seqlen_q"]))
            if not p or not p.get("tflops") or not r.get("tflops"):
                continue
            ratios.append(r["tflops"] / p["tflops"])
            print(f"{r['d']:>4} {int(r['causal']):>6} {r['seqlen_q']:>6} {r['tflops']:8.1f} {p['tflops']:8.1f} {ratios[-1]:6.3f}")
        if ratios:
            geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
            print(f"{r['impl']} / fa3_fp8: geomean {geo:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    out = dict(gpu=torch.cuda.get_device_name(0), date=datetime.date.today().isoformat(),
               commit=os.environ.get("HFA_COMMIT", "unknown"),
               command="python bench_fp8_peers.py " + " ".join(sys.argv[1:]), rows=rows)
    json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
