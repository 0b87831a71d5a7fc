#!/usr/bin/env python3
"""Context parallelism on the GPUs of one host: hfa.distributed.ring_attention next to hfa on one
GPU at the same total length and next to PyTorch's own context parallelism, in one run.

For each total length s in --seqlens and causal in {0, 1} (batch 1, --heads heads, d = --dim,
bf16; the shards zigzag's), on every GPU (one process each, NCCL, NVLink multicast off):
  - "ring":     ring_attention forward ("cp_fwd") and forward + backward ("cp_step")
  - "hfa_1gpu": hfa.attention on the whole sequence on GPU 0 alone (the others wait), same kinds;
                skipped where it does not fit
  - "torch_cp": torch.distributed.tensor.experimental.context_parallel over SDPA (its default
                backend choice; its load balancing on for causal, off without: it refuses that),
                same kinds; its failure is reported
scaling = (time on 1 GPU) / (world x time on world GPUs): 1.0 is perfect.

Timing: wall clock of each call between a barrier + synchronize and a synchronize on every rank,
the slowest rank's time, median of --iters after one warm-up call.

  torchrun-free: python bench_cp.py --json cp.json   (spawns one process per visible GPU)
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import hfa
import hfa.distributed as hd


def timed(fn, iters, world):
    """Median over iters (after one warm-up) of the slowest rank's wall time of fn(), in ms."""
    times = []
    for i in range(iters + 1):
        if world > 1:
            dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t = torch.tensor([time.perf_counter() - t0], device="cuda")
        if world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i > 0:
            times.append(t.item() * 1e3)
    return statistics.median(times)


def flops(s, heads, d, causal, kind):
    f = 4.0 * s * s * heads * d / (2 if causal else 1)
    return f * (3.5 if kind == "cp_step" else 1.0)


def ring_rows(args, rank, world, s, causal):
    sizes = hd.zigzag_chunk_sizes(s, world)
    n = sizes[rank] + sizes[2 * world - 1 - rank]
    g = torch.Generator(device="cuda").manual_seed(1000 * rank + s)
    mk = lambda: torch.randn(1, n, args.heads, args.dim, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, dout = mk().requires_grad_(), mk().requires_grad_(), mk().requires_grad_(), mk()
    fwd = lambda: hd.ring_attention(q.detach(), k.detach(), v.detach(), causal=causal)
    step = lambda: hd.ring_attention(q, k, v, causal=causal).backward(dout)
    return {"cp_fwd": timed(fwd, args.iters, world), "cp_step": timed(step, args.iters, world)}


def one_gpu_rows(args, rank, world, s, causal):
    """hfa on the whole sequence on rank 0 alone; {} where it does not fit."""
    out = {}
    if rank == 0:
        try:
            mk = lambda: torch.randn(1, s, args.heads, args.dim, device="cuda", dtype=torch.bfloat16)
            q, k, v, dout = mk().requires_grad_(), mk().requires_grad_(), mk().requires_grad_(), mk()
            out["cp_fwd"] = timed(lambda: hfa.attention(q.detach(), k.detach(), v.detach(), causal=causal), args.iters, 1)
            out["cp_step"] = timed(lambda: hfa.attention(q, k, v, causal=causal).backward(dout), args.iters, 1)
            del q, k, v, dout
        except torch.OutOfMemoryError:
            out = {}
        torch.cuda.empty_cache()
    box = [out]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def torch_cp_rows(args, rank, world, s, causal):
    """PyTorch's context parallelism over SDPA; {"error": ...} when it cannot run here."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import _cp_options
        import torch.nn.functional as F
        # Its load balancing (on by default) refuses is_causal=False: off there, as it asks.
        _cp_options.enable_load_balance = causal
        mesh = init_device_mesh("cuda", (world,))
        g = torch.Generator(device="cuda").manual_seed(s)
        # SDPA's layout (batch, heads, seqlen, d), the whole sequence on every rank: the context
        # manager shards the buffers along seqlen in place.
        mk = lambda: torch.randn(1, args.heads, s, args.dim, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v = mk(), mk(), mk()
        res = {}
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
            dout = torch.randn_like(qg)
            res["cp_fwd"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.iters, world)
            res["cp_step"] = timed(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(dout),
                                   args.iters, world)
        return res
    except Exception as e:  # noqa: BLE001  (reported, never replaced by a guess)
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def write_json(args, world, rows):
    meta = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(0),
            "world": world, "torch": torch.__version__, "commit": os.environ.get("HFA_COMMIT", "unknown"),
            "command": " ".join(sys.argv),
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


def worker(rank, world, args, init_file):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank), timeout=datetime.timedelta(seconds=180))
    rows, configs = [], [(s, c) for s in args.seqlens for c in (False, True)]
    one_gpu = {}
    # hfa's rows first, then PyTorch's (a peer that breaks or hangs leaves hfa's rows written).
    for s, causal in configs:
        ring = ring_rows(args, rank, world, s, causal)
        torch.cuda.empty_cache()
        one = one_gpu[(s, causal)] = {} if args.no_1gpu else one_gpu_rows(args, rank, world, s, causal)
        for kind in ("cp_fwd", "cp_step"):
            ms1 = one.get(kind)
            r = {"impl": "ring", "kind": kind, "world": world, "seqlen_q": s, "causal": causal,
                 "heads": args.heads, "head_dim": args.dim, "ms": ring[kind], "ms_1gpu": ms1,
                 "scaling": ms1 / (world * ring[kind]) if ms1 else None,
                 "tflops_per_gpu": flops(s, args.heads, args.dim, causal, kind) / world / ring[kind] / 1e9}
            rows.append(r)
            if rank == 0:
                print(f"ring     s={s:>6} causal={int(causal)} {kind:8s} {r['ms']:9.2f} ms "
                      f"({r['tflops_per_gpu']:6.1f} TFLOPS/GPU)  1 GPU {ms1 or float('nan'):9.2f} ms  "
                      f"scaling {r['scaling'] or float('nan'):.3f}", flush=True)
        if rank == 0 and args.json:
            write_json(args, world, rows)
    for s, causal in configs if not args.no_torch_cp else []:
        peer = torch_cp_rows(args, rank, world, s, causal)
        torch.cuda.empty_cache()
        for kind in ("cp_fwd", "cp_step"):
            base = {"impl": "torch_cp", "kind": kind, "world": world, "seqlen_q": s, "causal": causal}
            ring_ms = next(r["ms"] for r in rows if r["impl"] == "ring" and r["kind"] == kind
                           and r["seqlen_q"] == s and r["causal"] == causal)
            if "error" in peer:
                rows.append({**base, "error": peer["error"]})
            else:
                ms1 = one_gpu[(s, causal)].get(kind)
                rows.append({**base, "heads": args.heads, "head_dim": args.dim, "ms": peer[kind],
                             "ms_1gpu": ms1, "scaling": ms1 / (world * peer[kind]) if ms1 else None,
                             "ring_speedup": peer[kind] / ring_ms})
            if rank == 0:
                p = rows[-1]
                print(f"torch_cp s={s:>6} causal={int(causal)} {kind:8s} "
                      + (f"{p['ms']:9.2f} ms  ring is {p['ring_speedup']:.2f}x" if "ms" in p else p["error"][:160]),
                      flush=True)
        if rank == 0 and args.json:
            write_json(args, world, rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", default="32768,131072,262144")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-torch-cp", action="store_true")
    ap.add_argument("--no-1gpu", action="store_true", help="skip hfa on one GPU (no scaling column)")
    args = ap.parse_args()
    args.seqlens = [int(x) for x in args.seqlens.split(",")]
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit(f"bench_cp.py: {world} GPU(s) visible; context parallelism needs 2 or more")
    init = f"/tmp/hfa-bench-cp-{os.getpid()}"
    mp.spawn(worker, args=(world, args, init), nprocs=world, join=True)


if __name__ == "__main__":
    main()
