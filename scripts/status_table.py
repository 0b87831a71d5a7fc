#!/usr/bin/env python3
"""README's status table, computed from the committed benchmark JSON (docs/results/), never typed.

Each row is one headline: an hfa implementation against the best of its peers per configuration
of one run (the same GPU, the same process or device call), summarized as the geometric mean and
the minimum of hfa / best peer, over TFLOPS (GB/s for decode). HEADLINES names the file of each
(the latest run of that kind: add a new file here when a new run is committed).

  python3 scripts/status_table.py           # rewrites the table between the README's markers
  python3 scripts/status_table.py --check   # exits 1 if README.md's table is not what the JSON gives
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
BEGIN, END = "<!-- status-table:begin -->", "<!-- status-table:end -->"

# (what, file in docs/results, hfa impl, peers (best of, per configuration), row kind)
HEADLINES = [
    ("forward, bf16 (auto)", "2026-11-27-h100-peers-auto-f311dc6.json", "auto", ["cudnn"], "fwd"),
    ("forward, bf16 (auto)", "2026-11-27-h100-peers-auto-f311dc6.json", "auto", ["fa3"], "fwd"),
    ("backward, bf16 (bwd_sm90)", "2026-11-27-h100-peers-bwd-sm90-95be734.json", "bwd_sm90", ["cudnn"], "bwd"),
    ("backward, deterministic (auto)", "2026-11-27-h100-peers-bwd-deterministic-a7cd461.json",
     "auto_deterministic", ["cudnn"], "bwd"),
    ("training step (fwd + bwd)", "2026-11-27-h100-peers-step-95be734.json", "hfa", ["cudnn"], "step"),
    ("forward, variable-length batches (k6)", "2026-11-26-h100-varlen-peers-ce5400e.json", "k6", ["fa3"], "fwd_varlen"),
    ("backward, variable-length batches (bwd_sm90)", "2026-11-24-h100-varlen-bwd-a6a911c.json", "bwd_sm90",
     ["sdpa_flash"], "bwd_varlen"),
    ("FP8 forward (k7)", "2026-11-27-h100-peers-k7-k8-fp8-14ad125-passes2.json", "k7", ["fa3_fp8"], "fwd"),
    ("FP8 forward, block scales (k8)", "2026-11-27-h100-peers-k7-k8-fp8-14ad125-passes2.json", "k8", ["fa3_fp8"], "fwd"),
    # Decode on the H100 at beddf35 (session 53): hfa's bf16 and e4m3 sweeps, then the peers, in one call.
    ("decode, bf16 cache", "2026-11-28-h100-decode-peers-beddf35.json", "decode", ["cudnn", "fa3"], "decode"),
    ("decode, bf16 paged cache", "2026-11-28-h100-decode-peers-beddf35.json", "decode_paged", ["cudnn", "fa3"], "decode"),
    ("decode, e4m3 cache", "2026-11-28-h100-decode-peers-beddf35.json", "decode_e4m3", ["fa3_fp8"], "decode"),
    ("decode, e4m3 paged cache", "2026-11-28-h100-decode-peers-beddf35.json", "decode_paged_e4m3", ["fa3_fp8"], "decode"),
    # Session 43's runs came on an H200 (the H100s did not): the same headlines on that GPU, beside
    # the H100's. The decode file's peers ran in the device call after hfa's sweeps, on the same
    # machine still held (PERFORMANCE.md, "Latest for decode").
    ("FP8 forward (k7)", "2026-11-27-h200-peers-k7-k8-fp8-24fdc25.json", "k7", ["fa3_fp8"], "fwd"),
    ("FP8 forward, block scales (k8)", "2026-11-27-h200-peers-k7-k8-fp8-24fdc25.json", "k8", ["fa3_fp8"], "fwd"),
    ("decode, bf16 cache", "2026-11-27-h200-decode-peers-24fdc25.json", "decode", ["cudnn", "fa3"], "decode"),
    ("decode, bf16 paged cache", "2026-11-27-h200-decode-peers-24fdc25.json", "decode_paged", ["cudnn", "fa3"], "decode"),
    # The e4m3 cache after its GEMMs moved to fp16, its addresses were held, its conversion batched
    # (session 44) and its pages' addresses held (session 45): hfa and fa3_fp8 in one call.
    ("decode, e4m3 cache", "2026-11-27-h200-decode-e4m3-peers-acac622.json", "decode_e4m3", ["fa3_fp8"], "decode"),
    ("decode, e4m3 paged cache", "2026-11-27-h200-decode-e4m3-peers-acac622.json", "decode_paged_e4m3", ["fa3_fp8"],
     "decode"),
]

CONFIG_KEYS = ("d", "causal", "seqlen_q", "seqlen_k", "batch", "heads_q", "heads_kv")


def summarize(path, impl, peers, kind):
    """(geomean, min, configurations, gpu, commit) of impl / best(peers) in one run's file."""
    with open(os.path.join(RESULTS, path)) as f:
        doc = json.load(f)
    metric = "gbps" if kind == "decode" else "tflops"
    ours, best = {}, {}
    for r in doc["rows"]:
        if r.get("kind") != kind or not r.get(metric):
            continue
        key = tuple(r.get(k) for k in CONFIG_KEYS)
        if r["impl"] == impl:
            ours[key] = r[metric]
        elif r["impl"] in peers:
            best[key] = max(best.get(key, 0.0), r[metric])
    ratios = [ours[k] / best[k] for k in ours if k in best]
    if not ratios:
        raise SystemExit(f"status_table: {path}: no configuration has both {impl} and {peers}")
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return geo, min(ratios), len(ratios), doc.get("gpu", "?"), str(doc.get("commit", "?"))[:7]


def table():
    lines = ["| what | hfa | vs (best of) | geomean | min | configs | GPU | commit | JSON |",
             "|---|---|---|---|---|---|---|---|---|"]
    for what, path, impl, peers, kind in HEADLINES:
        geo, low, n, gpu, commit = summarize(path, impl, peers, kind)
        lines.append(f"| {what} | `{impl}` | {', '.join(peers)} | {geo:.3f}x | {low:.3f}x | {n} | "
                     f"{gpu} | {commit} | [{path}](docs/results/{path}) |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with README.md instead of writing it")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    args = ap.parse_args()
    with open(args.readme) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"status_table: {args.readme} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + table() + END + tail
    if args.check:
        if new != text:
            sys.exit("status_table: README.md's status table differs from what docs/results gives; "
                     "run python3 scripts/status_table.py")
        print("status_table: README.md's status table matches docs/results")
        return
    with open(args.readme, "w") as f:
        f.write(new)
    print(f"status_table: wrote the table into {args.readme}")


if __name__ == "__main__":
    main()
