#!/usr/bin/env bash
# The main job on the bundled real model: SmolLM2-135M-Instruct (a llama.cpp GGUF file, with a real
# attention sink on its first token) at full precision and quantized three ways, each written as a
# real low-bit artifact and run on its packed kernels, side by side: perplexity and KL divergence to
# full precision on WikiText-2 (the same 4,088 targets for all, each behind its KV prefix), a greedy sample,
# decode and prefill speed, and the bytes a decode step reads.
#   fp       the GGUF dequantized to fp32: the reference
#   W8A8KV8  round-to-nearest, int8 activations per token, int8 KV: near-lossless
#   W4A8KV4  4-bit weights in groups of 128 (clip searched on the layer output), int8 activations,
#            KVQuant's KV: per-channel pre-RoPE keys, Fisher-weighted 4-bit codebooks, 1% of each
#            vector kept as sparse fp16 outliers, [BOS] kept intact (IntactKV): usable
#   W4A4KV4  PrefixQuant: rotation, the sink's KV as a full-precision prefix, static 4-bit
#            activations and KV: the most compressed, and lossy on a model this small
# About 10 minutes on a fresh 2-core machine, half of it building the sinkq binary (only that).
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
bash scripts/build.sh sinkq
S=./build/src/cli/sinkq
G=../shared/models/smollm2-135m-instruct-q4_1/model.gguf
TEXT=../shared/data/wikitext-2/wikitext2_test_joined.txt
CALIB=../shared/data/c4/c4_train_00000_first1000.jsonl
OUT=build/demo
mkdir -p "$OUT"
calib=(--calib "$CALIB" --calib-samples 4 --calib-len 128)
names=(fp W8A8KV8 W4A8KV4 W4A4KV4)
declare -A model=([fp]="$G" [W8A8KV8]="$OUT/w8a8kv8" [W4A8KV4]="$OUT/w4a8kv4-kvquant" [W4A4KV4]="$OUT/w4a4kv4-prefixquant")
echo "built in $(($(date +%s) - t_start)) s"

echo
echo "== the model: $G"
$S inspect -m "$G" | sed -n '1,7p'
$S --version | sed -n '2,3p'

echo
echo "== its outlier structure: the first token is a massive outlier and the attention sink"
$S analyze -m "$G" --data "$CALIB" --samples 2 --len 256 2>/dev/null >"$OUT/analyze.txt"
grep -E "^outlier tokens|^attention mass|^  layer (2|11|12|18): " "$OUT/analyze.txt"

echo
echo "== quantize: three artifacts (calibration where a method needs it: 4 x 128 tokens of C4)"
quantize() {  # NAME FLAGS...
  local name=$1 t0
  shift
  t0=$(date +%s)
  $S quantize -m "$G" "$@" -o "${model[$name]}" --force 2>"$OUT/$name.quantize.log" >/dev/null
  printf '%-8s %4d s  %s\n' "$name" $(($(date +%s) - t0)) "$(sed -n 's/.*: quantization //p' "$OUT/$name.quantize.log" | head -1)"
}
quantize W8A8KV8 --preset w8a8kv8 --prefix bos
quantize W4A8KV4 --preset kvquant-4bit-1pct --w-bits 4 --w-group 128 --w-clip grid --a-bits 8 --prefix bos "${calib[@]}"
quantize W4A4KV4 --preset prefixquant-w4a4kv4 "${calib[@]}"
# The bytes of an artifact, to compare across hosts (docs/architecture.md "Reproducibility": the
# same on every host of one kernel path).
echo "W4A4KV4 artifact: tensors sha256 $(sha256sum "${model[W4A4KV4]}/model.safetensors" | cut -c1-16)"

echo
echo "== each configuration: WikiText-2 perplexity over 8 windows of 512 (the same 4,088 targets, each"
echo "   behind its KV prefix: [BOS], or the outlier tokens PrefixQuant found) and its KL divergence to fp;"
echo "   a greedy sample; speed on this host (median of 3)"
P="The Eiffel Tower is"
declare -A ppl kld dec pre mb sample
for n in "${names[@]}"; do
  m=${model[$n]}
  if [ "$n" = fp ]; then
    $S ppl -m "$m" -f "$TEXT" --ctx 512 --max-windows 8 --prefix bos 2>/dev/null >"$OUT/$n.ppl.txt"
  else
    $S ppl -m "$m" -f "$TEXT" --ctx 512 --max-windows 8 --kld 2>/dev/null >"$OUT/$n.ppl.txt"
  fi
  ppl[$n]=$(awk '/^mean NLL/ {print $5}' "$OUT/$n.ppl.txt")
  kld[$n]=$(awk '/^KLD/ {print $2}' "$OUT/$n.ppl.txt")
  sample[$n]=$($S generate -m "$m" -p "$P" -n 24 --temp 0 2>/dev/null | tr '\n' ' ')
  $S bench -m "$m" --prefill 64 --decode 32 --reps 3 --no-profile --no-hook-probe 2>/dev/null >"$OUT/$n.bench.txt"
  pre[$n]=$(awk '/^prefill/ {print $4}' "$OUT/$n.bench.txt")
  dec[$n]=$(awk '/^decode +[0-9]+ tokens/ {print $4}' "$OUT/$n.bench.txt")
  mb[$n]=$(sed -n 's/.*(\([0-9.]*\) MB weights\/token).*/\1/p' "$OUT/$n.bench.txt")
  echo "$n done"
done

echo
printf '| %-8s | %10s | %10s | %13s | %14s | %18s |\n' config perplexity "KLD vs fp" "decode tok/s" "prefill tok/s" "MB read per token"
printf '|%s|%s|%s|%s|%s|%s|\n' ---------- ------------ ------------ --------------- ---------------- --------------------
for n in "${names[@]}"; do
  printf '| %-8s | %10s | %10s | %13s | %14s | %18s |\n' "$n" "${ppl[$n]}" "${kld[$n]:-0}" "${dec[$n]}" "${pre[$n]}" "${mb[$n]}"
done
echo
echo "greedy, from \"$P\":"
for n in "${names[@]}"; do printf '  %-8s %s\n' "$n" "${sample[$n]}"; done

echo
echo "(perplexity figures: the same targets for every row, so the differences are the methods';"
echo " docs/results-smollm2.md has them over 16 windows with standard errors, the papers' ladders,"
echo " and the artifact over MPI ranks: docs/scale.md)"
echo "demo: $(($(date +%s) - t_start)) s in all"
