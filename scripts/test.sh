#!/usr/bin/env bash
# Set up, build, and run the tests (CPU tests always; GPU tests run when a GPU is present and
# skip with a reason otherwise). Usage: scripts/test.sh [extra cmake args, e.g. -DHFA_HEAD_DIMS=128]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HFA_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
# Two compile jobs fit in 24 GB; more cores than that are used when present.
jobs=${HFA_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
