#!/usr/bin/env bash
# HFA_KERNELS: a build of one kernel family (k1, d = 64, sm_90 only: the quickest) configures, links
# and lists only that family (and "auto"); a family name that does not exist, and a subset with the
# tests on, are refused at configure time by name.
# Usage: kernel_subset_test.sh SOURCE_DIR WORK_DIR CMAKE
set -u
src=$1 work=$2 cmake=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DHFA_HEAD_DIMS=64 -DHFA_GENERIC_ARCHS=90 -DHFA_BUILD_TESTS=OFF)

out=$("$cmake" -S "$src" -B "$work/bad" "${common[@]}" -DHFA_KERNELS=k9 2>&1) && fail "HFA_KERNELS=k9 configured"
grep -q "HFA_KERNELS: k9 is not one of" <<<"$out" || fail "no error naming k9: $out"
out=$("$cmake" -S "$src" -B "$work/tests" "${common[@]}" -DHFA_KERNELS=k1 -DHFA_BUILD_TESTS=ON 2>&1) \
  && fail "a subset with the tests on configured"
grep -q "has no tests; pass -DHFA_BUILD_TESTS=OFF" <<<"$out" || fail "no error naming the tests: $out"

"$cmake" -S "$src" -B "$work/k1" "${common[@]}" -DHFA_KERNELS=k1 >"$work/k1.log" 2>&1 \
  || fail "configure: $(tail -5 "$work/k1.log")"
"$cmake" --build "$work/k1" --target hfa-bench -j 2 >>"$work/k1.log" 2>&1 || fail "build: $(tail -20 "$work/k1.log")"
list=$(LD_LIBRARY_PATH="$work/k1" "$work/k1/tools/hfa-bench/hfa-bench" --list) || fail "--list exited non-zero"
kernels=$(grep -oE "^[a-z0-9_]+ " <<<"$list" | tr -d ' ' | tr '\n' ' ')
[ "$kernels" = "kernel k1 auto backward " ] || fail "--list shows: $kernels (expected k1 and auto, no backward kernel)"
rm -rf "$work"
echo "PASS: HFA_KERNELS=k1 builds and lists k1 alone; bad names and tests on are refused"
