#!/usr/bin/env bash
# Set up, build, and run the seeds' sweep with --check on the GPU for the given kernels
# (default: k1 k2). Writes the table to stdout and the JSON to docs/results/ (or $HFA_JSON).
# Usage: scripts/bench.sh [kernel ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HFA_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "${HFA_JOBS:-$(nproc)}"
kernels=("$@"); [ ${#kernels[@]} -gt 0 ] || kernels=(k1 k2)
json=${HFA_JSON:-$root/docs/results/sweep-$(date -u +%Y%m%d-%H%M%S).json}
HFA_COMMIT=${HFA_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)} \
  "$build/tools/hfa-bench/hfa-bench" "${kernels[@]}" --sweep --check --json "$json"
