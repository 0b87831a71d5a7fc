#!/usr/bin/env bash
# The whole GPU verification in one call, for the lent H100 (or any GPU machine):
#   1. GPU tests (every kernel over the test matrix), CPU tests, the hfa-bench CLI test; then
#      (step "fuzz") scripts/fuzz_check.py's random problems through hfa-bench --check
#   2. compute-sanitizer memcheck, racecheck and synccheck on each kernel in $SANITIZE_KERNELS
#   3. the seeds' sweep with --check for each kernel in $SWEEP_KERNELS, JSON under $OUT
#   4. the torch binding: pip install (one command), its pytest suite
#   5. python/bench_peers.py: $PEER_KERNELS next to cuDNN, torch's FA2 and the cuBLAS GEMM
#      (step "peers"), and the backward of $PEER_BWD_KERNELS next to theirs (step "peers-bwd");
#      python/bench_fp8_peers.py: FlashAttention-3's FP8 forward and the FP8 GEMM next to the k7
#      and k8 sweeps (step "peers-fp8"); python/fp8_accuracy.py, the FP8 RMSE study (step
#      "fp8-accuracy", after "python")
#   6. flash decode: its sanitizer runs (step "decode-sanitize") and hfa-bench --decode's sweep
#      next to cuDNN, torch's FLASH backend and FlashAttention-3 (step "decode"); with windows,
#      softcap and sinks next to FlashAttention-3 (step "decode-variants")
#   7. context parallelism on 2+ GPUs: python/bench_cp.py (step "cp"; the ring's tests are in the
#      "python" step's suite, skipped with the reason on one GPU)
# Logs go to $OUT (default ./gpu-check-out) as few files (the device tool returns at most 8):
# summary.txt, steps.log, tables.txt, sweep-<kernel>.json, peers.json, peers.png, peers-bwd.json.
# Builds first unless $HFA_BUILD_DIR already holds working binaries (carried builds).
#
# Environment: OUT, HFA_BUILD_DIR (default build), HFA_COMMIT (recorded in the JSON),
#   STEPS (default "sass tests fuzz sanitize sweep python peers"; also "peers-bwd"),
#   SANITIZE_KERNELS (default: all, and quantize_fp8 through its GPU tests; kernels in
#     $BWD_KERNELS are sanitized with --bwd too),
#   PEER_KERNELS (default "k2,k1"), PEER_ARGS (extra bench_peers.py args),
#   SWEEP_KERNELS (default "k2 k1"), SWEEP_ARGS_<kernel> (extra hfa-bench args for that kernel's sweep),
#   BWD_KERNELS (default "fa2 bwd_sm90": backward kernels, swept with --bwd too), PEER_BWD_KERNELS
#     (default "bwd_sm90,fa2").
# k1 is timed with 5 iterations: it takes seconds per call at s=16k (materialized S), and 35
# calls x 36 configurations would not fit a 10-minute device call.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
build=${HFA_BUILD_DIR:-$root/build}
steps=${STEPS:-sass tests fuzz sanitize sweep python peers}
mkdir -p "$out"
export LD_LIBRARY_PATH="$build:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export HFA_COMMIT=${HFA_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
bench="$build/tools/hfa-bench/hfa-bench"
bwd_only_kernels="bwd_sm90"  # backward kernels with no forward of that name
summary="$out/summary.txt"
steps_log="$out/steps.log"
failed=0

note() { echo "$*" | tee -a "$summary"; }
# step NAME CMD...: runs CMD with its output appended to steps.log; one line in the summary.
step() {
  local name=$1; shift
  local t0=$SECONDS
  echo "===== $name: $*" >>"$steps_log"
  if "$@" >>"$steps_log" 2>&1; then
    note "PASS  $name ($((SECONDS - t0)) s)"
  else
    note "FAIL  $name (exit $?, $((SECONDS - t0)) s): see steps.log"
    failed=1
  fi
}

# The peers that travel as wheels (.whl/: fa3_fwd; .whl-cudnn/: nvidia-cudnn-frontend), into
# /tmp/hfa-peers on PYTHONPATH.
install_peer_wheels() {
  for w in "$root"/.whl/*.whl "$root"/.whl-cudnn/*.whl; do
    [ -f "$w" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hfa-peers "$w" \
      && export PYTHONPATH=/tmp/hfa-peers:${PYTHONPATH:-}
  done
}

note "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $HFA_COMMIT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee -a "$summary" || note "nvidia-smi failed"

if ! "$build/tests/hfa_gpu_tests" --gtest_list_tests >/dev/null 2>&1; then
  note "no usable binaries in $build: building"
  step build bash -c "'$root/scripts/setup.sh' && cmake -S '$root' -B '$build' -G Ninja \
    -DCMAKE_BUILD_TYPE=Release && cmake --build '$build' -j $(nproc)"
fi

if [[ " $steps " == *" sass "* ]]; then
  step sass "$root/scripts/sass_report.sh" "$build/libhfa.so"
  grep -E "HGMMA|k[34]" "$steps_log" | tail -40 >>"$summary" || true
fi

if [[ " $steps " == *" tests "* ]]; then
  step gpu-tests "$build/tests/hfa_gpu_tests"
  # fa2's small-smem shapes (for GPUs with less shared memory per block than the H100), forced.
  step gpu-tests-fa2-small-smem env HFA_FA2_SMALL_SMEM=1 "$build/tests/hfa_gpu_tests" \
    --gtest_filter='*fa2*'
  step cpu-tests "$build/tests/hfa_cpu_tests"
  step cli-test "$root/tests/cli_test.sh" "$bench"
fi

if [[ " $steps " == *" fuzz "* ]]; then
  # Random problems the matrix does not name, each against the fp64 reference (FUZZ_SEED,
  # FUZZ_COUNT; the log of every problem in fuzz.txt).
  step fuzz python3 "$root/scripts/fuzz_check.py" --bench "$bench" --seed "${FUZZ_SEED:-1}" \
    --count "${FUZZ_COUNT:-400}" --jobs 4 --budget-s 300 --log "$out/fuzz.txt"
  grep "fuzz_check:" "$steps_log" | tail -1 >>"$summary" || true
fi

if [[ " $steps " == *" sanitize "* ]]; then
  # Small shapes that still cover ragged tiles, seqlen_q != seqlen_k, GQA and causal.
  for tool in memcheck racecheck synccheck; do
    for kernel in ${SANITIZE_KERNELS:-k1 k2 fa2 k3_1 k3_2 k3_3 k4_qk k4 k5 k6 k6_no_pingpong k6_no_overlap k7 k8 bwd_sm90}; do
      [ "$kernel" = quantize_fp8 ] && continue  # not a forward kernel: its own step below
      passes=("")
      [[ " ${BWD_KERNELS:-fa2 bwd_sm90} " == *" $kernel "* ]] && passes+=("--bwd")
      [[ " $bwd_only_kernels " == *" $kernel "* ]] && passes=("--bwd")
      for d in 64 256; do
        # 5 stages of d = 256 tiles do not fit shared memory: k3_3 has no d = 256 (it says so);
        # bwd_sm90 has no d = 256 shape (fa2 runs it).
        [ "$kernel" = k3_3 ] || [ "$kernel" = bwd_sm90 ] && [ "$d" = 256 ] && d=128
        for pass in "${passes[@]}"; do
          # shellcheck disable=SC2086
          step "sanitize-$tool-$kernel-d$d$pass" compute-sanitizer --tool "$tool" --error-exitcode 3 \
            "$bench" "$kernel" $pass --seqlen 130 --seqlen-k 200 --headdim "$d" --batch 1 --heads 4 \
            --heads-kv 2 --causal --check --iters 1 --warmup 0
        done
      done
      # Persistent kernels (k6, k7): more tiles than SMs, so each CTA reuses its Q buffer and K/V ring
      # across tiles of different lengths (5 x 80 = 400 tiles).
      if [[ $kernel == k6* || $kernel == k7 || $kernel == k8 ]]; then
        step "sanitize-$tool-$kernel-many-tiles" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          "$bench" "$kernel" --seqlen 600 --seqlen-k 700 --headdim 128 --batch 2 --heads 40 \
          --heads-kv 8 --causal --check --check-rows 256 --iters 1 --warmup 0
        # d = 64, seqlen_q >= 8192: k6's 192-row tiles with three consumer warpgroups
        # (k6_launch.h, wide_q_tile); rows past seqlen_q, a masked last KV tile, and (causal)
        # tiles that see no key.
        for causal in "" "--causal"; do
          step "sanitize-$tool-$kernel-wide-tiles$causal" compute-sanitizer --tool "$tool" \
            --error-exitcode 3 "$bench" "$kernel" --seqlen 8200 --seqlen-k 300 --headdim 64 \
            --batch 1 --heads 2 --heads-kv 1 $causal --check --check-rows 256 --iters 1 --warmup 0
        done
      fi
    done
    # quantize_fp8's passes (and the k7/k8 forward of their outputs): its GPU tests.
    if [[ " ${SANITIZE_KERNELS:-quantize_fp8} " == *" quantize_fp8 "* ]]; then
      step "sanitize-$tool-quantize_fp8" compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$build/tests/hfa_gpu_tests" --gtest_filter='*QuantizeFp8*'
    fi
  done
fi

if [[ " $steps " == *" sweep "* ]]; then
  : "${SWEEP_ARGS_k1=--iters 5 --warmup 1}"
  for kernel in ${SWEEP_KERNELS:-k2 k1}; do
    args_var="SWEEP_ARGS_$kernel"
    [[ " $bwd_only_kernels " == *" $kernel "* ]] || step "sweep-$kernel" bash -c "set -o pipefail; '$bench' $kernel --sweep --check ${!args_var:-} \
      --json '$out/sweep-$kernel.json' | tee -a '$out/tables.txt'"
    if [[ " ${BWD_KERNELS:-fa2 bwd_sm90} " == *" $kernel "* ]]; then
      # The backward: timed over the whole sweep, checked up to s = 4096 (the fp64 CPU backward
      # of s = 16k takes minutes per (batch, KV head) group; two random groups per config).
      step "sweep-bwd-$kernel" bash -c "set -o pipefail; '$bench' $kernel --bwd --sweep \
        --iters 10 --json '$out/sweep-bwd-$kernel.json' | tee -a '$out/tables.txt'"
      for s in 512 2048 4096; do
        dims="64 128 256"
        [ "$kernel" = bwd_sm90 ] && dims="64 128"
        step "check-bwd-$kernel-s$s" bash -c "set -o pipefail; for d in $dims; do \
          for causal in '' --causal; do '$bench' $kernel --bwd --seqlen $s --headdim \$d \$causal \
          --check --check-groups 2 --iters 3 | tee -a '$out/tables.txt' || exit 1; done; done"
      done
    fi
  done
fi

if [[ " $steps " == *" python "* ]]; then
  # One CMake run in $build (HFA_BUILD_DIR): the library is the one built above, the torch ops
  # (libhfa_torch.so) are added, against the torch already installed.
  step python-install env HFA_BUILD_DIR="$build" python3 -m pip install -q --no-deps \
    --no-build-isolation "$root/python"
  step python-tests bash -c "cd /tmp && python3 -m pytest -q -p no:cacheprovider '$root/python/tests'"
fi

if [[ " $steps " == *" peers "* ]]; then
  # shellcheck disable=SC2086
  step peers bash -c "set -o pipefail; cd /tmp && PYTHONUNBUFFERED=1 python3 '$root/python/bench_peers.py' \
    --kernels '${PEER_KERNELS:-k2,k1}' ${PEER_ARGS:-} --json '$out/peers.json' \
    --plot '$out/peers.png' | tee -a '$out/tables.txt'"
fi

if [[ " $steps " == *" peers-fp8 "* ]]; then
  # FlashAttention-3's FP8 forward and the FP8 GEMM next to the k7 sweep of this call (step
  # "sweep" with k7 in SWEEP_KERNELS first). The fa3_fwd wheel travels in .whl/ (README).
  # cuDNN's FP8 peer: the nvidia-cudnn-frontend wheel (cp312) in .whl-cudnn/ (64 MiB carry limit:
  # it travels in a call of its own with --peers cudnn_fp8 in PEER_FP8_ARGS).
  install_peer_wheels
  merge=""
  for k in k7 k8; do [ -f "$out/sweep-$k.json" ] && merge="$merge $out/sweep-$k.json"; done
  [ -n "$merge" ] && merge="--merge $merge"
  step peers-fp8 bash -c "set -o pipefail; cd '$root/python' && PYTHONUNBUFFERED=1 python3 bench_fp8_peers.py \
    ${PEER_FP8_ARGS:---peers fa3_fp8} $merge --json '$out/peers-fp8.json' | tee -a '$out/tables.txt'"
fi

if [[ " $steps " == *" decode-sanitize "* ]]; then
  # Flash decode's kernels (split, combine, append) through its GPU tests: forced split counts
  # (empty splits), appended keys, a paged cache, cache_batch_idx; e4m3 caches (conversion); the
  # variants' kernel (windows, softcap, sinks; pages freed before a window, which must not be read).
  for tool in memcheck racecheck synccheck; do
    step "sanitize-$tool-decode" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$build/tests/hfa_gpu_tests" --gtest_filter='Decode.ForcedSplitCounts:Decode.AppendOnly:Decode.CacheBatchIdxAndScales:Decode/DecodeMatrix.MatchesReference/d*_bf16_page16:Decode/DecodeMatrix.MatchesReference/d*_fp16_page64_e4m3cache:Decode.VariantsForcedSplitCounts:Decode.WindowDoesNotReadPagesBeforeIt:Decode/DecodeVariants.MatchesReference/d*_bf16_page16'
  done
fi

if [[ " $steps " == *" decode "* ]]; then
  # hfa-bench's decode sweep (contiguous and page size 64, checked on a batch that fits the host
  # checker), bf16 caches and e4m3 ones, then cuDNN, torch's FLASH backend and FlashAttention-3
  # (wheel in .whl/; its FP8 kvcache path for the e4m3 rows) on it.
  step decode-sweep bash -c "set -o pipefail; '$bench' --decode --sweep --check --page-size 0,64 \
    ${DECODE_ARGS:-} --json '$out/decode.json' | tee -a '$out/tables.txt'"
  step decode-sweep-e4m3 bash -c "set -o pipefail; '$bench' --decode --sweep --check --page-size 0,64 \
    --kv-dtype e4m3 ${DECODE_ARGS:-} --json '$out/decode-e4m3.json' | tee -a '$out/tables.txt'"
  install_peer_wheels
  step decode-peers bash -c "set -o pipefail; cd '$root/python' && PYTHONUNBUFFERED=1 python3 \
    bench_decode_peers.py --merge '$out/decode.json' '$out/decode-e4m3.json' \
    --peers cudnn,torch_flash,fa3,fa3_paged,fa3_fp8,fa3_fp8_paged --json '$out/decode-peers.json' \
    --plot '$out/decode.png' | tee -a '$out/tables.txt'"
fi
if [[ " $steps " == *" decode-variants "* ]]; then
  # Decode with windows, softcap and sinks next to FlashAttention-3 (scripts/bench_decode_variants.sh).
  install_peer_wheels
  step decode-variants bash -c "set -o pipefail; HFA_BENCH='$bench' OUT_DIR='$out' \
    '$root/scripts/bench_decode_variants.sh' | tee -a '$out/tables.txt'"
fi

if [[ " $steps " == *" fp8-accuracy "* ]]; then
  # The FP8 accuracy study (python/fp8_accuracy.py): needs the binding (step "python") and, for
  # the fa3_fp8 rows, the fa3_fwd wheel from .whl/.
  if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hfa-peers "$root"/.whl/*.whl \
      && export PYTHONPATH=/tmp/hfa-peers:${PYTHONPATH:-}
  fi
  step fp8-accuracy bash -c "set -o pipefail; cd /tmp && PYTHONUNBUFFERED=1 python3 '$root/python/fp8_accuracy.py' \
    --json '$out/fp8-accuracy.json' | tee -a '$out/tables.txt'"
fi

if [[ " $steps " == *" peers-bwd "* ]]; then
  # shellcheck disable=SC2086
  step peers-bwd bash -c "set -o pipefail; cd /tmp && PYTHONUNBUFFERED=1 python3 '$root/python/bench_peers.py' \
    --bwd --kernels '${PEER_BWD_KERNELS:-bwd_sm90,fa2}' --peers cudnn,torch_flash ${PEER_ARGS:-} \
    --json '$out/peers-bwd.json' --plot '$out/peers-bwd.png' | tee -a '$out/tables.txt'"
fi

if [[ " $steps " == *" cp "* ]]; then
  # Context parallelism (hfa.distributed.ring_attention) on every visible GPU (2 or more), next to
  # hfa on one GPU and PyTorch's context_parallel; NVLink multicast stays off (device docs).
  step cp bash -c "set -o pipefail; cd /tmp && NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 python3 \
    '$root/python/bench_cp.py' --json '$out/cp.json' | tee -a '$out/tables.txt'"
fi

echo
cat "$summary"
exit $failed
