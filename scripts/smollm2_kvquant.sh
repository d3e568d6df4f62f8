#!/usr/bin/env bash
# KVQuant on SmolLM2-135M-Instruct, as in docs/kvquant.md: the Table 2 analogue (int / nf per-token
# baselines and KVQuant at 4, 3 and 2 bits, with and without 1% outliers), the per-step ablation at
# 3 bits and Q-Norm at 2 bits. KV only (weights and activations full precision). WikiText-2, the
# `prefix` protocol with a [BOS] prefix in every row (16 windows of 512 tokens behind it, the same
# 8,176 targets): KVQuant rows keep it in full precision (§3.6, source fp), the baselines quantize
# it like every other token (source quant). Calibration: 8 x 512 tokens of C4. KLD against the fp
# model behind the same prefix. Prints the markdown tables (scripts/kvquant_table.py); the JSON of
# every row is kept in $OUT (default: a temporary directory).
# Usage: bash scripts/smollm2_kvquant.sh   (after bash scripts/build.sh; ~60 min on 2 cores)
# Another model: M=DIR CTX=N WINDOWS=N CALIB_LEN=N KV_DIM=N ABLATION=0 (the table rows only), e.g.
#   M=../shared/models/mixtext-2.5M CTX=252 WINDOWS=40 CALIB_LEN=256 KV_DIM=64 ABLATION=0 bash scripts/smollm2_kvquant.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=${S:-./build/src/cli/sinkq}
G=${M:-../shared/models/smollm2-135m-instruct-q4_1/model.gguf}
CTX=${CTX:-512}
WINDOWS=${WINDOWS:-16}
T=../shared/data/wikitext-2/wikitext2_test_joined.txt
C=../shared/data/c4/c4_train_00000_first1000.jsonl
OUT=${OUT:-$(mktemp -d)}
CAL="--calib $C --calib-samples 8 --calib-len ${CALIB_LEN:-512}"
Q="--prefix bos --prefix-source quant"   # the first token quantized like the others
F="--prefix bos"                          # the first token in full precision
ROWS=(
  "fp|--prefix bos"
)
for b in 4 3 2; do
  ROWS+=(
    "int$b|--kv-bits $b --kv-codebook uniform --kv-keys post_rope_token $Q"
    "nf$b|--kv-bits $b --kv-codebook nf --kv-keys post_rope_token $Q"
    "kvquant-${b}bit|--preset kvquant-${b}bit $CAL"
    "kvquant-${b}bit-1pct|--preset kvquant-${b}bit-1pct $CAL"
  )
done
# The per-step ablation at 3 bits (each row adds one step to the row above; int3 is its start).
[ "${ABLATION:-1}" = 1 ] && ROWS+=(
  "abl3-channel|--kv-bits 3 --kv-codebook uniform --kv-keys post_rope_channel $Q $CAL"
  "abl3-prerope|--kv-bits 3 --kv-codebook uniform --kv-keys pre_rope_channel $Q $CAL"
  "abl3-kmeans|--kv-bits 3 --kv-codebook kmeans $Q $CAL"
  "abl3-fisher|--kv-bits 3 --kv-codebook fisher $Q $CAL"
  "abl3-1pct|--kv-bits 3 --kv-codebook fisher --kv-outliers 0.01 $Q $CAL"
  "abl3-sink|--kv-bits 3 --kv-codebook fisher --kv-outliers 0.01 $F $CAL"
  "abl3-qnorm|--kv-bits 3 --kv-codebook fisher --kv-outliers 0.01 --kv-qnorm $F $CAL"
  "abl2-noqnorm|--kv-bits 2 --kv-codebook fisher $F $CAL"
  "abl2-1pct-noqnorm|--kv-bits 2 --kv-codebook fisher --kv-outliers 0.01 $F $CAL"
)
for r in "${ROWS[@]}"; do
  name=${r%%|*}
  flags=${r#*|}
  [ -s "$OUT/$name.json" ] && continue
  echo "smollm2_kvquant: $name ($flags)" >&2
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if ! "$S" ppl -m "$G" -f "$T" --ctx "$CTX" --max-windows "$WINDOWS" --kld --json $flags 2>"$OUT/$name.err" >"$OUT/$name.tmp"; then
    echo "smollm2_kvquant: $name failed:" >&2
    tail -3 "$OUT/$name.err" >&2
    exit 1
  fi
  python3 - "$OUT/$name.tmp" "$(( $(date +%s) - t0 ))" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["wall_seconds"] = int(sys.argv[2]); json.dump(j, open(sys.argv[1], "w"))
PY
  mv "$OUT/$name.tmp" "$OUT/$name.json"
done
python3 scripts/kvquant_table.py "$OUT" "${KV_DIM:-192}"
