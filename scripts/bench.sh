#!/usr/bin/env bash
# Set up, build, and run the seeds' sweep with --check on the GPU, one kernel after the other
# (default: every kernel of `hfa-bench --list`; the whole ladder takes about 15 minutes on an H100).
# Tables go to stdout, one JSON per kernel to docs/results/ (or $HFA_RESULTS).
# Usage: scripts/bench.sh [kernel ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HFA_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "${HFA_JOBS:-$(nproc)}"
bench="$build/tools/hfa-bench/hfa-bench"
kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || mapfile -t kernels < <("$bench" --list | awk 'NR > 1 && /^[a-z0-9_]+ / && $1 != "auto" {print $1}')
results=${HFA_RESULTS:-$root/docs/results}
stamp=$(date -u +%Y%m%d-%H%M%S)
export HFA_COMMIT=${HFA_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
status=0
for k in "${kernels[@]}"; do
  extra=()
  # k1 takes seconds per call at s = 16k (materialized S): median of 5 calls, not 30.
  [ "$k" = k1 ] && extra=(--iters 5 --warmup 1)
  "$bench" "$k" --sweep --check "${extra[@]}" --json "$results/sweep-$k-$stamp.json" || status=1
done
exit $status
