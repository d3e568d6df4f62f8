#!/usr/bin/env bash
# PrefixQuant Table 6 ladder, Table 2 analogue and the IntactKV rows on SmolLM2-135M-Instruct, as
# in docs/results-smollm2.md: WikiText-2, the `prefix` protocol (every row scores the same 8,176
# targets of 16 windows of 512 tokens behind its prefix), calibration 4 x 256 tokens of C4, KLD
# against the fp model behind the same prefix; ± is the paired standard error of the per-window
# NLL difference to the row's fp reference. Prints markdown tables; the JSON of each ladder is kept
# in $OUT (default: a temporary directory).
# Usage: bash scripts/smollm2_ladder.sh [w4a4kv4 w4a8kv4 w8a8kv8]
#   (after bash scripts/build.sh; on 2 cores ~45 min for w4a4kv4 with all three tables, ~25 min
#   for each of the others, which run table6 and intactkv: Table 2 depends only on the A and KV
#   bits, so w4a4kv4's covers A4 / KV4)
set -euo pipefail
cd "$(dirname "$0")/.."
S=./build/src/cli/sinkq
G=../shared/models/smollm2-135m-instruct-q4_1/model.gguf
T=../shared/data/wikitext-2/wikitext2_test_joined.txt
C=../shared/data/c4/c4_train_00000_first1000.jsonl
P="system:You are a helpful AI assistant named SmolLM, trained by Hugging Face"
OUT=${OUT:-$(mktemp -d)}
bits=("$@")
[ ${#bits[@]} -gt 0 ] || bits=(w4a4kv4 w4a8kv4 w8a8kv8)
for b in "${bits[@]}"; do
  tables=table6,intactkv
  [ "$b" = w4a4kv4 ] && tables=table6,table2,intactkv
  echo "smollm2_ladder: $b ($tables)" >&2
  "$S" ladder -m "$G" -f "$T" --calib "$C" --bits "$b" --ctx 512 --max-windows 16 --calib-samples 4 \
    --calib-len 256 --tables "$tables" --intactkv-prompt "$P" --json 2>/dev/null >"$OUT/ladder-$b.json"
done
python3 scripts/ladder_tables.py $(for b in "${bits[@]}"; do echo "$OUT/ladder-$b.json"; done)
