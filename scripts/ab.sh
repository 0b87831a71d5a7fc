#!/usr/bin/env bash
# An A/B on a GPU machine: the tree this script lives in ("new") against a base tree ("old"),
# both built here, then ROUNDS interleaved rounds of each hfa-bench command on each build (old,
# new; new, old; old, new, ...: the order reversed every round, since the build timed second in a
# pair measured up to 3% faster on some rows, WORKLOG K7 session 48), so that clock and thermal
# drift fall on both sides alike. The log is what
# scripts/ab_summary.py reads ("== round R old|new LABEL" headers before hfa-bench's lines).
#
#   scripts/ab.sh pack REV FILE.tar.gz     (here, where git is) the base tree of revision REV as a
#                                          tarball to carry to the GPU machine (docs/results left out)
#   scripts/ab.sh run BASE LABEL "ARGS" [LABEL "ARGS"]...
#                                          (on the GPU machine) BASE: that tarball, or a source
#                                          folder; each LABEL's ARGS are hfa-bench's arguments, e.g.
#                                          default "bwd_sm90 --bwd --sweep --sweep-headdims 64,128 --iters 10"
#
# Environment: OUT (the log folder, default ./ab-out: $OUT/ab.txt), ROUNDS (default 2),
# HFA_HEAD_DIMS (default "64;128"), HFA_KERNELS (the kernel families to build, e.g. "k7;k8" or
# "none" for decode alone: CMakeLists.txt; default all; a base tree older than the option builds
# all), AB_TIMEOUT (seconds per hfa-bench run, default 120). Pass
# --check rows or tests separately: this times only. The summary follows the rounds in the log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,18p' "$0" >&2; exit 2; }

case "${1:-}" in
  pack)
    [ $# -eq 3 ] || usage
    git -C "$root" archive "$2" -- . ':!docs/results' ':!docs/*.png' | gzip >"$3" && echo "ab.sh: wrote $3 ($2)"
    ;;
  run)
    if [ $# -lt 4 ] || [ $(( ($# - 2) % 2 )) -ne 0 ]; then usage; fi
    base=$2
    shift 2
    out=${OUT:-$root/ab-out}
    rounds=${ROUNDS:-2}
    dims=${HFA_HEAD_DIMS:-64;128}
    kernels=${HFA_KERNELS:-}
    limit=${AB_TIMEOUT:-120}
    mkdir -p "$out"
    log="$out/ab.txt"
    exec >>"$log" 2>&1
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    old_src=/tmp/ab-old-src
    if [ -d "$base" ]; then
      old_src=$base
    else
      rm -rf "$old_src"
      mkdir -p "$old_src"
      if ! tar xzf "$base" -C "$old_src"; then echo "ab.sh: cannot unpack $base"; exit 1; fi
    fi
    # The base tree shares this tree's third_party (the CuTe headers scripts/setup.sh installed; a
    # GPU machine without the network needs them carried in).
    if [ ! -d "$root/third_party/cutlass" ]; then echo "ab.sh: no $root/third_party/cutlass (scripts/setup.sh)"; exit 1; fi
    [ -e "$old_src/third_party" ] || ln -sfn "$root/third_party" "$old_src/third_party"
    build() {  # $1 source, $2 build folder
      cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHFA_HEAD_DIMS="$dims" -DHFA_KERNELS="$kernels" -DHFA_BUILD_TESTS=OFF \
        -DHFA_BUILD_TORCH_OPS=OFF >"$2.log" 2>&1 && ninja -C "$2" -j "$(( $(nproc) / 2 ))" tools/hfa-bench/hfa-bench >>"$2.log" 2>&1
    }
    t0=$SECONDS
    build "$old_src" /tmp/ab-old & old_pid=$!
    build "$root" /tmp/ab-new & new_pid=$!
    wait $old_pid; old_rc=$?
    wait $new_pid; new_rc=$?
    echo "ab.sh: builds old rc $old_rc, new rc $new_rc at $((SECONDS - t0)) s"
    grep -hE "C751[0-9]|error:" /tmp/ab-old.log /tmp/ab-new.log | head
    [ $old_rc -eq 0 ] && [ $new_rc -eq 0 ] || exit 1
    args=("$@")
    for r in $(seq 1 "$rounds"); do
      for ((i = 0; i < ${#args[@]}; i += 2)); do
        sides="old new"
        [ $((r % 2)) -eq 0 ] && sides="new old"
        for side in $sides; do
          echo "== round $r $side ${args[i]}"
          # shellcheck disable=SC2086  # ARGS are hfa-bench's words
          LD_LIBRARY_PATH=/tmp/ab-$side timeout "$limit" /tmp/ab-$side/tools/hfa-bench/hfa-bench ${args[i + 1]} | grep -vE "^\[|^hfa-bench:"
        done
      done
    done
    echo "== summary ($((SECONDS - t0)) s)"
    python3 "$root/scripts/ab_summary.py" "$log"
    ;;
  *)
    usage
    ;;
esac
