#!/usr/bin/env bash
# Installs what hfa needs to build and test on a Debian machine like CI's (no GPU needed):
#   Debian: cmake, ninja, GoogleTest, CLI11;  PyPI: the CUTLASS/CuTe 4.2.0 headers (nvidia-cutlass wheel).
# Idempotent: each step checks first and does nothing when already done.
# --cute-only: only the CuTe headers (what python/setup.py needs; no Debian packages, no sudo).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cutlass_version=4.2.0.0
cutlass_dest="$root/third_party/cutlass"
cute_only=0
[ "${1:-}" = "--cute-only" ] && cute_only=1

if [ $cute_only = 0 ]; then
  pkgs=()
  for pkg in cmake ninja-build libgtest-dev libcli11-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || pkgs+=("$pkg")
  done
  command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || pkgs+=(python3-pip)
  if [ ${#pkgs[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${pkgs[*]}"
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi

  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: error: nvcc (CUDA toolkit 13.0) not found; install the CUDA toolkit first" >&2
    exit 1
  fi
fi

stamp="$cutlass_dest/.version"
if [ "$(cat "$stamp" 2>/dev/null)" != "$cutlass_version" ]; then
  echo "setup: fetching CUTLASS/CuTe headers (nvidia-cutlass==$cutlass_version)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cutlass==$cutlass_version" -d "$tmp"
  # The two header trees out of the wheel (a zip), with Python's zipfile: no unzip needed.
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{tmp}/nvidia_cutlass-*.whl")[0]) as whl:
    whl.extractall(f"{tmp}/x", [n for n in whl.namelist()
                                if n.startswith(("cutlass_library/source/include/",
                                                 "cutlass_library/source/tools/util/include/"))])
PY
  rm -rf "$cutlass_dest"
  mkdir -p "$cutlass_dest"
  mv "$tmp/x/cutlass_library/source/include" "$cutlass_dest/include"
  mv "$tmp/x/cutlass_library/source/tools/util/include" "$cutlass_dest/util_include"
  echo "$cutlass_version" > "$stamp"
fi
echo "setup: ok (CuTe headers in $cutlass_dest)"
