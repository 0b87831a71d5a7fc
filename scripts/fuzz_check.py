#!/usr/bin/env python3
"""Random problems through `hfa-bench --check`: the forward ("auto", k6, fa2, and k7 / k8 on e4m3
inputs), the backward (default and deterministic), the score variants, variable-length batches and
flash decode (contiguous and paged caches, bf16 and e4m3, with the variants too), each against
the fp64 CPU reference.

The GPU test suite checks a fixed matrix; this draws shapes the matrix does not name (odd lengths
on either side of tile edges, sq != sk both ways, GQA ratios up to 16:1, windows, caps, sinks,
value distributions) so that a kernel is checked where nobody thought to look. Each problem is one
hfa-bench process with a seed from this script's --seed, so a failure reproduces from the command
it prints.

    scripts/fuzz_check.py --bench BUILD/tools/hfa-bench/hfa-bench [--count N] [--seed S]
                          [--jobs J] [--budget-s T] [--log FILE]
    scripts/fuzz_check.py --dry-run --count 5      # the commands only (no GPU needed)
    scripts/fuzz_check.py --self-test              # the generator's coverage and the verdicts (ctest)

A row is PASS or FAIL by hfa-bench's check; "not run: unsupported: ..." (an argument a kernel
refuses by name) counts as refused, any other "not run" as an error. Exit status 1 if any problem
FAILed or errored, else 0.
"""
import argparse
import concurrent.futures
import random
import subprocess
import sys
import time

LENGTHS = [1, 2, 17, 63, 64, 65, 127, 128, 129, 191, 200, 255, 256, 257, 500, 777, 1024, 1500,
           2049, 3000]
VALUES = ["normal"] * 4 + ["wide", "uniform", "outliers", "ramp", "positive-v"]


def heads(rng, cap=32):
    hkv = rng.choice([1, 1, 2, 3, 4, 8])
    group = rng.choice([1, 2, 3, 4, 6, 8, 16])
    while hkv * group > cap:
        group //= 2
    return hkv * max(group, 1), hkv


def variants(rng, args):
    if rng.random() < 0.25:  # with causal, window_right is -1 or 0 (validate.cpp: anything else is an error)
        rights = [-1, 0] if "--causal" in args else [-1, 0, 5, 64, 200]
        args += ["--window", str(rng.choice([-1, 0, 1, 17, 100, 300, 1000])), str(rng.choice(rights))]
    if rng.random() < 0.2:
        args += ["--softcap", str(rng.choice([5, 30, 50]))]
    if rng.random() < 0.2:
        args += ["--sinks"]


def shape(rng, args, dims=(64, 128, 256), lengths=LENGTHS, max_heads=32):
    sq = rng.choice(lengths)
    sk = sq if rng.random() < 0.5 else rng.choice(lengths)
    hq, hkv = heads(rng, max_heads)
    args += ["--headdim", str(rng.choice(dims)), "--batch", str(rng.randint(1, 3)),
             "--seqlen", str(sq), "--seqlen-k", str(sk), "--heads", str(hq), "--heads-kv", str(hkv)]
    if rng.random() < 0.5:
        args += ["--causal"]


def forward(rng):
    if rng.random() < 0.2:  # e4m3: k7, k8 or auto; no variants, no varlen (refused by name)
        args = [rng.choice(["k7", "k8", "auto"]), "--dtype", "e4m3"]
        shape(rng, args)
        if rng.random() < 0.3:
            args += ["--out-dtype", "fp16"]
        return args + ["--values", rng.choice(VALUES), "--check-rows", "96"]
    kernel = rng.choice(["auto", "auto", "k6", "fa2"])
    args = [kernel, "--dtype", rng.choice(["bf16", "fp16"])]
    if rng.random() < 0.15:
        lo = rng.choice([1, 50, 100])
        args += ["--varlen", str(rng.randint(300, 3000)), "--varlen-range", str(lo),
                 str(rng.randint(lo + 1, 1200)), "--headdim", str(rng.choice([64, 128, 256]))]
        hq, hkv = heads(rng)
        args += ["--heads", str(hq), "--heads-kv", str(hkv)]
        if rng.random() < 0.5:
            args += ["--causal"]
    else:
        shape(rng, args)
    variants(rng, args)
    return args + ["--values", rng.choice(VALUES), "--check-rows", "96"]


def backward(rng):
    args = [rng.choice(["auto", "auto", "fa2"]), "--bwd", "--dtype", rng.choice(["bf16", "fp16"])]
    if rng.random() < 0.3:
        args += ["--deterministic"]
    # The fp64 backward reference of a group costs sq x sk x group heads x d: up to 1500 keys and
    # 16 heads keep each problem's check within seconds (3000 x 3000 x 16 heads took over 60 s).
    shape(rng, args, lengths=[n for n in LENGTHS if n <= 1500], max_heads=16)
    variants(rng, args)
    return args + ["--values", rng.choice(VALUES), "--check-groups", "2"]


def decode(rng):
    hq, hkv = rng.choice([(32, 8), (32, 4), (16, 16), (8, 1), (24, 8), (32, 2)])
    args = ["--decode", "--headdim", str(rng.choice([64, 128, 256])), "--batch", str(rng.randint(1, 5)),
            "--seqlen", str(rng.choice([1, 1, 2, 3, 4, 7, 16])),
            "--seqlen-k", str(rng.choice([1, 5, 64, 65, 300, 1000, 4097, 9000, 20000])),
            "--heads", str(hq), "--heads-kv", str(hkv),
            "--page-size", str(rng.choice([0, 0, 16, 32, 64, 256])),
            "--num-splits", str(rng.choice([0, 0, 1, 3, 17])), "--check-rows", "64"]
    if rng.random() < 0.3:
        args += ["--kv-dtype", "e4m3"]
    if rng.random() < 0.4:
        args += ["--causal"]
    if rng.random() < 0.3:
        args += ["--dtype", "fp16"]
    variants(rng, args)  # (after --causal: it bounds window_right)
    return args


def problems(seed, count):
    rng = random.Random(seed)
    for i in range(count):
        r = rng.random()
        args = forward(rng) if r < 0.55 else backward(rng) if r < 0.8 else decode(rng)
        yield i, args + ["--check", "--iters", "1", "--warmup", "0", "--seed", str(rng.randrange(1 << 31))]


def classify(out, returncode=0):
    """FAIL, refused, error or PASS from hfa-bench's rows; a process that exits non-zero with only
    PASS rows (a crash after the check, a CUDA error) is an error."""
    rows = [l for l in out.splitlines() if " PASS " in f" {l} " or " FAIL" in l or "not run:" in l]
    if any(" FAIL" in l for l in rows):
        return "FAIL"
    if any("not run: unsupported" in l for l in rows):
        return "refused"
    if any("not run:" in l for l in rows) or not rows or returncode != 0:
        return "error"
    return "PASS"


def self_test():
    """The generator covers every path it is meant to and repeats itself for a seed; the verdicts
    of fixed hfa-bench outputs are what they should be."""
    cmds = [" ".join(args) for _, args in problems(7, 600)]
    assert cmds == [" ".join(args) for _, args in problems(7, 600)], "same seed, same problems"
    assert cmds != [" ".join(args) for _, args in problems(8, 600)], "another seed, other problems"
    wanted = {"k6 ": "k6", "fa2 ": "fa2", "k7 --dtype e4m3": "k7", "k8 --dtype e4m3": "k8",
              "--varlen ": "varlen", "--bwd": "backward", "--deterministic": "deterministic",
              "--window": "window", "--softcap": "softcap", "--sinks": "sinks",
              "--decode": "decode", "--kv-dtype e4m3": "e4m3 cache", "--page-size 16": "pages",
              "--values uniform": "uniform values", "--causal": "causal", "--headdim 256": "d = 256"}
    for needle, what in wanted.items():
        assert any(needle in c for c in cmds), f"no problem with {what}"
    for flag in ("--window", "--softcap", "--sinks"):
        assert any("--decode" in c and flag in c for c in cmds), f"no decode problem with {flag}"
    for values in ("uniform", "outliers", "ramp"):  # the FP8 check covers every distribution (session 54)
        assert any("--dtype e4m3" in c and f"--values {values}" in c for c in cmds), f"no e4m3 problem on {values}"
    for flag in ("--window", "--softcap", "--sinks"):
        for mode in ("", "--bwd"):
            assert any(c.startswith("fa2 ") and flag in c and mode in c for c in cmds), f"no fa2 {mode} problem with {flag}"
    for c in cmds:
        if "--bwd" in c:
            assert int(c.split("--seqlen ")[1].split()[0]) <= 1500 and int(c.split("--heads ")[1].split()[0]) <= 16
        if "--causal" in c and "--window" in c:
            assert c.split("--window ")[1].split()[1] in ("-1", "0"), "causal: window_right -1 or 0"
    assert not any("e4m3" in c and ("--window" in c or "--softcap" in c or "--varlen" in c)
                   for c in cmds if "--decode" not in c), "e4m3 inputs take no variants"
    row = "auto     bf16   128      1    257     63     2    6    1     0.0312    10.00  "
    assert classify(row + "PASS  1.00e-03  1.00e-03") == "PASS"
    assert classify(row + "PASS  1.00e-03  1.00e-03", returncode=139) == "error"
    assert classify(row + "FAIL  1.00e-01  1.00e-01\n    O: max error") == "FAIL"
    assert classify("k7       e4m3   128      0    257     63     2    6    1  not run: unsupported: "
                    "window_left: kernel k7 does not support windows") == "refused"
    assert classify("auto     bf16   128      0    257     63     2    6    1  not run: internal: x") == "error"
    assert classify("hfa-bench: no CUDA GPU available") == "error"
    print("fuzz_check.py self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", help="the hfa-bench binary")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=420, help="stop starting problems after this long")
    ap.add_argument("--timeout-s", type=float, default=120, help="per problem")
    ap.add_argument("--log", help="every problem's command and output")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--self-test", action="store_true", help="check the generator and the verdicts")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.count < 1 or a.jobs < 1:
        sys.exit("fuzz_check.py: --count and --jobs must be at least 1")
    if a.dry_run:
        for i, args in problems(a.seed, a.count):
            print(" ".join(["hfa-bench"] + args))
        return 0
    if not a.bench:
        sys.exit("fuzz_check.py: --bench is required (or --dry-run)")
    t0 = time.time()
    log = open(a.log, "w") if a.log else None
    counts, bad = {}, []

    def run(item):
        i, args = item
        if time.time() - t0 > a.budget_s:
            return i, args, "not started", ""
        try:
            p = subprocess.run([a.bench] + args, capture_output=True, text=True, timeout=a.timeout_s)
            out = p.stdout + p.stderr
            return i, args, classify(out, p.returncode), out
        except subprocess.TimeoutExpired:
            return i, args, "timeout", ""

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for i, args, verdict, out in pool.map(run, problems(a.seed, a.count)):
            counts[verdict] = counts.get(verdict, 0) + 1
            cmd = " ".join(["hfa-bench"] + args)
            if log:
                log.write(f"== {i} {verdict}: {cmd}\n{out}\n")
            if verdict in ("FAIL", "error", "timeout"):
                bad.append(cmd)
                print(f"{verdict}: {cmd}", flush=True)
    print(f"fuzz_check: {sum(counts.values())} problems, seed {a.seed}, {time.time() - t0:.0f} s: " +
          ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
