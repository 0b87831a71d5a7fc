#!/usr/bin/env python3
"""Summarize an A/B log of hfa-bench runs: new / old TFLOPS (decode: GB/s) per configuration and
geometric means.

The log (scripts/ab.sh writes it) holds blocks that start with a header line

  == round R old|new LABEL        (or "== old|new LABEL" for a single round)

followed by hfa-bench's result lines (kernel dtype d causal sq sk batch hq hkv ms TFLOPS ...; for
--decode: kernel dtype d page "sq" N "sk" N "b" N "hq" N "hkv" N ms "ms" GB/s "GB/s" ...).
Rows are keyed by (LABEL, kernel, dtype, d, causal or page, sq, sk, batch, hq, hkv); a configuration's
value on each side is the median over its rounds; a configuration only one side has is listed
apart, never compared.

  ab_summary.py LOG [LOG ...]     per LABEL: each configuration's old, new and new / old, then
                                  the geometric mean of new / old per head dim and over all
  ab_summary.py --self-test       checks the parser and the arithmetic on a made-up log
"""
import collections
import math
import re
import statistics
import sys

HEADER = re.compile(r"^== (?:round (\d+) )?(old|new) (\S+)")
TFLOPS_COLUMN = 10  # hfa-bench: kernel dtype d causal sq sk batch hq hkv ms TFLOPS check ...


def parse(lines):
    """{label: {config: {"old": [tflops...], "new": [...]}}} from the log's lines."""
    data = collections.defaultdict(lambda: collections.defaultdict(lambda: {"old": [], "new": []}))
    side = label = None
    for line in lines:
        m = HEADER.match(line)
        if m:
            side, label = m.group(2), m.group(3)
            continue
        if line.startswith("==") or line.startswith("["):  # other headers, hfa-bench's progress
            side = None if line.startswith("==") else side
            continue
        f = line.split()
        if side is None or len(f) <= TFLOPS_COLUMN:
            continue
        decode = f[4] == "sq" and "GB/s" in f
        try:
            # A decode row's words after the page size come in (name, value) pairs.
            key = tuple(f[:4] + f[5:14:2]) if decode else tuple(f[:9])
            value = float(f[f.index("GB/s") - 1]) if decode else float(f[TFLOPS_COLUMN])
            int(f[2])  # d: a result line, not prose
        except ValueError:
            continue
        data[label][key][side].append(value)
    return data


def describe(key):
    """A configuration's key in words (decode rows: page 0 is the contiguous cache)."""
    if key[0].startswith("decode"):
        return f"{key[0]} d={key[2]} page={key[3]} sq={key[4]} sk={key[5]} b={key[6]} heads={key[7]}/{key[8]}"
    return f"{key[0]} d={key[2]} causal={key[3]} sq={key[4]} sk={key[5]}"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarize(data):
    """Lines of text, and {label: (geomean over all, {d: geomean})}."""
    out, means = [], {}
    for label, configs in data.items():
        out.append(f"{label}:")
        ratios, by_d, one_sided = [], collections.defaultdict(list), []
        for key, sides in configs.items():
            if not sides["old"] or not sides["new"]:
                one_sided.append(key)
                continue
            old, new = statistics.median(sides["old"]), statistics.median(sides["new"])
            r = new / old
            ratios.append(r)
            by_d[int(key[2])].append(r)
            out.append(f"  {describe(key)}: "
                       f"old {old:.1f} new {new:.1f}  {r:.3f}  (rounds {len(sides['old'])}/{len(sides['new'])})")
        per_d = {d: geomean(rs) for d, rs in sorted(by_d.items())}
        means[label] = (geomean(ratios), per_d)
        out.append("  new / old: " + ", ".join(f"d = {d} {g:.3f}x" for d, g in per_d.items()) +
                   f"; all {geomean(ratios):.4f}x over {len(ratios)} configurations")
        for key in one_sided:
            out.append(f"  only one side: {' '.join(key)}")
    return out, means


def self_test():
    log = """== round 1 old default
[1/2] bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   100.00  -  0 0
bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   100.00  -  0 0
bwd_sm90 bf16   128      1   1024   1024    16   16   16     0.5   200.00  -  0 0
== round 1 new default
bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   110.00  -  0 0
bwd_sm90 bf16   128      1   1024   1024    16   16   16     0.5   180.00  -  0 0
== round 2 old default
bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   120.00  -  0 0
bwd_sm90 bf16   128      1   1024   1024    16   16   16     0.5   200.00  -  0 0
== round 2 new default
bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   110.00  -  0 0
bwd_sm90 bf16   128      1   1024   1024    16   16   16     0.5   180.00  -  0 0
== checks done at 10 s
bwd_sm90 bf16    64      0    512    512    32   32   32     0.5   999.00  -  0 0
== old deterministic
bwd_sm90_deterministic bf16    64      0    512    512    32   32   32     0.5    50.00  -  0 0
== new deterministic
bwd_sm90_deterministic bf16    64      0    512    512    32   32   32     0.5    75.00  -  0 0
bwd_sm90_deterministic bf16    64      0   2048   2048     8   32   32     0.5    75.00  -  0 0
== round 1 old dec
[1/2] decode_paged_e4m3 bf16   128  64 sq  1 sk  16384 b   64 hq  32 hkv   8     0.8000 ms  2000.0 GB/s splits   3 host 11.9 us  -  0.00e+00
decode_paged_e4m3 bf16   128  64 sq  1 sk  16384 b   64 hq  32 hkv   8     0.8000 ms  2000.0 GB/s splits   3 host 11.9 us  -  0.00e+00
decode_e4m3       bf16   128   0 sq  1 sk  16384 b   64 hq  32 hkv   8     0.7000 ms  2800.0 GB/s splits   1 host 5.0 us  -  0.00e+00
== round 1 new dec
decode_paged_e4m3 bf16   128  64 sq  1 sk  16384 b   64 hq  32 hkv   8     0.7000 ms  2400.0 GB/s splits   1 host 11.9 us  -  0.00e+00
decode_e4m3       bf16   128   0 sq  1 sk  16384 b   64 hq  32 hkv   8     0.7000 ms  2800.0 GB/s splits   1 host 5.0 us  -  0.00e+00
"""
    data = parse(log.splitlines())
    _, means = summarize(data)
    # d = 64: old median(100, 120) = 110, new 110 -> 1.0; d = 128: 180 / 200 = 0.9.
    # The line after "== checks done" belongs to no side and must not count.
    expect_all = math.sqrt(1.0 * 0.9)
    assert abs(means["default"][0] - expect_all) < 1e-12, means
    assert abs(means["default"][1][64] - 1.0) < 1e-12 and abs(means["default"][1][128] - 0.9) < 1e-12, means
    # The deterministic block: one compared configuration (1.5x), one new-only configuration.
    assert abs(means["deterministic"][0] - 1.5) < 1e-12, means
    assert len(data["deterministic"]) == 2
    # Decode rows compare GB/s, keyed with the page size: 2400 / 2000 and 2800 / 2800.
    assert len(data["dec"]) == 2, data["dec"]
    assert abs(means["dec"][0] - math.sqrt(1.2)) < 1e-12, means
    print("ab_summary.py: self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    lines = []
    for path in argv[1:]:
        with open(path) as f:
            lines += f.read().splitlines()
    out, _ = summarize(parse(lines))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
