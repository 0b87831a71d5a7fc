#!/usr/bin/env bash
# Flash decode with the score variants, next to FlashAttention-3, on one GPU in one run (issue 22's
# variants in decode; WORKLOG, "Flash decode", session 50). Batch {1, 8, 64} x {8k, 64k} cached
# keys, 32 q / 8 KV heads, d = 128, one new token; for each mode hfa-bench --decode (contiguous,
# and pages of 64 for window 4096), then python/bench_decode_peers.py --sweep variants on the same
# configurations, merged:
#   plain            beside cuDNN and FlashAttention-3
#   window4096       --window 4096,0 beside FA3 with the window (a wheel without local attention
#                    says so) and fa3_window_keys (FA3 on a cache of only the window's keys)
#   window128        --window 128,0, the same peers
#   softcap50        --softcap 50 beside FA3's softcap
#   sinks            --sinks (FA3's wheel takes none: its rows carry the error)
#   window128_sinks  gpt-oss's layers
# and dense caches of 4097 keys (a window of 4096's keys) for the time per key.
# Usage: HFA_BENCH=build/tools/hfa-bench/hfa-bench OUT_DIR=out scripts/bench_decode_variants.sh
#   (FlashAttention-3's fa3_fwd wheel importable; writes $OUT_DIR/decode-variants.json, with each
#   row's "mode", and prints the tables)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${HFA_BENCH:-$root/build/tools/hfa-bench/hfa-bench}
out=${OUT_DIR:-$root/decode-variants-out}
mkdir -p "$out"
tmp=$(mktemp -d)
declare -A flags=([plain]="" [window4096]="--window 4096,0" [window128]="--window 128,0"
                  [softcap50]="--softcap 50" [sinks]="--sinks" [window128_sinks]="--window 128,0 --sinks")
declare -A peers=([plain]="cudnn,fa3" [window4096]="fa3,fa3_paged,fa3_window_keys"
                  [window128]="fa3,fa3_window_keys" [softcap50]="fa3" [sinks]="fa3" [window128_sinks]="fa3")
modes="plain window4096 window128 softcap50 sinks window128_sinks"
for m in $modes; do
  pages=0; [ "$m" = window4096 ] && pages=0,64
  for b in 1 8 64; do
    for sk in 8192 65536; do
      "$bench" --decode --batch $b --seqlen-k $sk --heads 32 --heads-kv 8 --headdim 128 ${flags[$m]} \
        --page-size $pages --iters 50 --json "$tmp/hfa-$m-$b-$sk.json" 2>/dev/null | grep -v "^$"
    done
  done
  python3 - "$tmp" "$m" <<'PY'
import glob, json, sys
tmp, m = sys.argv[1:]
rows, info = [], {}
for f in sorted(glob.glob(f"{tmp}/hfa-{m}-*.json")):
    d = json.load(open(f))
    rows += d["rows"]
    info = {k: v for k, v in d.items() if k != "rows"}
json.dump(dict(info, rows=rows), open(f"{tmp}/hfa-{m}.json", "w"), indent=1)
PY
  (cd "$root/python" && python3 bench_decode_peers.py --sweep variants ${flags[$m]} --peers ${peers[$m]} \
     --merge "$tmp/hfa-$m.json" --json "$tmp/peers-$m.json" | grep -v "^{")
done
echo "dense caches of 4097 keys:"
for b in 1 8 64; do
  "$bench" --decode --batch $b --seqlen-k 4097 --heads 32 --heads-kv 8 --headdim 128 --iters 50 2>/dev/null | grep decode
done
python3 - "$tmp" "$out/decode-variants.json" $modes <<'PY'
import json, sys
tmp, dest, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
rows, info = [], {}
for m in modes:
    d = json.load(open(f"{tmp}/peers-{m}.json"))
    info = {k: v for k, v in d.items() if k != "rows"}
    for r in d["rows"]:
        rows.append(dict(r, mode=m))
json.dump(dict(info, rows=rows), open(dest, "w"), indent=1)
print(f"bench_decode_variants.sh: wrote {dest} ({len(rows)} rows)")
PY
rm -rf "$tmp"
