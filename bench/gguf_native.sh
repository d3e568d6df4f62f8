#!/usr/bin/env bash
# A GGUF file run as it is, side by side: llama.cpp on the file's own blocks, sinkq on the same
# blocks (SINKQ_GGUF_WEIGHTS=stored, its default: decoded in registers by dequant_simd.inc), and
# sinkq on the file dequantized to fp32 at load (=f32) — the same bits as stored, 4-7x the bytes.
# Interleaved rounds, medians; prefill of PREFILL tokens, then DECODE tokens decoded after it
# (llama-bench: pp at depth 0, tg at depth PREFILL). Prints a markdown table with the host's ISA and
# the read-bandwidth probe of sinkq bench's first run.
# Usage: bash bench/gguf_native.sh [GGUF ...]   (default: the bundled SmolLM2-135M Q4_1 and, when
# cached, the 1.5B of scripts/fetch_model.sh). llama.cpp is built by bench/vs_llamacpp.sh
# (BUILD_ONLY=1) into its SCRATCH. Environment: THREADS ("1 2"), REPS (3), PREFILL (128), DECODE
# (32), SCRATCH, LCPP (as vs_llamacpp.sh), SINKQ (build/src/cli/sinkq), OUT ($SCRATCH/gguf-native).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
LCPP="${LCPP:-0.3.36}"
SCRATCH="${SCRATCH:-/tmp/sinkq-vs-llamacpp}"
OUT="${OUT:-$SCRATCH/gguf-native}"
REPS="${REPS:-3}"
THREADS="${THREADS:-1 2}"
PREFILL="${PREFILL:-128}"
DECODE="${DECODE:-32}"
SINKQ="${SINKQ:-$ROOT/build/src/cli/sinkq}"
log() { echo "gguf_native: $*" >&2; }

MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=("$ROOT/../shared/models/smollm2-135m-instruct-q4_1/model.gguf")
  Q="$HOME/.cache/sinkq-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  [ -s "$Q" ] && MODELS+=("$Q")
fi
[ -x "$SINKQ" ] || { echo "gguf_native: $SINKQ not found: run bash scripts/build.sh first" >&2; exit 1; }
for m in "${MODELS[@]}"; do [ -f "$m" ] || { echo "gguf_native: $m not found" >&2; exit 1; }; done
LBIN="$SCRATCH/build-$LCPP/bin"
[ -x "$LBIN/llama-bench" ] || BUILD_ONLY=1 SCRATCH="$SCRATCH" LCPP="$LCPP" bash "$HERE/vs_llamacpp.sh"
mkdir -p "$OUT"

for r in $(seq 1 "$REPS"); do
  for i in "${!MODELS[@]}"; do
    m=${MODELS[$i]}
    for th in $THREADS; do
      log "round $r/$REPS, model $i, $th thread(s)"
      "$LBIN/llama-bench" -m "$m" -p "$PREFILL" -n "$DECODE" -d "0,$PREFILL" -t "$th" -r 1 -o json \
        >"$OUT/llama-m$i-t$th-r$r.json" 2>"$OUT/llama-m$i-t$th-r$r.err"
      for w in stored f32; do
        SINKQ_GGUF_WEIGHTS=$w "$SINKQ" bench -m "$m" --prefill "$PREFILL" --decode "$DECODE" --reps 1 \
          --threads "$th" --no-hook-probe --json >"$OUT/sinkq-$w-m$i-t$th-r$r.json" 2>"$OUT/sinkq-$w-m$i-t$th-r$r.err"
      done
    done
  done
done

python3 - "$OUT" "$REPS" "$THREADS" "$PREFILL" "${MODELS[@]}" <<'PY' | tee "$OUT/tables.md"
import json, os, statistics, sys
out, reps, threads, prefill, models = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4]), sys.argv[5:]
def load(p): return json.load(open(os.path.join(out, p)))
first = load(f"sinkq-stored-m0-t{threads[0]}-r1.json")
print(f"sinkq bench: {first['isa']} kernels, {first['cpu']}, read-bandwidth probe {first['measured_read_gbs']:.1f} GB/s; "
      f"medians of {reps} interleaved rounds")
print()
print(f"| model | threads | prefill {prefill} tok/s: llama.cpp | sinkq stored | sinkq f32 | decode tok/s: llama.cpp | sinkq stored | sinkq f32 | stored / llama.cpp (prefill, decode) | peak RSS GB: stored | f32 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
m = statistics.median
for i, path in enumerate(models):
    for th in threads:
        lp, lg, sp, sd, fp, fd, srss, frss = [], [], [], [], [], [], [], []
        for r in range(1, reps + 1):
            for e in load(f"llama-m{i}-t{th}-r{r}.json"):
                if e["n_prompt"] > 0 and e.get("n_depth", 0) == 0: lp.append(e["avg_ts"])
                if e["n_gen"] > 0 and e.get("n_depth", 0) == prefill: lg.append(e["avg_ts"])
            s, f = load(f"sinkq-stored-m{i}-t{th}-r{r}.json"), load(f"sinkq-f32-m{i}-t{th}-r{r}.json")
            sp.append(s["prefill_tokens_per_s"]); sd.append(s["decode_tokens_per_s"]); srss.append(s["peak_rss_bytes"] / 1e9)
            fp.append(f["prefill_tokens_per_s"]); fd.append(f["decode_tokens_per_s"]); frss.append(f["peak_rss_bytes"] / 1e9)
        print(f"| {os.path.basename(os.path.dirname(path)) if path.endswith('model.gguf') else os.path.basename(path)} | {th} | "
              f"{m(lp):.1f} | {m(sp):.1f} | {m(fp):.1f} | {m(lg):.2f} | {m(sd):.2f} | {m(fd):.2f} | "
              f"{m(sp)/m(lp):.2f}x, {m(sd)/m(lg):.2f}x | {m(srss):.2f} | {m(frss):.2f} |")
PY
log "done: $OUT/tables.md"
