#!/usr/bin/env python3
"""The decode peers of hfa::decode on hfa-bench's decode sweep (batch {1, 8, 32, 64, 128} x KV
length {2k, 8k, 16k, 64k}, 32 query / 8 KV heads, d = 128, one new token; MHA and d = 64 / 256 at
a few points), timed as bench_peers.py times (cold L2, ~1 ms of GPU spin before the start event,
median of --iters):
  - "cudnn" and "torch_flash": torch SDPA with q of length 1 against the whole cache (enable_gqa),
    cuDNN's and the FLASH backend; contiguous caches only (SDPA has no page table);
  - "fa3": FlashAttention-3's flash_attn_with_kvcache (the fa3_fwd wheel) on a contiguous cache,
    and "fa3_paged" on a paged one (page size 64, shuffled pages), with cache_seqlens;
  - "fa3_fp8", "fa3_fp8_paged": the same with an e4m3 cache (FlashAttention-3 takes q in e4m3
    too, with q/k/v descales); rows "kv_dtype": "e4m3", compared with hfa's e4m3-cache rows
    (hfa-bench --decode --kv-dtype e4m3; hfa keeps q in bf16).
GB/s = bytes of K and V read / time (1 byte per element for e4m3). hfa's rows come from hfa-bench --decode --sweep --json in the
same device call (--merge); the table prints hfa / best(cudnn, fa3) per configuration and the
geometric mean. No hfa import: this runs with only torch and the wheel.
The score variants (--window L,R, --softcap X, --sinks; --sweep variants: batch {1, 8, 64} x KV
length {8k, 64k}, d = 128): SDPA takes none of them (its rows are left out), FlashAttention-3's
flash_attn_with_kvcache takes window_size and softcap (sinks: reported as it fails, if it does),
and "fa3_window_keys" attends without a window to a cache of only the window's keys;
GB/s then counts the keys the window leaves (min(KV length, L + 1)), as hfa-bench does.

  python bench_decode_peers.py --merge decode.json --json decode-peers.json --plot decode.png
  python bench_decode_peers.py --sweep variants --window 4096,0 --peers fa3,fa3_paged --merge w.json --json p.json
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# (bench_peers imports hfa only when its --kernels name one: no binding needed here)
from bench_peers import add_timer_args, timer_from, write_run_json


def decode_sweep():
    for batch in (1, 8, 32, 64, 128):
        for sk in (2048, 8192, 16384, 65536):
            yield dict(batch=batch, sk=sk, hq=32, hkv=8, d=128)
    for batch, sk in ((1, 65536), (8, 8192), (64, 16384)):
        yield dict(batch=batch, sk=sk, hq=32, hkv=32, d=128)
        yield dict(batch=batch, sk=sk, hq=32, hkv=8, d=64)
        yield dict(batch=batch, sk=sk, hq=32, hkv=8, d=256)


def variants_sweep():
    for batch in (1, 8, 64):
        for sk in (8192, 65536):
            yield dict(batch=batch, sk=sk, hq=32, hkv=8, d=128)


VARIANTS = {}  # --window / --softcap / --sinks: window_left, window_right, softcap, sinks


def kv_bytes(c, elem_bytes=2):
    left = VARIANTS.get("window_left", -1)
    keys = min(c["sk"], left + 1) if left >= 0 else c["sk"]  # one new token: its window's keys
    return 2 * c["batch"] * keys * c["hkv"] * c["d"] * elem_bytes


def sdpa_fn(backend):
    def make(c):
        q = torch.randn(c["batch"], c["hq"], 1, c["d"], device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(c["batch"], c["sk"], c["hkv"], c["d"], device="cuda", dtype=torch.bfloat16)
                .transpose(1, 2) for _ in range(2))  # (b, h, s, d) views of the BSHD cache
        gqa = c["hq"] != c["hkv"]

        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        return run
    return make


def fa3_fn(page_size, fp8=False, window_keys_only=False):
    """window_keys_only: a cache that holds only the keys the window leaves (the last
    min(KV length, L + 1)), attended to without a window: the same keys read, for FlashAttention-3
    builds that take no window (the fa3_fwd wheel: "does not support local attention")."""
    def make(c):
        from fa3_fwd_interface import flash_attn_with_kvcache
        b, sk, hkv, d = c["batch"], c["sk"], c["hkv"], c["d"]
        if window_keys_only:
            if VARIANTS.get("window_left", -1) < 0:
                raise ValueError("fa3_window_keys: only with --window L,R (L >= 0)")
            sk = min(sk, VARIANTS["window_left"] + 1)

        def tensor(*shape):
            x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
            return (x * 64).to(torch.float8_e4m3fn) if fp8 else x
        q = tensor(b, 1, c["hq"], d)
        seqlens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        if page_size:
            pages = b * sk // page_size
            k, v = (tensor(pages, page_size, hkv, d) for _ in range(2))
            table = torch.randperm(pages, device="cuda", dtype=torch.int32).view(b, sk // page_size)
        else:
            k, v = (tensor(b, sk, hkv, d) for _ in range(2))
            table = None
        descales = {}
        if fp8:
            descales = {n: torch.full((b, hkv), 1 / 64, device="cuda") for n in ("q_descale", "k_descale", "v_descale")}
        variant_args = {}
        if VARIANTS:
            variant_args = dict(softcap=VARIANTS["softcap"])
            if not window_keys_only:
                variant_args["window_size"] = (VARIANTS["window_left"], VARIANTS["window_right"])
            if VARIANTS["sinks"]:  # (a learned logit per query head, as gpt-oss has)
                import inspect
                names = inspect.signature(flash_attn_with_kvcache).parameters
                name = next((n for n in ("learnable_sink", "s_aux", "sinks") if n in names), None)
                if name is None:
                    raise NotImplementedError("fa3_fwd's flash_attn_with_kvcache takes no attention sinks")
                variant_args[name] = torch.rand(c["hq"], device="cuda") * 5 - 1
        return lambda: flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table,
                                               **descales, **variant_args)
    return make


PEERS = {"cudnn": sdpa_fn(SDPBackend.CUDNN_ATTENTION), "torch_flash": sdpa_fn(SDPBackend.FLASH_ATTENTION),
         "fa3": fa3_fn(0), "fa3_paged": fa3_fn(64), "fa3_fp8": fa3_fn(0, True), "fa3_fp8_paged": fa3_fn(64, True),
         "fa3_window_keys": fa3_fn(0, window_keys_only=True)}
E4M3_PEERS = ("fa3_fp8", "fa3_fp8_paged")
# The peers an hfa row is compared with: the best of these, per configuration and cache dtype.
BEST_OF = {"bf16": ("cudnn", "fa3", "fa3_window_keys"), "e4m3": ("fa3_fp8",)}


def key(r):
    return (r["batch"], r["seqlen_k"], r["heads_q"], r["heads_kv"], r["d"], r.get("kv_dtype", "bf16"),
            r.get("window_left", -1), r.get("window_right", -1), r.get("softcap", 0), r.get("sinks", False))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    batches = sorted({r["batch"] for r in rows if r["heads_kv"] == 8 and r["d"] == 128})
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), sharey=True)
    for ax, b in zip(axes, batches):
        impls = sorted({r["impl"] for r in rows})
        for impl in impls:
            pts = sorted((r["seqlen_k"], r["gbps"]) for r in rows if r["impl"] == impl and r["batch"] == b
                         and r["heads_kv"] == 8 and r["d"] == 128 and r["heads_q"] == 32 and r.get("gbps"))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_title(f"batch {b}")
        ax.set_xlabel("KV length")
        ax.axhline(3350, color="grey", lw=0.8, ls="--")
    axes[0].set_ylabel("GB/s of K+V (dashed: HBM3 peak)")
    axes[-1].legend(fontsize=7)
    fig.suptitle("decode, 32 q / 8 kv heads, d = 128, one new token (e4m3 rows: GB/s of the e4m3 cache)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--merge", nargs="*", default=[], help="hfa-bench --decode --json files of the same run")
    ap.add_argument("--peers", default="cudnn,torch_flash,fa3,fa3_paged", help=", ".join(PEERS))
    ap.add_argument("--plot")
    ap.add_argument("--sweep", choices=("decode", "variants"), default="decode")
    ap.add_argument("--window", default="-1,-1", help="LEFT,RIGHT (-1 unbounded)")
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--sinks", action="store_true")
    add_timer_args(ap, max_seconds=4.0)
    args = ap.parse_args()
    timer = timer_from(args)
    left, right = (int(x) for x in args.window.split(","))
    if (left, right) != (-1, -1) or args.softcap or args.sinks:
        VARIANTS.update(window_left=left, window_right=right, softcap=args.softcap, sinks=args.sinks)
    rows = []
    for c in (decode_sweep() if args.sweep == "decode" else variants_sweep()):
        for name in args.peers.split(","):
            if VARIANTS and name in ("cudnn", "torch_flash"):
                continue  # SDPA takes no window, softcap or sinks
            fp8 = name in E4M3_PEERS
            row = dict(impl=name, kind="decode", dtype="e4m3" if fp8 else "bf16", d=c["d"], causal=False,
                       seqlen_q=1, seqlen_k=c["sk"], batch=c["batch"], heads_q=c["hq"], heads_kv=c["hkv"],
                       page_size=64 if name.endswith("_paged") else 0, kv_dtype="e4m3" if fp8 else "bf16",
                       check=None, **VARIANTS)
            try:
                ms, iters = timer.median_ms(PEERS[name](c))
                row.update(ms=ms, gbps=kv_bytes(c, 1 if fp8 else 2) / (ms * 1e-3) / 1e9, iters=iters)
            except Exception as e:  # a peer that cannot run is reported as such
                row.update(ms=None, gbps=None, error=str(e).splitlines()[0][:200] if str(e) else repr(e))
            rows.append(row)
            torch.cuda.empty_cache()
            print(row, flush=True)
    best = {}
    for r in rows:
        if r["impl"] in BEST_OF[r.get("kv_dtype", "bf16")] and r.get("gbps"):
            best[key(r)] = max(best.get(key(r), 0), r["gbps"])
    for merge in args.merge:
        hfa_rows = [r for r in json.load(open(merge))["rows"] if r.get("kind") == "decode"]
        rows += hfa_rows
        for impl in sorted({r["impl"] for r in hfa_rows}):
            ratios = []
            peers = "/".join(BEST_OF[next(r.get("kv_dtype", "bf16") for r in hfa_rows if r["impl"] == impl)])
            print(f"{impl}: batch, KV length, heads q/kv, d, GB/s, best of {peers}, ratio")
            for r in hfa_rows:
                if r["impl"] != impl or not r.get("gbps") or key(r) not in best:
                    continue
                ratios.append(r["gbps"] / best[key(r)])
                print(f"  {r['batch']:4} {r['seqlen_k']:6} {r['heads_q']:3}/{r['heads_kv']:<3} {r['d']:4} "
                      f"{r['gbps']:8.1f} {best[key(r)]:8.1f} {ratios[-1]:6.3f}")
            if ratios:
                geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
                print(f"{impl} / best({peers}): geomean {geo:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    write_run_json(args.json, rows)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
