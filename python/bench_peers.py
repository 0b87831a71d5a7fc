#!/usr/bin/env python3
"""hfa next to what people use today, in one process on one GPU.

For the DESIGN.md sweep (s = 512..16384, batch = 16384/s, heads = 2048/d, d in {64,128,256},
causal in {0,1}) times, per configuration and interleaved so that clock drift hits all alike:
  - the hfa kernels named by --kernels (e.g. k1,k2,auto)
  - torch SDPA with the cuDNN backend ("cudnn") and with the FLASH backend ("torch_flash", FA2)
  - FlashAttention-3's forward ("fa3", flash_attn_func of the fa3_fwd wheel; forward only: with
    --bwd or --step its rows say it cannot run)
  - once per run, the cuBLAS bf16 GEMM 8192^3 ceiling ("cublas_gemm")
Writes a table (each hfa kernel's TFLOPS and its ratios to cudnn, torch_flash and fa3), JSON in the
DESIGN.md schema, and PNG plots (TFLOPS vs seqlen, one line per implementation, one panel per
(d, causal)). With --bwd the same for the backward pass: every implementation's gradients of
q, k, v through torch.autograd.grad after an untimed forward (--kernels then names hfa's
backward kernels, e.g. bwd_sm90,fa2, after the "auto" forward); TFLOPS = 2.5 x the forward's
FLOPs. With --step a training step: forward and backward through autograd, timed together (JSON
kind "step"; --kernels names the backward kernel again, and "auto" is named "hfa"); TFLOPS = 3.5 x
the forward's FLOPs. --deterministic runs
hfa's backward in its deterministic mode (rows named <kernel>_deterministic), and times each torch
peer twice: as it runs by default (the issue's yardstick) and under
torch.use_deterministic_algorithms(True) (rows named <peer>_deterministic; a peer that refuses to
run deterministically says so in its row's error). hfa is imported only when --kernels names a
kernel, so the peers can be timed where hfa's torch ops are not built.

Timing: CUDA events around each call, L2 flushed before each, the GPU kept busy for ~1 ms before
the start event so host launch overhead is not timed, median of --iters after --warmup;
a configuration whose first call takes long gets fewer iterations (--max-seconds), noted as
"iters" in its JSON row. --host-sync times what a user's loop sees instead: host wall time from a
synchronized GPU to the call's completion (host work and anything the driver does between calls
included), the command line in the JSON saying so.

  python bench_peers.py --kernels k2 --json out.json --plot out.png
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

hfa = None  # imported by main() when --kernels names an hfa kernel


def import_hfa():
    global hfa
    import hfa as module
    hfa = module

PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "torch_flash": SDPBackend.FLASH_ATTENTION}
DETERMINISTIC = "_deterministic"  # a torch peer run under torch.use_deterministic_algorithms(True)
FA3 = "fa3"  # FlashAttention-3's own Hopper forward, from the fa3_fwd wheel


def fa3_available():
    import importlib.util
    return importlib.util.find_spec("fa3_fwd_interface") is not None


def add_timer_args(ap, max_seconds):
    """The timing options every benchmark script takes (bench_peers, bench_fp8_peers,
    bench_decode_peers); timer_from() makes their Timer."""
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=max_seconds,
                    help="time budget per (configuration, implementation); slower ones get fewer iterations (at least 5)")
    ap.add_argument("--host-sync", action="store_true",
                    help="time each call as a user's loop sees it: host wall time from a synchronized GPU to the "
                         "call's completion (torch.cuda.synchronize() on both sides), host work included, instead of "
                         "device time behind a GPU spin; catches costs the device time hides (a workspace the driver "
                         "maps again after each synchronization did)")


def timer_from(args):
    return Timer(args.warmup, args.iters, args.max_seconds, host_sync=args.host_sync)


def sweep(head_dims, seqlens):
    for d in head_dims:
        for causal in (False, True):
            for s in seqlens:
                yield dict(d=d, causal=causal, s=s, batch=max(1, 16384 // s), heads=2048 // d)


class Timer:
    def __init__(self, warmup, iters, max_seconds, host_sync=False):
        self.warmup, self.iters, self.max_seconds = warmup, iters, max_seconds
        self.host_sync = host_sync
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.spin_cycles = 2_000_000  # about 1 ms at H100 clocks

    def median_ms(self, fn):
        """Median ms of fn() with a cold L2; returns (ms, iterations). Device time between CUDA
        events by default; with host_sync, host wall time between two synchronizations."""
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def once_host_sync():
            self.flush.zero_()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1e3

        def once():
            if self.host_sync:
                return once_host_sync()
            self.flush.zero_()
            # Keep the GPU busy for ~1 ms so that the host work of launching fn (Python, dispatch,
            # descriptor setup) is hidden before `start`: the events bracket device time only,
            # for hfa and the peers alike.
            torch.cuda._sleep(self.spin_cycles)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop)

        first = once()
        iters = self.iters
        if first * 1e-3 * (self.warmup + self.iters) > self.max_seconds:
            iters = max(5, int(self.max_seconds / (first * 1e-3)))
            warmup = 1
        else:
            warmup = self.warmup
        for _ in range(warmup):
            once()
        return statistics.median(once() for _ in range(iters)), iters


def attention_flops(c):
    f = 4.0 * c["batch"] * c["heads"] * c["s"] * c["s"] * c["d"]
    return f / 2 if c["causal"] else f


FLOPS_FACTOR = {"fwd": 1.0, "bwd": 2.5, "step": 3.5}


def hfa_label(kernel, kind, deterministic):
    """The JSON impl of an hfa kernel's rows: step rows of "auto" are "hfa"."""
    name = "hfa" if kind == "step" and kernel == "auto" else kernel
    return name + ("_deterministic" if deterministic and kind != "fwd" else "")


def row(impl, c, dtype, ms, iters, error=None, kind="fwd", softcap=0.0):
    flops = attention_flops(c) * FLOPS_FACTOR[kind]
    tflops = flops / (ms * 1e-3) / 1e12 if ms else None
    r = dict(impl=impl, kind=kind, dtype=dtype, d=c["d"], causal=c["causal"], seqlen_q=c["s"],
             seqlen_k=c["s"], batch=c["batch"], heads_q=c["heads"], heads_kv=c["heads"],
             ms=ms, tflops=tflops, gbps=None, check=None, iters=iters)
    if softcap:
        r["softcap"] = softcap  # the same FLOPs as the plain score: TFLOPS compare directly
    if error:
        r["error"] = error
    return r


def bench_config(c, impls, dtype, timer, kind="fwd", deterministic=False, softcap=0.0):
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    shape = (c["batch"], c["s"], c["heads"], c["d"])
    grads = kind != "fwd"
    q, k, v = (torch.randn(shape, device="cuda", dtype=tdtype, requires_grad=grads) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's (b, h, s, d) view of BSHD
    dout = torch.randn(shape, device="cuda", dtype=tdtype) if grads else None
    rows = []
    # With a deterministic hfa backward, each torch peer also runs deterministically (impl
    # "<peer>_deterministic"), beside its default run.
    if deterministic and kind != "fwd":
        impls = [x for impl in impls for x in ([impl, impl + DETERMINISTIC] if impl in PEERS else [impl])]
    for impl in impls:
        label = impl
        if impl.removesuffix(DETERMINISTIC) in PEERS:
            def fwd(impl=impl):
                if softcap:
                    raise NotImplementedError(f"{impl}: torch SDPA takes no softcap")
                with sdpa_kernel(PEERS[impl.removesuffix(DETERMINISTIC)]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=c["causal"]).transpose(1, 2)
        elif impl == FA3:
            def fwd():
                if kind != "fwd":
                    raise NotImplementedError("fa3: the fa3_fwd wheel has FlashAttention-3's forward only")
                from fa3_fwd_interface import flash_attn_func
                return flash_attn_func(q, k, v, causal=c["causal"], softcap=softcap)
        else:
            label = hfa_label(impl, kind, deterministic)

            def fwd(impl=impl):
                if kind == "fwd":
                    return hfa.attention(q, k, v, causal=c["causal"], kernel=impl, softcap=softcap)
                return hfa.attention(q, k, v, causal=c["causal"], backward_kernel=impl,
                                     deterministic=deterministic)
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(impl.endswith(DETERMINISTIC) and impl.removesuffix(DETERMINISTIC) in PEERS)
        try:
            if kind == "bwd":
                out = fwd()  # untimed; its graph is kept for every timed backward
                ms, iters = timer.median_ms(
                    lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                del out
            elif kind == "step":  # forward and backward, as a training step runs them
                ms, iters = timer.median_ms(lambda: torch.autograd.grad(fwd(), (q, k, v), dout))
            else:
                ms, iters = timer.median_ms(fwd)
            rows.append(row(label, c, dtype, ms, iters, kind=kind, softcap=softcap))
        except (RuntimeError, ValueError, NotImplementedError) as e:  # cannot run this configuration
            rows.append(row(label, c, dtype, None, 0, error=str(e).splitlines()[0][:300], kind=kind,
                            softcap=softcap))
        finally:
            torch.use_deterministic_algorithms(was_deterministic)
    return rows


def gemm_row(timer):
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ms, iters = timer.median_ms(lambda: a @ b)
    return dict(impl="cublas_gemm", kind="gemm", dtype="bf16", d=None, causal=None, seqlen_q=n,
                seqlen_k=n, batch=1, heads_q=None, heads_kv=None, ms=ms,
                tflops=2.0 * n ** 3 / (ms * 1e-3) / 1e12, gbps=None, check=None, iters=iters)


def print_table(rows, kernels, kind="fwd"):
    gemm = next((r for r in rows if r["impl"] == "cublas_gemm"), None)
    if gemm:
        print(f"cublas_gemm bf16 8192^3: {gemm['tflops']:.1f} TFLOPS")
    impls = [i for i in dict.fromkeys(r["impl"] for r in rows) if i != "cublas_gemm"]
    head = f"{'d':>4} {'causal':>6} {'seqlen':>6} " + " ".join(f"{i:>11}" for i in impls)
    bases = [b for b in list(PEERS) + [FA3] if b in impls]
    head += "".join(f" {k + '/' + b:>18}" for k in kernels for b in bases)
    print(f"{kind}:")
    print(head)
    by_cfg = {}
    for r in rows:
        if r["kind"] == kind:
            by_cfg.setdefault((r["d"], r["causal"], r["seqlen_q"]), {})[r["impl"]] = r
    ratios = {(k, b): [] for k in kernels for b in bases}
    for (d, causal, s), by_impl in by_cfg.items():
        line = f"{d:>4} {int(causal):>6} {s:>6} "
        line += " ".join(f"{by_impl[i]['tflops']:>11.2f}" if by_impl.get(i, {}).get("tflops")
                         else f"{'-':>11}" for i in impls)
        for k in kernels:
            for b in bases:
                t, base = by_impl.get(k, {}).get("tflops"), by_impl.get(b, {}).get("tflops")
                if t and base:
                    ratios[(k, b)].append(t / base)
                    line += f" {t / base:>18.3f}"
                else:
                    line += f" {'-':>18}"
        print(line)
    for (k, b), rs in ratios.items():
        if rs:
            geo = math.exp(sum(math.log(x) for x in rs) / len(rs))
            print(f"{k} {kind}: geometric mean {geo:.3f}x {b} over {len(rs)} configurations, "
                  f"min {min(rs):.3f}x, max {max(rs):.3f}x")


def plot(rows, path, kind="fwd"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fwd = [r for r in rows if r["kind"] == kind and r["tflops"]]
    dims = sorted({r["d"] for r in fwd})
    gemm = next((r["tflops"] for r in rows if r["impl"] == "cublas_gemm"), None)
    fig, axes = plt.subplots(len(dims), 2, figsize=(11, 3.6 * len(dims)), squeeze=False)
    for i, d in enumerate(dims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            for impl in dict.fromkeys(r["impl"] for r in fwd):
                pts = sorted((r["seqlen_q"], r["tflops"]) for r in fwd
                             if r["impl"] == impl and r["d"] == d and r["causal"] == causal)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=impl)
            if gemm:
                ax.axhline(gemm, color="gray", linestyle="--", label="cublas_gemm")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            title = {"fwd": "forward", "bwd": "backward", "step": "training step (fwd + bwd)"}[kind]
            ax.set_title(f"{title}, d={d}, causal={int(causal)}")
            ax.set_xlabel("seqlen (batch = 16384 / seqlen)")
            ax.set_ylabel("TFLOPS")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"{torch.cuda.get_device_name()}  {datetime.date.today()}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_run_json(path, rows):
    """One run's JSON document (DESIGN.md schema): the GPU, the UTC time, the commit ($HFA_COMMIT,
    else git's HEAD), the command line, the rows. Shared by every benchmark script."""
    commit = os.environ.get("HFA_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
        cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    doc = dict(gpu=torch.cuda.get_device_name(),
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               commit=commit, command="python " + " ".join(sys.argv), rows=rows)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{os.path.basename(sys.argv[0])}: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="auto", help="comma-separated hfa kernels (see hfa.list_kernels()); with --bwd or --step backward kernels (hfa.list_backward_kernels())")
    ap.add_argument("--peers", default="cudnn,torch_flash,cublas_gemm",
                    help="comma-separated: cudnn, torch_flash, fa3 (needs the fa3_fwd wheel), cublas_gemm")
    ap.add_argument("--headdims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    add_timer_args(ap, max_seconds=20.0)
    ap.add_argument("--bwd", action="store_true",
                    help="time the backward pass (gradients of q, k, v) instead of the forward")
    ap.add_argument("--step", action="store_true",
                    help="time a training step: forward + backward through autograd")
    ap.add_argument("--deterministic", action="store_true",
                    help="--bwd/--step: hfa's deterministic backward, and each torch peer also under "
                         "torch.use_deterministic_algorithms(True) (rows <peer>_deterministic)")
    ap.add_argument("--peers-first", action="store_true",
                    help="time the peers before the hfa kernels in each configuration (default: after). "
                         "Under a power cap the clock an implementation gets depends on what ran "
                         "just before it; both orders bound that effect")
    ap.add_argument("--softcap", type=float, default=0.0,
                    help="forward only: scores capped as softcap * tanh(s / softcap) (Gemma 2's), for hfa and "
                         "fa3; torch SDPA has no softcap (its rows record that)")
    ap.add_argument("--json", help="write rows in the DESIGN.md schema")
    ap.add_argument("--plot", help="write a PNG")
    args = ap.parse_args()
    if args.softcap < 0:
        sys.exit("bench_peers: --softcap must be > 0 (or 0: none)")
    if args.softcap and (args.bwd or args.step):
        sys.exit("bench_peers: --softcap is timed for the forward only (fa3's wheel has no backward)")
    if args.bwd and args.step:
        sys.exit("bench_peers: --bwd and --step are two runs; give one")
    if args.deterministic and not (args.bwd or args.step):
        sys.exit("bench_peers: --deterministic is a backward option: it needs --bwd or --step")
    kind = "step" if args.step else "bwd" if args.bwd else "fwd"

    kernels = [k for k in args.kernels.split(",") if k]
    peers = [p for p in args.peers.split(",") if p]
    if kernels:
        import_hfa()
        listed = hfa.list_kernels() if kind == "fwd" else hfa.list_backward_kernels()
        known = {k["name"] for k in listed} | {"auto"}
        for k in kernels:
            if k not in known:
                sys.exit(f"bench_peers: unknown hfa kernel {k!r}; available: {sorted(known)}")
    for p in peers:
        if p not in PEERS and p not in (FA3, "cublas_gemm"):
            sys.exit(f"bench_peers: unknown peer {p!r}; available: cudnn, torch_flash, fa3, cublas_gemm")
    if FA3 in peers and not fa3_available():
        sys.exit("bench_peers: peer fa3 needs FlashAttention-3's fa3_fwd wheel (fa3_fwd_interface), "
                 "not importable here")

    torch.manual_seed(0)
    timer = timer_from(args)
    rows = []
    if "cublas_gemm" in peers:
        rows.append(gemm_row(timer))
    configs = list(sweep([int(x) for x in args.headdims.split(",")],
                         [int(x) for x in args.seqlens.split(",")]))
    attn_peers = [p for p in peers if p in PEERS or p == FA3]
    attn_impls = attn_peers + kernels if args.peers_first else kernels + attn_peers
    for n, c in enumerate(configs, 1):
        new = bench_config(c, attn_impls, args.dtype, timer, kind, args.deterministic, args.softcap)
        rows += new
        done = "  ".join(f"{r['impl']} {r['tflops']:.1f}" if r["tflops"] else f"{r['impl']} -" for r in new)
        print(f"[{n}/{len(configs)}] d={c['d']} causal={int(c['causal'])} s={c['s']}: {done}",
              file=sys.stderr, flush=True)

    print_table(rows, [hfa_label(k, kind, args.deterministic) for k in kernels], kind)
    if args.json:
        write_run_json(args.json, rows)
    if args.plot:
        plot(rows, args.plot, kind)
        print(f"bench_peers: wrote {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
