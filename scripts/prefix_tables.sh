#!/usr/bin/env bash
# Reproduces the tables of docs/prefix.md on mixtext-2.5M: PrefixQuant Table 6 ladder and Table 2
# analogue, IntactKV Table 1 / 6 analogues (W4A4KV4 ladder, all three tables), the Table 6 ladder
# at W4A8KV4 and W8A8KV8, and the analyze reports with and without a [BOS] prefix.
#   scripts/prefix_tables.sh [BUILD_DIR] [OUT_DIR] [MAX_WINDOWS]
# Defaults: build, prefix_tables/, 40 windows of 252 tokens (256 positions − the prefix − margin).
# Single-threaded by default (SINKQ_THREADS=1); about 15 minutes on one busy core (calibration
# dominates: 2 windows take about 8).
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-prefix_tables}
WINDOWS=${3:-40}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
SINKQ=$BUILD/src/cli/sinkq
M=$SHARED/models/mixtext-2.5M
W=$SHARED/data/wikitext-2/wikitext2_test_joined.txt
C=$SHARED/data/c4/c4_train_00000_first1000.jsonl
export SINKQ_THREADS=${SINKQ_THREADS:-1}
mkdir -p "$OUT"

# All three tables at W4A4KV4 (text and JSON from the same run would double the time: JSON only,
# then printed as a table below).
"$SINKQ" ladder -m "$M" -f "$W" --calib "$C" --bits w4a4kv4 --ctx 252 --max-windows "$WINDOWS" --json \
  > "$OUT/ladder_w4a4kv4.json"
for b in w4a8kv4 w8a8kv8; do
  "$SINKQ" ladder -m "$M" -f "$W" --calib "$C" --bits "$b" --ctx 252 --max-windows "$WINDOWS" --tables table6 \
    > "$OUT/ladder_$b.txt"
done
# Why the ordering differs from the paper: the body's token-wise maxima with and without [BOS].
"$SINKQ" analyze -m "$M" --data "$C" --len 255 > "$OUT/analyze_none.txt"
"$SINKQ" analyze -m "$M" --data "$C" --len 255 --prefix bos > "$OUT/analyze_bos.txt"
"$SINKQ" prefix find -m "$M" --calib "$C" > "$OUT/prefix_find.txt"

python3 - "$OUT/ladder_w4a4kv4.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"ctx {j['ctx']}, windows {j['rows'][0]['windows']}, tokens scored {j['rows'][0]['tokens_scored']}, "
      f"prefix {j['prefix']['tokens']}")
for r in j["rows"]:
    print(f"{r['table']:9s} {r['name']:40s} {r['ppl']:9.3f} {r['kld']:8.4f}  {r['describe']}")
PY
cat "$OUT/ladder_w4a8kv4.txt" "$OUT/ladder_w8a8kv8.txt"
