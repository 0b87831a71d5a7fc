#!/usr/bin/env bash
# ncu of flash decode's kernels on the issue's problem points (32 query / 8 KV heads, d = 128, one
# new token): batch 1 x 8k keys (split + combine), batch 1 x 64k (one wave of long splits) and
# batch 64 x 16k (no split, two waves): the profile behind the WORKLOG's "Flash decode" chapter.
# Writes $OUT/ncu-decode.txt. Clocks are left alone (--clock-control none: device METHOD.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
build=${HFA_BUILD_DIR:-$root/build}
export LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
          --section Occupancy --section LaunchStats)
for point in "1 8192" "1 65536" "64 16384"; do
  set -- $point
  echo "=== batch $1, seqlen_k $2 ===" >>"$out/ncu-decode.txt"
  ncu --clock-control none "${sections[@]}" --kernel-name regex:decode --launch-count 2 \
    "$build/tools/hfa-bench/hfa-bench" --decode --batch "$1" --seqlen-k "$2" --iters 1 --warmup 0 \
    >>"$out/ncu-decode.txt" 2>&1
done
echo "ncu: wrote $out/ncu-decode.txt"
