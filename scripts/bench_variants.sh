#!/usr/bin/env bash
# Issue 22's measurements of the score variants, on one GPU in one run (JSON per step in $OUT_DIR):
#   dense_ab      k6 over the d = 128 sweep, this build against a build of the commit before the
#                 variants (BASE_BENCH, optional), interleaved twice: the dense path must not slow
#   softcap       the sweep with --softcap 50 beside the plain sweep (target >= 0.95x)
#   sinks         the d = 128 sweep with --sinks
#   window        s = 16k, a causal sliding window of 4096 keys beside dense causal and
#                 non-causal attention (TFLOPS count only the visible scores; target: time <= 1.1x
#                 that of dense attention over as many scores, i.e. TFLOPS >= 0.91x dense's)
#   backward      bwd_sm90 at d = 128, s = 4k and 16k: plain, causal window 1024, softcap 50, sinks
# Usage: HFA_BENCH=build/tools/hfa-bench/hfa-bench [BASE_BENCH=<old hfa-bench> BASE_LIB=<its dir>]
#        OUT_DIR=results scripts/bench_variants.sh
set -euo pipefail
bench=${HFA_BENCH:-build/tools/hfa-bench/hfa-bench}
out=${OUT_DIR:-results}
mkdir -p "$out"
run() { local name=$1; shift; echo "== $name: $*" >&2; "$bench" "$@" --json "$out/$name.json" > "$out/$name.txt"; }

if [[ -n "${BASE_BENCH:-}" ]]; then
  for round in 1 2; do
    run "dense_new_$round" k6 --sweep --sweep-headdims 128
    echo "== dense_base_$round" >&2
    LD_LIBRARY_PATH=${BASE_LIB:-} "$BASE_BENCH" k6 --sweep --sweep-headdims 128 --json "$out/dense_base_$round.json" > "$out/dense_base_$round.txt"
  done
fi
run plain auto --sweep
run softcap auto --sweep --softcap 50
run sinks auto --sweep --sweep-headdims 128 --sinks
for d in 64 128 256; do
  h=$((2048 / d))
  run "window_dense_d$d" auto --seqlen 16384 --batch 1 --heads "$h" --headdim "$d"
  run "window_causal_d$d" auto --seqlen 16384 --batch 1 --heads "$h" --headdim "$d" --causal
  run "window_4096_d$d" auto --seqlen 16384 --batch 1 --heads "$h" --headdim "$d" --window 4096,0 --check
done
for s in 4096 16384; do
  b=$((16384 / s))
  run "bwd_plain_s$s" auto --bwd --seqlen "$s" --batch "$b" --heads 16 --headdim 128 --causal
  run "bwd_window_s$s" auto --bwd --seqlen "$s" --batch "$b" --heads 16 --headdim 128 --window 1024,0 --check --check-groups 2
  run "bwd_softcap_s$s" auto --bwd --seqlen "$s" --batch "$b" --heads 16 --headdim 128 --causal --softcap 50 --check --check-groups 2
  run "bwd_sinks_s$s" auto --bwd --seqlen "$s" --batch "$b" --heads 16 --headdim 128 --causal --sinks
done
echo "bench_variants: wrote $out" >&2
