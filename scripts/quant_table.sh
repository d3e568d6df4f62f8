#!/usr/bin/env bash
# Regenerates the simulated-quantization table of docs/quant.md ("Results on the shared models"):
# WikiText-2 test perplexity and KLD vs full precision for each configuration, without and with
# Hadamard rotation. Run by hand after scripts/build.sh:
#   bash scripts/quant_table.sh [MODEL_DIR] [CTX] [WINDOWS]
# Defaults: ../shared/models/mixtext-2.5M, ctx 256, 40 windows; calibration: 8 × CTX tokens of the
# C4 sample (seed 0) for the configurations that need it (static scales, clip grid search).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/mixtext-2.5M}
CTX=${2:-256}
WIN=${3:-40}
BIN=build/src/cli/sinkq
DATA=../shared/data/wikitext-2/wikitext2_test_joined.txt
CALIB="--calib ../shared/data/c4/c4_train_00000_first1000.jsonl --calib-samples 8 --calib-len $CTX"
run() {  # label, flags...
  local label=$1; shift
  local row="| $label |"
  for rot in "" "--rotate"; do
    out=$("$BIN" ppl -m "$MODEL" -f "$DATA" --ctx "$CTX" --max-windows "$WIN" --kld "$@" $rot 2>/dev/null)
    ppl=$(sed -n 's/.*ppl \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
    kld=$(sed -n 's/^KLD \([0-9.e+-]*\).*/\1/p' <<<"$out" | head -1)
    row+=" $ppl | ${kld:-0} |"
  done
  echo "$row"
}
echo "model $MODEL, WikiText-2 test, gptq protocol, ctx $CTX, $WIN windows"
echo "| configuration | ppl | KLD | ppl (rotated) | KLD (rotated) |"
echo "|---|---|---|---|---|"
run "fp (no quantization)" --preset fp16
run "W8A8 dynamic per-token" --preset w8a8
run "W4A16 g128" --preset w4a16g128
run "W4A16 g128, clip grid" --preset w4a16g128 --w-clip grid $CALIB
run "W4A8 dynamic" --w-bits 4 --a-bits 8
run "W4A4 dynamic per-token" --w-bits 4 --a-bits 4
run "W4A4 static per-tensor (grid)" --w-bits 4 --a-bits 4 --a-quant static $CALIB
run "W4A4 CrossQuant α=0.15" --w-bits 4 --a-bits 4 --a-quant cross --a-alpha 0.15
run "W4A4 CrossQuant α=0.45" --w-bits 4 --a-bits 4 --a-quant cross --a-alpha 0.45
run "KV8 dynamic per-head" --kv-bits 8
run "KV4 dynamic per-head" --kv-bits 4
run "KV4 static per-head (grid)" --kv-bits 4 --kv-quant static $CALIB
run "W4A8KV4 dynamic (preset w4a8kv4)" --preset w4a8kv4
run "W4A4KV4 dynamic (preset w4a4kv4)" --preset w4a4kv4
run "W4A4KV4 static, clip grid" --preset w4a4kv4 --a-quant static --kv-quant static --w-clip grid $CALIB
