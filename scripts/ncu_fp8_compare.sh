#!/usr/bin/env bash
# ncu of k7 and of FlashAttention-3's FP8 forward on the same problem (d = 128, s = 16k, 16 heads,
# batch 1, non-causal): the profile behind the K7 chapter's "why it is still short". Needs the
# fa3_fwd wheel (.whl/) and ncu. Writes $OUT/ncu-k7.txt and $OUT/ncu-fa3.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
build=${HFA_BUILD_DIR:-$root/build}
export LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
          --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy)
ncu --clock-control none "${sections[@]}" --kernel-name regex:k7 --launch-count 1 \
  "$build/tools/hfa-bench/hfa-bench" k7 --seqlen 16384 --headdim 128 --batch 1 --heads 16 \
  --iters 1 --warmup 0 >"$out/ncu-k7.txt" 2>&1
for w in "$root"/.whl/*.whl; do
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hfa-peers "$w"
done
cat >/tmp/fa3_once.py <<'PY'
import torch
from fa3_fwd_interface import flash_attn_func
q, k, v = ((torch.randn(1, 16384, 16, 128, device="cuda") * 64).to(torch.float8_e4m3fn) for _ in range(3))
d = [torch.full((1, 16), 1 / 64, device="cuda") for _ in range(3)]
flash_attn_func(q, k, v, q_descale=d[0], k_descale=d[1], v_descale=d[2])
torch.cuda.synchronize()
PY
PYTHONPATH=/tmp/hfa-peers ncu --clock-control none "${sections[@]}" --kernel-name-base demangled --kernel-name regex:"[Ff]lash" --launch-count 1 \
  python3 /tmp/fa3_once.py >"$out/ncu-fa3.txt" 2>&1
echo "ncu: wrote $out/ncu-k7.txt $out/ncu-fa3.txt"
