#!/usr/bin/env bash
# Simulated (fake-quant) perplexity on SmolLM2-135M for the dynamic (calibration-free) rows of
# docs/quant.md's table: WikiText-2, gptq protocol, ctx 512, 16 windows (8,176 targets), each row
# with KLD against the fp model on the same targets. Prints a markdown table; the ± is the standard
# error of the per-window mean NLL difference to fp (paired over the 16 windows).
# Usage: bash scripts/smollm2_sim_table.sh   (after bash scripts/build.sh; ~18 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
S=./build/src/cli/sinkq
G=../shared/models/smollm2-135m-instruct-q4_1/model.gguf
T=../shared/data/wikitext-2/wikitext2_test_joined.txt
OUT=$(mktemp -d)
run() {  # $1 row name, rest: flags
  local name=$1; shift
  echo "smollm2_sim_table: $name" >&2
  "$S" ppl -m "$G" -f "$T" --ctx 512 --max-windows 16 --json "$@" 2>/dev/null >"$OUT/$name.json"
}
run fp
run w8a8 --preset w8a8 --kld
run w4a16g128 --preset w4a16g128 --kld
run w4a8 --w-bits 4 --a-bits 8 --kld
run w4a4 --w-bits 4 --a-bits 4 --kld
run w4a4-rot --w-bits 4 --a-bits 4 --rotate --kld
run w4a4-cross --w-bits 4 --a-bits 4 --a-quant cross --a-alpha 0.15 --kld
run kv8 --kv-bits 8 --kld
run kv4 --kv-bits 4 --kld
run kv4-rot --kv-bits 4 --rotate --kld
run head8 --head-bits 8 --kld
run w8a8-head8 --preset w8a8-head8 --kld
run w4a8-head8 --w-bits 4 --a-bits 8 --head-bits 8 --kld
run head4 --head-bits 4 --kld
run head4-g128 --head-bits 4 --head-group 128 --kld
run head4-row --head-bits 4 --head-group 0 --kld
run w8a8-head4 --preset w8a8-head4 --kld
run w4a8-head4 --w-bits 4 --a-bits 8 --head-bits 4 --kld
python3 scripts/ppl_table.py "$OUT" w8a8 w4a16g128 w4a8 w4a4 w4a4-rot w4a4-cross kv8 kv4 kv4-rot head8 w8a8-head8 \
  w4a8-head8 head4 head4-g128 head4-row w8a8-head4 w4a8-head4
rm -rf "$OUT"
