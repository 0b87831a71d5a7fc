#!/usr/bin/env bash
# hfa next to its peers on this GPU, in one command.
#
#   scripts/bench.sh            the main job: hfa's production path ("auto": the forward the library
#                               picks) over the seeds' sweep (s = 512..16k, d = 64/128/256, causal
#                               0/1), checked against the fp64 reference (hfa-bench --check), then
#                               timed in one process next to cuDNN and torch's FLASH backend (FA2)
#                               through SDPA, FlashAttention-3 (when its fa3_fwd wheel is importable)
#                               and the cuBLAS GEMM ceiling: a progress line per configuration, the
#                               table with hfa / peer per configuration and geometric means, JSON and
#                               a PNG plot, and where they were written.
#   scripts/bench.sh k2 k6 ...  the sweep with --check for each named kernel (hfa-bench --list):
#                               the ladder, one JSON per kernel.
#
# Sets up and builds first (scripts/setup.sh, CMake into $HFA_BUILD_DIR, default build/), unless
# $HFA_BUILD_DIR already holds a working hfa-bench and HFA_NO_BUILD=1. Results go to docs/results/
# (or $HFA_RESULTS). The main job installs the Python binding (pip, against the torch already
# installed) when `import hfa` fails; without torch or a GPU it stops after saying why.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HFA_BUILD_DIR:-$root/build}
if [ "${HFA_NO_BUILD:-0}" != 1 ] || [ ! -x "$build/tools/hfa-bench/hfa-bench" ]; then
  "$root/scripts/setup.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" -j "${HFA_JOBS:-$(nproc)}"
fi
export LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}"
bench="$build/tools/hfa-bench/hfa-bench"
results=${HFA_RESULTS:-$root/docs/results}
mkdir -p "$results"
stamp=$(date -u +%Y%m%d-%H%M%S)
export HFA_COMMIT=${HFA_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}

if [ $# -gt 0 ]; then  # the named kernels of the ladder
  status=0
  for k in "$@"; do
    extra=()
    # k1 takes seconds per call at s = 16k (materialized S): median of 5 calls, not 30.
    [ "$k" = k1 ] && extra=(--iters 5 --warmup 1)
    "$bench" "$k" --sweep --check "${extra[@]}" --json "$results/sweep-$k-$stamp.json" || status=1
  done
  exit $status
fi

# The main job. 1: the production path over the sweep, checked (and timed by hfa-bench alone).
echo "bench: 1/2 hfa auto over the sweep with --check (hfa-bench)" >&2
check_json="$results/sweep-auto-$stamp.json"
"$bench" auto --sweep --check --json "$check_json"
# 2: the same sweep next to the peers, one process.
if ! python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "bench: no torch with CUDA in python3: the peers (step 2) need it; hfa's own results: $check_json" >&2
  exit 1
fi
if ! python3 -c "import hfa" 2>/dev/null; then
  echo "bench: installing the Python binding (pip, against $build)" >&2
  HFA_BUILD_DIR="$build" python3 -m pip install -q --no-deps --no-build-isolation "$root/python"
fi
peers=cudnn,torch_flash,cublas_gemm
if python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('fa3_fwd_interface') else 1)"; then
  peers=cudnn,torch_flash,fa3,cublas_gemm
else
  echo "bench: FlashAttention-3 (the fa3_fwd wheel) is not importable: no fa3 column" >&2
fi
echo "bench: 2/2 hfa auto next to $peers (python/bench_peers.py)" >&2
peers_json="$results/peers-auto-$stamp.json" plot="$results/peers-auto-$stamp.png"
(cd "$root/python" && python3 bench_peers.py --kernels auto --peers "$peers" --json "$peers_json" \
  --plot "$plot")
echo "bench: wrote $check_json (hfa-bench, checked), $peers_json and $plot (next to the peers)" >&2
