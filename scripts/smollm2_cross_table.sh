#!/usr/bin/env bash
# CrossQuant on SmolLM2-135M: the paper's simulated forms (column maxima per call / running) against
# the deployable one the packed kernels run (--a-cross-cols static: calibrated column maxima folded
# into the weights, crossquant.h CrossFold), beside per-token quantization. WikiText-2, gptq
# protocol, ctx 512, 16 windows (8,176 targets), KLD against fp; calibration 4 x 256 tokens of C4.
# The "packed artifact" row is the row above it run on the real kernels. Prints a markdown
# table; ± is the standard error of the per-window NLL difference to fp (paired, 16 windows).
# Usage: bash scripts/smollm2_cross_table.sh   (after bash scripts/build.sh; ~25 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
S=./build/src/cli/sinkq
G=../shared/models/smollm2-135m-instruct-q4_1/model.gguf
T=../shared/data/wikitext-2/wikitext2_test_joined.txt
C=../shared/data/c4/c4_train_00000_first1000.jsonl
OUT=$(mktemp -d)
CAL=(--calib "$C" --calib-samples 4 --calib-len 256)
ROWS=()
run() {  # $1 row name, rest: flags
  local name=$1; shift
  echo "smollm2_cross_table: $name" >&2
  "$S" ppl -f "$T" --ctx 512 --max-windows 16 --json "$@" 2>/dev/null >"$OUT/$name.json"
  ROWS+=("$name")
}
X=(--a-quant cross --a-alpha)
run fp -m "$G"
run "W16A4 per-token" -m "$G" --a-bits 4 --kld
run "W16A4 cross per_call a=0.15" -m "$G" --a-bits 4 "${X[@]}" 0.15 --kld
run "W16A4 cross running_max a=0.15" -m "$G" --a-bits 4 "${X[@]}" 0.15 --a-cross-cols running_max --kld
run "W16A4 cross static a=0.15" -m "$G" --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static "${CAL[@]}" --kld
run "W8A4 per-token" -m "$G" --w-bits 8 --a-bits 4 --kld
run "W8A4 cross per_call a=0.15" -m "$G" --w-bits 8 --a-bits 4 "${X[@]}" 0.15 --kld
run "W8A4 cross static a=0.15" -m "$G" --w-bits 8 --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static "${CAL[@]}" --kld
"$S" quantize -m "$G" --w-bits 8 --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static "${CAL[@]}" -o "$OUT/art" --force \
  2>/dev/null >/dev/null
run "W8A4 cross static a=0.15, packed artifact" -m "$OUT/art" --kld
run "W8A8 per-token" -m "$G" --w-bits 8 --a-bits 8 --kld
run "W8A8 cross per_call a=0.15" -m "$G" --w-bits 8 --a-bits 8 "${X[@]}" 0.15 --kld
run "W8A8 cross static a=0.15" -m "$G" --w-bits 8 --a-bits 8 "${X[@]}" 0.15 --a-cross-cols static "${CAL[@]}" --kld
run "W8A8 cross static a=0.5" -m "$G" --w-bits 8 --a-bits 8 "${X[@]}" 0.5 --a-cross-cols static "${CAL[@]}" --kld
run "W4A4 per-token" -m "$G" --w-bits 4 --a-bits 4 --kld
run "W4A4 cross per_call a=0.15" -m "$G" --w-bits 4 --a-bits 4 "${X[@]}" 0.15 --kld
run "W4A4 cross static a=0.15" -m "$G" --w-bits 4 --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static "${CAL[@]}" --kld
run "W4A4 cross static a=0.15, weight clip grid" -m "$G" --w-bits 4 --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static \
  --w-clip grid "${CAL[@]}" --kld
run "W4A4 g128 per-token" -m "$G" --w-bits 4 --w-group 128 --a-bits 4 --kld
run "W4A4 g128 cross static a=0.15" -m "$G" --w-bits 4 --w-group 128 --a-bits 4 "${X[@]}" 0.15 --a-cross-cols static \
  "${CAL[@]}" --kld
python3 scripts/ppl_table.py "$OUT" "${ROWS[@]:1}"
rm -rf "$OUT"
