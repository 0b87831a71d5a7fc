#!/usr/bin/env python3
"""Summarize ncu's source page (per-SASS-instruction warp-state samples) of one kernel.

Input: the CSV that `ncu -i REPORT --page source --csv --print-source sass` prints (gzipped or
not), as scripts/ncu_profile.sh fp8-source writes it. The samples of a warp are taken whatever it
is doing, so a region's share of the samples is its warps' share of the time, and the stall reason
on an instruction says what the warp waited for there (long_sb on an mbarrier try-wait's branch:
a pipeline wait; barrier on the instruction after BAR.SYNC: a named barrier; barrier on
WARPGROUP.DEPBAR: a WGMMA wait).

  ncu_source_summary.py FILE top [N]        the N instructions with the most samples
  ncu_source_summary.py FILE regions STEP   samples and executions per STEP instructions
  ncu_source_summary.py FILE dump A B       instructions A .. B-1
  ncu_source_summary.py FILE insts A:B ...  executed warp instructions and samples per range
"""
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    reader = csv.reader(lines[start:])
    header = next(reader)
    rows = [dict(zip(header, row)) for row in reader if len(row) == len(header)]
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    return rows, stalls


def top_stalls(row, stalls, n):
    ranked = sorted(((number(row[c]), c) for c in stalls), reverse=True)[:n]
    return " ".join(f"{c[len('stall_'):]}:{v:.0f}" for v, c in ranked)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    rows, stalls = load(argv[1])
    mode = argv[2]
    total = sum(number(r[SAMPLES]) for r in rows)
    print(f"{len(rows)} instructions, {total:.0f} samples")
    reasons = collections.Counter()
    for r in rows:
        for c in stalls:
            reasons[c] += number(r[c])
    for c, v in reasons.most_common(8):
        print(f"  {c:24s} {v:9.0f} {100 * v / max(total, 1):5.1f}%")
    if mode == "top":
        n = int(argv[3]) if len(argv) > 3 else 30
        for i in sorted(range(len(rows)), key=lambda i: -number(rows[i][SAMPLES]))[:n]:
            r = rows[i]
            print(f"{i:5d} {number(r[SAMPLES]):8.0f} {number(r[EXECUTED]):10.0f}  "
                  f"{r['Source'].strip()[:64]:64s} {top_stalls(r, stalls, 2)}")
    elif mode == "regions":
        step = int(argv[3])
        for a in range(0, len(rows), step):
            chunk = rows[a:a + step]
            samples = sum(number(r[SAMPLES]) for r in chunk)
            if samples > 0.001 * total:
                executed = max(number(r[EXECUTED]) for r in chunk)
                print(f"{a:5d}-{a + step:5d} {samples:9.0f} {100 * samples / total:5.1f}%  max executions {executed:.0f}")
    elif mode == "dump":
        for i in range(int(argv[3]), min(int(argv[4]), len(rows))):
            r = rows[i]
            print(f"{i:5d} {number(r[SAMPLES]):7.0f} {number(r[EXECUTED]):9.0f}  "
                  f"{r['Source'].strip()[:80]:80s} {top_stalls(r, stalls, 1)}")
    elif mode == "insts":
        for span in argv[3:]:
            a, b = map(int, span.split(":"))
            executed = sum(number(r[EXECUTED]) for r in rows[a:b])
            samples = sum(number(r[SAMPLES]) for r in rows[a:b])
            print(f"{span:12s} {executed / 1e6:9.1f} M warp instructions, {samples:9.0f} samples")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
