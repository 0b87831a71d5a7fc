#!/usr/bin/env bash
# Per kernel function in a binary: how many HGMMA (WGMMA), UTMALDG (TMA loads), SYNCS (mbarrier),
# BAR, and LDL/STL (local memory: must be 0 in hot loops) instructions its sm_90a SASS has.
# Usage: scripts/sass_report.sh build/libhfa.so   (needs cuobjdump + nvdisasm, e.g. on the GPU box)
set -euo pipefail
cuobjdump -sass "$1" | awk '
  /Function : / { name = $3; next }
  name != "" && /\/\*[0-9a-f]+\*\// {
    if ($0 ~ /HGMMA/) hg[name]++
    if ($0 ~ /UTMALDG/) tma[name]++
    if ($0 ~ /SYNCS/) sy[name]++
    if ($0 ~ / LDL/ || $0 ~ / STL/) loc[name]++
    if ($0 ~ / BAR/) bar[name]++
    seen[name] = 1
  }
  END {
    printf "%-8s %-8s %-6s %-5s %-8s %s\n", "HGMMA", "UTMALDG", "SYNCS", "BAR", "LDL/STL", "function"
    for (n in seen) printf "%-8d %-8d %-6d %-5d %-8d %s\n", hg[n], tma[n], sy[n], bar[n], loc[n], n
  }' | sort -k6 | c++filt | cut -c1-160
# ptxas 13.0 once encoded cp.async (LDGSTS) with a uniform register in the shared address and an
# uninitialized descriptor register, which the H100 rejects as an illegal instruction (the e4m3
# decode kernel, src/kernels/decode/decode_kernel.cuh). No LDGSTS of ours takes that form now.
if cuobjdump -sass "$1" | grep -E 'LDGSTS[^;]*\[R[0-9]+\+UR[0-9]+'; then
  echo "sass_report: LDGSTS with a uniform register in its shared address (see above)" >&2
  exit 1
fi
