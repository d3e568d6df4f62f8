#!/usr/bin/env bash
# The main job on the bundled real model: SmolLM2-135M-Instruct (a llama.cpp GGUF file, with a real
# attention sink on its first token) at full precision vs quantized to W4A4KV4 with PrefixQuant
# (rotation + the sink's KV as a full-precision prefix + static scales), as a real low-bit
# artifact: perplexity, KL divergence, speed and memory side by side. A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
S=./build/src/cli/sinkq
G=../shared/models/smollm2-135m-instruct-q4_1/model.gguf
TEXT=../shared/data/wikitext-2/wikitext2_test_joined.txt
CALIB=../shared/data/c4/c4_train_00000_first1000.jsonl
OUT=build/demo
A=$OUT/smollm2-prefixquant-w4a4kv4
mkdir -p "$OUT"

echo "== the model: $G"
$S inspect -m "$G" | sed -n '1,7p'

echo
echo "== its outlier structure: the first token is a massive outlier and the attention sink"
$S analyze -m "$G" --data "$CALIB" --samples 2 --len 256 2>/dev/null >"$OUT/analyze.txt"
grep -E "^outlier tokens|^attention mass|^  layer (2|11|12|18): " "$OUT/analyze.txt"

echo
echo "== quantize: sinkq quantize --preset prefixquant-w4a4kv4 (calibration: 4 x 128 tokens of C4)"
$S quantize -m "$G" --preset prefixquant-w4a4kv4 --calib "$CALIB" --calib-samples 4 --calib-len 128 \
  -o "$A" --force
# The artifact's bytes, to compare across hosts (docs/architecture.md "Reproducibility": the same on
# every host of one kernel path), and the host it was made on.
echo "artifact $A: tensors sha256 $(sha256sum "$A/model.safetensors" | cut -c1-16)"
$S --version | sed -n '2,3p'

echo
echo "== perplexity, WikiText-2, 8 windows of 512 behind the [BOS] prefix (the same 4,088 targets)"
echo "-- full precision (the dequantized GGUF):"
$S ppl -m "$G" -f "$TEXT" --ctx 512 --max-windows 8 --prefix bos 2>/dev/null | tail -1
echo "-- W4A4KV4 artifact (packed int4 weights, static int4 activations, int4 KV cache; KLD vs fp):"
$S ppl -m "$A" -f "$TEXT" --ctx 512 --max-windows 8 --kld 2>/dev/null | tail -2

echo
echo "== generation (greedy), full precision then the artifact"
P="The Eiffel Tower is"
$S generate -m "$G" -p "$P" -n 24 --temp 0 2>/dev/null; echo
$S generate -m "$A" -p "$P" -n 24 --temp 0 2>/dev/null; echo

echo
echo "== speed and memory: prefill 128 tokens, decode 32 (median of 3), this host's ISA"
$S bench -m "$G" --prefill 128 --decode 32 --reps 3 --no-profile --no-hook-probe 2>/dev/null
$S bench -m "$A" --prefill 128 --decode 32 --reps 3 --no-profile --no-hook-probe 2>/dev/null

echo
echo "== the artifact over 2 MPI ranks (mpirun; docs/scale.md): each rank holds its stage of the layers"
echo "   (and of the fp reference); perplexity and KLD equal the one-process figures above bit for bit"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np 2 $S ppl -m "$A" -f "$TEXT" --ctx 512 --max-windows 8 --kld --threads 1 2>&1 |
  grep -E "^mean NLL|^KLD|peak RSS"
