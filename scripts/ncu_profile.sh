#!/usr/bin/env bash
# ncu profiles behind the WORKLOG's analyses, clocks left alone (--clock-control none: device
# METHOD.md). Usage: scripts/ncu_profile.sh decode|fp8|fp8-source|bwd|bwd-deterministic|bwd-source
#   decode: flash decode's kernels (32 query / 8 KV heads, d = 128, one new token) at batch 1 x 8k
#           keys (split + combine), batch 1 x 64k (one wave of long splits) and batch 64 x 16k (no
#           split, two waves) -> $OUT/ncu-decode.txt ("Flash decode", second pass)
#   fp8:    k7 and FlashAttention-3's FP8 forward on one problem (d = $FP8_HEADDIM, default 128,
#           s = $FP8_SEQLEN, default 16k, 2048 / d heads, batch 16k / s, non-causal; needs the
#           fa3_fwd wheel in .whl/) ->
#           $OUT/ncu-k7.txt and $OUT/ncu-fa3.txt (K7, "The profile next to FlashAttention-3's")
#   fp8-source: the same two kernels with ncu's source counters (warp-state samples per SASS
#           instruction) -> $OUT/src-k7.csv.gz and $OUT/src-fa3.csv.gz, for
#           scripts/ncu_source_summary.py (K7, fourth pass)
#   bwd:    bwd_sm90's main kernel and cuDNN's backward (torch SDPA) on one problem (d = 128,
#           s = 8k, 16 heads, batch 2, non-causal) -> $OUT/ncu-bwd.txt ("bwd_sm90")
#   bwd-deterministic: bwd_sm90's main kernel, default and deterministic mode, the same problem
#           -> $OUT/ncu-bwd-deterministic.txt ("bwd_sm90", session 34)
#   bwd-source: bwd_sm90's main kernel at d = 64 and 128 (s = 8k, 2048 / d heads, batch 2,
#           non-causal) with the source counters, the shared-memory tables and the tensor and XU pipes ->
#           $OUT/ncu-bwd-source-d<d>.txt and $OUT/src-bwd-d<d>.csv.gz (scripts/ncu_source_summary.py;
#           "bwd_sm90", session 35)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
build=${HFA_BUILD_DIR:-$root/build}
export LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}"
bench="$build/tools/hfa-bench/hfa-bench"
mkdir -p "$out"

case "${1:-}" in
  decode)
    sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
              --section Occupancy --section LaunchStats)
    for point in "1 8192" "1 65536" "64 16384"; do
      set -- $point
      echo "=== batch $1, seqlen_k $2 ===" >>"$out/ncu-decode.txt"
      ncu --clock-control none "${sections[@]}" --kernel-name regex:decode --launch-count 2 \
        "$bench" --decode --batch "$1" --seqlen-k "$2" --iters 1 --warmup 0 >>"$out/ncu-decode.txt" 2>&1
    done
    echo "ncu: wrote $out/ncu-decode.txt"
    ;;
  fp8 | fp8-source)
    sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
              --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy)
    [ "$1" = fp8-source ] && sections=(--section SpeedOfLight --section WarpStateStats --section SourceCounters
                                       --section InstructionStats --import-source no)
    mode=$1
    report() { [ "$mode" = fp8-source ] && echo "-f -o /tmp/ncu-$1"; }  # a report to export below
    d=${FP8_HEADDIM:-128}
    s=${FP8_SEQLEN:-16384}
    heads=$((2048 / d))
    batch=$((16384 / s))
    ncu --clock-control none "${sections[@]}" $(report k7) --kernel-name regex:k7 --launch-count 1 \
      "$bench" k7 --seqlen "$s" --headdim "$d" --batch "$batch" --heads "$heads" --iters 1 --warmup 0 \
      >"$out/ncu-k7.txt" 2>&1
    for w in "$root"/.whl/*.whl; do
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hfa-peers "$w"
    done
    cat >/tmp/fa3_once.py <<PY
import torch
from fa3_fwd_interface import flash_attn_func
q, k, v = ((torch.randn($batch, $s, $heads, $d, device="cuda") * 64).to(torch.float8_e4m3fn) for _ in range(3))
d = [torch.full(($batch, $heads), 1 / 64, device="cuda") for _ in range(3)]
flash_attn_func(q, k, v, q_descale=d[0], k_descale=d[1], v_descale=d[2])
torch.cuda.synchronize()
PY
    # FA3's kernel is cutlass's device_kernel<...FlashAttnFwdSm90...>: match the demangled name.
    PYTHONPATH=/tmp/hfa-peers ncu --clock-control none "${sections[@]}" $(report fa3) --kernel-name-base demangled \
      --kernel-name regex:"[Ff]lash" --launch-count 1 python3 /tmp/fa3_once.py >"$out/ncu-fa3.txt" 2>&1
    if [ "$mode" = fp8-source ]; then
      for w in k7 fa3; do
        ncu -i "/tmp/ncu-$w.ncu-rep" --page details >"$out/ncu-$w.txt" 2>&1
        ncu -i "/tmp/ncu-$w.ncu-rep" --page source --csv --print-source sass | gzip >"$out/src-$w.csv.gz"
      done
      echo "ncu: wrote $out/src-k7.csv.gz $out/src-fa3.csv.gz (scripts/ncu_source_summary.py)"
    fi
    echo "ncu: wrote $out/ncu-k7.txt $out/ncu-fa3.txt"
    ;;
  bwd)
    sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
              --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy)
    echo "=== bwd_sm90 ===" >"$out/ncu-bwd.txt"
    ncu --clock-control none "${sections[@]}" --kernel-name regex:bwd_sm90_kernel --launch-count 1 \
      "$bench" bwd_sm90 --bwd --seqlen 8192 --headdim 128 --batch 2 --heads 16 --iters 1 --warmup 0 \
      >>"$out/ncu-bwd.txt" 2>&1
    cat >/tmp/cudnn_bwd_once.py <<'PY'
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    F.scaled_dot_product_attention(q, k, v).backward(torch.randn_like(q))
torch.cuda.synchronize()
PY
    # cuDNN's backward kernels are named ...sdpa...bprop... (its forward fprop, not matched).
    echo "=== cudnn ===" >>"$out/ncu-bwd.txt"
    ncu --clock-control none "${sections[@]}" --kernel-name regex:"bprop|dgrad|bwd" --launch-count 3 \
      python3 /tmp/cudnn_bwd_once.py >>"$out/ncu-bwd.txt" 2>&1
    echo "ncu: wrote $out/ncu-bwd.txt"
    ;;
  bwd-deterministic)
    # bwd_sm90's main kernel in the default mode (fp32 dQ) and the deterministic one (int64
    # fixed-point dQ) on one problem, with the L2 reduction traffic and the pipes' use
    # (WORKLOG, "bwd_sm90", session 34).
    sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
              --section InstructionStats --section ComputeWorkloadAnalysis)
    metrics=lts__t_sectors_op_red.sum,lts__t_requests_op_red.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    for mode in "" --deterministic; do
      echo "=== bwd_sm90 ${mode:-default} ===" >>"$out/ncu-bwd-deterministic.txt"
      ncu --clock-control none "${sections[@]}" --metrics "$metrics" --kernel-name regex:bwd_sm90_kernel \
        --launch-count 1 "$bench" bwd_sm90 --bwd $mode --seqlen 8192 --headdim 128 --batch 2 --heads 16 \
        --iters 1 --warmup 0 >>"$out/ncu-bwd-deterministic.txt" 2>&1
    done
    echo "ncu: wrote $out/ncu-bwd-deterministic.txt"
    ;;
  bwd-source)
    sections=(--section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats
              --section MemoryWorkloadAnalysis_Tables --import-source no)
    metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
    for d in 64 128; do
      ncu --clock-control none "${sections[@]}" --metrics "$metrics" -f -o "/tmp/ncu-bwd-d$d" \
        --kernel-name regex:bwd_sm90_kernel --launch-count 1 "$bench" bwd_sm90 --bwd --seqlen 8192 \
        --headdim "$d" --batch 2 --heads $((2048 / d)) --iters 1 --warmup 0 >"$out/ncu-bwd-source-d$d.txt" 2>&1
      ncu -i "/tmp/ncu-bwd-d$d.ncu-rep" --page details >>"$out/ncu-bwd-source-d$d.txt" 2>&1
      ncu -i "/tmp/ncu-bwd-d$d.ncu-rep" --page source --csv --print-source sass | gzip >"$out/src-bwd-d$d.csv.gz"
    done
    echo "ncu: wrote $out/ncu-bwd-source-d{64,128}.txt $out/src-bwd-d{64,128}.csv.gz"
    ;;
  *)
    echo "usage: scripts/ncu_profile.sh decode|fp8|fp8-source|bwd|bwd-deterministic|bwd-source" >&2
    exit 2
    ;;
esac
