#!/usr/bin/env bash
# hfa-bench's command line: --list without a GPU; the worklog's env-var form and the flag form.
set -u
bench=$1
fail() { echo "FAIL: $*"; exit 1; }

list=$("$bench" --list) || fail "--list exited non-zero"
for k in k1 k2 fa2 auto; do grep -q "^$k " <<<"$list" || fail "--list does not show $k"; done
grep -q "^backward kernels" <<<"$list" || fail "--list does not list the backward kernels"

if nvidia-smi -L >/dev/null 2>&1; then
  out=$(CHECK=1 SEQLEN=100 HEADDIM=64 CAUSAL=1 BATCH=2 HEADS=4 "$bench" k2 --iters 3 2>&1) \
    || fail "env-var form failed on a GPU: $out"
  grep -q "PASS" <<<"$out" || fail "env-var form did not check: $out"
  out=$("$bench" k1 k2 --seqlen 100 --headdim 64 --causal --batch 2 --heads 4 --check --iters 3 2>&1) \
    || fail "flag form failed on a GPU: $out"
  [ "$(grep -c PASS <<<"$out")" -ge 2 ] || fail "flag form did not check both kernels: $out"
  out=$("$bench" fa2 --bwd --seqlen 100 --headdim 64 --batch 2 --heads 4 --heads-kv 2 --causal --check --iters 3 2>&1) \
    || fail "--bwd failed on a GPU: $out"
  grep -q "PASS" <<<"$out" || fail "--bwd did not check: $out"
  "$bench" k6 --bwd >/dev/null 2>&1 && fail "--bwd with a forward-only kernel exited 0"
  out=$("$bench" fa2 --bwd --deterministic --seqlen 300 --headdim 64 --batch 2 --heads 4 --heads-kv 2 --causal --check --iters 3 2>/dev/null) \
    || fail "--bwd --deterministic failed on a GPU: $out"
  grep -q "fa2_deterministic.*PASS" <<<"$out" || fail "--bwd --deterministic did not check a fa2_deterministic row: $out"
else
  out=$(CHECK=1 SEQLEN=512 HEADDIM=64 CAUSAL=0 "$bench" k2 2>&1); rc=$?
  [ $rc -ne 0 ] || fail "exit status 0 without a GPU"
  [ "$(wc -l <<<"$out")" -eq 1 ] || fail "expected one line without a GPU, got: $out"
  grep -q "no CUDA GPU" <<<"$out" || fail "message does not say there is no GPU: $out"
fi
"$bench" nosuchkernel >/dev/null 2>&1 && fail "an unknown kernel name exited 0"
out=$("$bench" fa2 --deterministic 2>&1) && fail "--deterministic without --bwd exited 0"
grep -q -- "--deterministic.*--bwd" <<<"$out" || fail "--deterministic without --bwd: message does not say why: $out"
# --decode --num-splits: outside 0..256 is refused by the parser (GPU or not), naming the option.
out=$("$bench" --decode --num-splits 257 2>&1) && fail "--num-splits 257 exited 0"
grep -q -- "--num-splits" <<<"$out" || fail "--num-splits 257: message does not name the option: $out"
# --decode-merge: grid or kernel only, refused by the parser (GPU or not), naming the option.
out=$("$bench" --decode --decode-merge split 2>&1) && fail "--decode-merge split exited 0"
grep -q -- "--decode-merge" <<<"$out" || fail "--decode-merge split: message does not name the option: $out"
# --values: an unknown distribution is refused by the parser, naming the option.
out=$("$bench" k2 --values gaussian 2>&1) && fail "--values gaussian exited 0"
grep -q -- "--values" <<<"$out" || fail "--values gaussian: message does not name the option: $out"
if nvidia-smi -L >/dev/null 2>&1; then
  out=$("$bench" k2 --seqlen 300 --headdim 64 --batch 2 --heads 4 --values ramp --check --iters 3 2>/dev/null) \
    || fail "--values ramp failed on a GPU: $out"
  grep -q "PASS" <<<"$out" || fail "--values ramp did not check: $out"
  out=$("$bench" --decode --seqlen-k 1000 --num-splits 0,3 --check --iters 3 2>/dev/null) \
    || fail "--decode --num-splits 0,3 failed on a GPU: $out"
  [ "$(grep -c "PASS" <<<"$out")" -ge 2 ] || fail "--num-splits 0,3 did not check both counts: $out"
  grep -q "splits   3" <<<"$out" || fail "--num-splits 3 was not the row's split count: $out"
  out=$("$bench" --decode --seqlen-k 1000 --num-splits 3 --decode-merge kernel --check --iters 3 2>/dev/null) \
    || fail "--decode-merge kernel failed on a GPU: $out"
  grep -q "PASS" <<<"$out" || fail "--decode-merge kernel did not check: $out"
fi
echo "cli ok"
