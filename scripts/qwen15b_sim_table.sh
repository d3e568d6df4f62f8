#!/usr/bin/env bash
# Simulated (fake-quant) perplexity on the 1.5B proving ground (Qwen2.5-Coder-1.5B-Instruct
# Q4_K_M, scripts/fetch_model.sh) for the rows that need no grid search: RTN weights, dynamic
# activations / KV, rotation, CrossQuant, and KVQuant's per-channel keys with integer-uniform or
# NormalFloat levels (their channel ranges come from the calibration forward; no gradients).
# WikiText-2, gptq protocol, ctx 512, 16 windows (8,176 targets), KLD against the fp model on the
# same targets. Prints a markdown table (docs/results-qwen2.5-1.5b.md); ± is the standard error of
# the per-window mean NLL difference to fp, paired over the 16 windows.
# Usage: bash scripts/qwen15b_sim_table.sh [OUT_DIR]   (after bash scripts/build.sh; ~6 min a row
# on 2 cores, ~2 h in all). Rows already in OUT_DIR are kept, so an interrupted run resumes;
# ONLY="row row ..." runs just those rows (in that order) and prints every row OUT_DIR has.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SINKQ:-./build/src/cli/sinkq}  # SINKQ=path: a copy, so a rebuild cannot change the binary mid-run
Q=$(bash scripts/fetch_model.sh)
T=../shared/data/wikitext-2/wikitext2_test_joined.txt
C=../shared/data/c4/c4_train_00000_first1000.jsonl
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
# The model stays in its blocks (1.1 GB; sinkq's default): rows that quantize weights or rotate
# add one fp32 copy (7.1 GB).
CAL=(--calib "$C" --calib-samples 8 --calib-len 512)
KVQ=(--kv-codebook uniform --kv-keys pre_rope_channel "${CAL[@]}")
ROWS=()
declare -A FLAGS=()
run() {  # $1 row name, rest: flags
  local name=$1; shift
  [[ $name == fp ]] || ROWS+=("$name")
  FLAGS[$name]="$*"
  [[ -n ${ONLY:-} ]] && return
  run_row "$name" "$@"
}
run_row() {
  local name=$1; shift
  [[ -s $OUT/$name.json ]] && return
  echo "qwen15b_sim_table: $name  [$(date +%T)]" >&2
  "$S" ppl -m "$Q" -f "$T" --ctx 512 --max-windows 16 --json "$@" 2>/dev/null \
    >"$OUT/$name.json.tmp"
  mv "$OUT/$name.json.tmp" "$OUT/$name.json"
}
run fp
run w8a8kv8 --w-bits 8 --a-bits 8 --kv-bits 8 --kld
run w8a8kv8-cross --w-bits 8 --a-bits 8 --a-quant cross --a-alpha 0.15 --kv-bits 8 --kld
run w8a8kv8-rot --w-bits 8 --a-bits 8 --kv-bits 8 --rotate --kld
run w8 --w-bits 8 --kld
run a8 --a-bits 8 --kld
run kv4 --kv-bits 4 --kld
run kv4-rot --kv-bits 4 --rotate --kld
run kv4-chan --kv-bits 4 "${KVQ[@]}" --kld
run kv3-chan-1pct --kv-bits 3 "${KVQ[@]}" --kv-outliers 0.01 --kld
run kv2-chan-1pct --kv-bits 2 "${KVQ[@]}" --kv-outliers 0.01 --kld
# KVQuant with sinkq's int8 recent window (docs/kvquant.md "The recent window")
run kv2-chan-1pct-r32 --kv-bits 2 "${KVQ[@]}" --kv-outliers 0.01 --kv-recent 32 --kld
run kv3-chan-1pct-r128 --kv-bits 3 "${KVQ[@]}" --kv-outliers 0.01 --kv-recent 128 --kld
run w4a8-kv3-chan-1pct --w-bits 4 --a-bits 8 --kv-bits 3 "${KVQ[@]}" --kv-outliers 0.01 --kld
run w4a16g128 --preset w4a16g128 --kld
run w4a8 --w-bits 4 --a-bits 8 --kld
run w4a4 --w-bits 4 --a-bits 4 --kld
run w4a4-rot --w-bits 4 --a-bits 4 --rotate --kld
run w4a4-cross --w-bits 4 --a-bits 4 --a-quant cross --a-alpha 0.15 --kld
# CrossQuant's deployable form: static column maxima from CAL, folded into the weights.
run w8a8kv8-cross-static --w-bits 8 --a-bits 8 --a-quant cross --a-alpha 0.15 --a-cross-cols static "${CAL[@]}" --kv-bits 8 --kld
run w4a4-cross-static --w-bits 4 --a-bits 4 --a-quant cross --a-alpha 0.15 --a-cross-cols static "${CAL[@]}" --kld
run w8a8kv8-cross-static-a05 --w-bits 8 --a-bits 8 --a-quant cross --a-alpha 0.5 --a-cross-cols static "${CAL[@]}" --kv-bits 8 --kld
if [[ -n ${ONLY:-} ]]; then
  run_row fp
  for name in $ONLY; do
    [[ -v FLAGS[$name] ]] || { echo "qwen15b_sim_table: ONLY: no row '$name'" >&2; exit 1; }
    # shellcheck disable=SC2086  # the flags are words without spaces
    run_row "$name" ${FLAGS[$name]}
  done
fi
HAVE=()
for name in "${ROWS[@]}"; do [[ -s $OUT/$name.json ]] && HAVE+=("$name"); done
python3 scripts/ppl_table.py "$OUT" "${HAVE[@]}"
