#!/usr/bin/env bash
# sinkq artifacts made from a GGUF, side by side with the GGUF itself: llama.cpp on the file's own
# blocks (its native type, e.g. Q4_K_M), sinkq on the same file (held as stored, the fp model) and
# sinkq on each artifact (real packed low-bit kernels, its KV cache format and prefix).
# Interleaved rounds, medians; prefill of PREFILL tokens, then DECODE tokens decoded after it
# (llama-bench: pp at depth 0, tg at depth PREFILL). Prints a markdown table with the host's ISA and
# the read-bandwidth probe of the first sinkq run.
# Usage: bash bench/artifacts_vs_llamacpp.sh GGUF NAME=ARTIFACT_DIR [NAME=ARTIFACT_DIR ...]
# llama.cpp is built by bench/vs_llamacpp.sh (BUILD_ONLY=1) into its SCRATCH. Environment: THREADS
# ("1 2"), REPS (3), PREFILL (128), DECODE (32), SCRATCH, LCPP (as vs_llamacpp.sh), SINKQ
# (build/src/cli/sinkq), OUT ($SCRATCH/artifacts).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
LCPP="${LCPP:-0.3.36}"
SCRATCH="${SCRATCH:-/tmp/sinkq-vs-llamacpp}"
OUT="${OUT:-$SCRATCH/artifacts}"
REPS="${REPS:-3}"
THREADS="${THREADS:-1 2}"
PREFILL="${PREFILL:-128}"
DECODE="${DECODE:-32}"
SINKQ="${SINKQ:-$ROOT/build/src/cli/sinkq}"
log() { echo "artifacts_vs_llamacpp: $*" >&2; }

[ $# -ge 2 ] || { echo "usage: bash bench/artifacts_vs_llamacpp.sh GGUF NAME=ARTIFACT_DIR [NAME=ARTIFACT_DIR ...]" >&2; exit 2; }
GGUF=$1
shift
[ -f "$GGUF" ] || { echo "artifacts_vs_llamacpp: $GGUF not found" >&2; exit 1; }
NAMES=(fp)
PATHS=("$GGUF")
for a in "$@"; do
  case "$a" in *=*) ;; *) echo "artifacts_vs_llamacpp: '$a' is not NAME=ARTIFACT_DIR" >&2; exit 2 ;; esac
  [ -f "${a#*=}/sinkq_recipe.json" ] || { echo "artifacts_vs_llamacpp: ${a#*=} is not a sinkq artifact (no sinkq_recipe.json)" >&2; exit 1; }
  NAMES+=("${a%%=*}")
  PATHS+=("${a#*=}")
done
[ -x "$SINKQ" ] || { echo "artifacts_vs_llamacpp: $SINKQ not found: run bash scripts/build.sh first" >&2; exit 1; }
LBIN="$SCRATCH/build-$LCPP/bin"
[ -x "$LBIN/llama-bench" ] || BUILD_ONLY=1 SCRATCH="$SCRATCH" LCPP="$LCPP" bash "$HERE/vs_llamacpp.sh"
mkdir -p "$OUT"

for r in $(seq 1 "$REPS"); do
  for th in $THREADS; do
    log "round $r/$REPS, $th thread(s): llama.cpp"
    "$LBIN/llama-bench" -m "$GGUF" -p "$PREFILL" -n "$DECODE" -d "0,$PREFILL" -t "$th" -r 1 -o json \
      >"$OUT/llama-t$th-r$r.json" 2>"$OUT/llama-t$th-r$r.err"
    for i in "${!NAMES[@]}"; do
      log "round $r/$REPS, $th thread(s): sinkq ${NAMES[$i]}"
      "$SINKQ" bench -m "${PATHS[$i]}" --prefill "$PREFILL" --decode "$DECODE" --reps 1 --threads "$th" \
        --no-hook-probe --json >"$OUT/sinkq-$i-t$th-r$r.json" 2>"$OUT/sinkq-$i-t$th-r$r.err"
    done
  done
done

python3 - "$OUT" "$REPS" "$THREADS" "$PREFILL" "$GGUF" "${NAMES[@]}" <<'PY' | tee "$OUT/tables.md"
import json, os, statistics, sys
out, reps, threads, prefill, gguf, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4]), sys.argv[5], sys.argv[6:]
def load(p): return json.load(open(os.path.join(out, p)))
first = load(f"sinkq-0-t{threads[0]}-r1.json")
print(f"{os.path.basename(gguf)}; sinkq bench: {first['isa']} kernels, {first['cpu']}, read-bandwidth probe "
      f"{first['measured_read_gbs']:.1f} GB/s; medians of {reps} interleaved rounds")
print()
print(f"| run | threads | prefill {prefill} tok/s | decode tok/s | / llama.cpp (prefill, decode) | peak RSS GB |")
print("|---|---|---|---|---|---|")
m = statistics.median
for th in threads:
    lp, lg = [], []
    for r in range(1, reps + 1):
        for e in load(f"llama-t{th}-r{r}.json"):
            if e["n_prompt"] > 0 and e.get("n_depth", 0) == 0: lp.append(e["avg_ts"])
            if e["n_gen"] > 0 and e.get("n_depth", 0) == prefill: lg.append(e["avg_ts"])
    print(f"| llama.cpp (the file's own blocks) | {th} | {m(lp):.1f} | {m(lg):.2f} | 1 | |")
    for i, name in enumerate(names):
        p, d, rss = [], [], []
        for r in range(1, reps + 1):
            s = load(f"sinkq-{i}-t{th}-r{r}.json")
            p.append(s["prefill_tokens_per_s"]); d.append(s["decode_tokens_per_s"]); rss.append(s["peak_rss_bytes"] / 1e9)
        label = "sinkq fp (the GGUF as stored)" if i == 0 else f"sinkq {name}"
        print(f"| {label} | {th} | {m(p):.1f} | {m(d):.2f} | {m(p)/m(lp):.2f}x, {m(d)/m(lg):.2f}x | {m(rss):.2f} |")
PY
log "done: $OUT/tables.md"
