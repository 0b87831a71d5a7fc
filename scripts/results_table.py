#!/usr/bin/env python3
"""Render result JSON files (DESIGN.md schema) as one markdown table: TFLOPS per implementation,
one row per configuration. Usage: scripts/results_table.py docs/results/a.json [b.json ...]
With --ratio-to IMPL, each other implementation also gets its ratio to IMPL."""
import argparse
import json
from collections import OrderedDict


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ratio-to", default=None, help="peer to divide by, e.g. cudnn")
    ap.add_argument("--kind", default="fwd")
    args = ap.parse_args()

    table = OrderedDict()  # (dtype, d, causal, sq, sk, batch, hq, hkv) -> {impl: row}
    impls = []
    for path in args.files:
        for r in json.load(open(path))["rows"]:
            if r["kind"] != args.kind:
                continue
            key = (r["dtype"], r["d"], r["causal"], r["seqlen_q"], r["seqlen_k"], r["batch"],
                   r["heads_q"], r["heads_kv"])
            table.setdefault(key, {})[r["impl"]] = r
            if r["impl"] not in impls:
                impls.append(r["impl"])
    others = [i for i in impls if i != args.ratio_to]
    head = ["dtype", "d", "causal", "seqlen", "batch", "heads"] + [f"{i} TFLOPS" for i in impls]
    if args.ratio_to:
        head += [f"{i} / {args.ratio_to}" for i in others]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key, by_impl in table.items():
        dtype, d, causal, sq, sk, b, hq, hkv = key
        seqlen = str(sq) if sq == sk else f"{sq}/{sk}"
        heads = str(hq) if hq == hkv else f"{hq}/{hkv}"
        cells = [dtype, str(d), "1" if causal else "0", seqlen, str(b), heads]
        for i in impls:
            r = by_impl.get(i)
            if r is None or r.get("tflops") is None:
                cells.append("-")
            else:
                mark = "" if r.get("check") in (None, "pass") else " (FAIL)"
                cells.append(f"{r['tflops']:.2f}{mark}")
        if args.ratio_to:
            base = by_impl.get(args.ratio_to, {}).get("tflops")
            for i in others:
                t = by_impl.get(i, {}).get("tflops")
                cells.append(f"{t / base:.3f}" if t and base else "-")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
