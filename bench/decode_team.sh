#!/usr/bin/env bash
# Decode with and without the step team (kernels/team.h), 1 and 2 threads, idle and beside one busy
# process, side by side and interleaved (issue 19: small-model decode threading).
#
#   bash bench/decode_team.sh            # after bash scripts/build.sh; ~10 min on 2 cores at REPS=3
#
# Each round runs `sinkq bench -m $GGUF --quant $QUANT --prefill $PREFILL --decode $DECODE` once per
# (load, threads, team) cell, SINKQ_TEAM=0 (an OpenMP region per parallel loop, as before the team)
# and SINKQ_TEAM=1 (one team per step) next to each other. Medians over $REPS rounds of decode
# tokens/s for the fp32 model and each --quant config; the read-bandwidth probe and ISA of the
# first run. "busy": one `while :; do :; done` process beside the run (a shared 2-core machine).
# Environment: REPS (3), QUANT (w8a8-head8,w4a8-head8), PREFILL (512), DECODE (64), LOADS
# ("idle busy"), THREADS ("1 2"), GGUF, SINKQ (build/src/cli/sinkq), OUT (/tmp/sinkq-decode-team).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS="${REPS:-3}"
QUANT="${QUANT:-w8a8-head8,w4a8-head8}"
PREFILL="${PREFILL:-512}"
DECODE="${DECODE:-64}"
LOADS="${LOADS:-idle busy}"
THREADS="${THREADS:-1 2}"
GGUF="${GGUF:-$ROOT/../shared/models/smollm2-135m-instruct-q4_1/model.gguf}"
SINKQ="${SINKQ:-$ROOT/build/src/cli/sinkq}"
OUT="${OUT:-/tmp/sinkq-decode-team}"
[ -x "$SINKQ" ] || { echo "decode_team.sh: $SINKQ not found: run bash scripts/build.sh first" >&2; exit 1; }
[ -f "$GGUF" ] || { echo "decode_team.sh: model $GGUF not found" >&2; exit 1; }
mkdir -p "$OUT"
rm -f "$OUT"/*.json

busy_pid=""
stop_busy() { if [ -n "$busy_pid" ]; then kill "$busy_pid" 2>/dev/null || true; wait "$busy_pid" 2>/dev/null || true; busy_pid=""; fi; }
trap stop_busy EXIT

for r in $(seq "$REPS"); do
  for load in $LOADS; do
    if [ "$load" = busy ]; then (while :; do :; done) & busy_pid=$!; fi
    for th in $THREADS; do
      for team in 0 1; do
        echo "round $r/$REPS: $load, $th thread(s), team $team" >&2
        SINKQ_TEAM=$team "$SINKQ" bench -m "$GGUF" --quant "$QUANT" --prefill "$PREFILL" --decode "$DECODE" \
          --reps 1 --no-profile --no-hook-probe --threads "$th" --json > "$OUT/r${r}_${load}_t${th}_team${team}.json" \
          2> "$OUT/r${r}_${load}_t${th}_team${team}.log"
      done
    done
    stop_busy
  done
done

python3 - "$OUT" "$REPS" "$LOADS" "$THREADS" <<'PY'
import json, statistics, sys
out, reps, loads, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def load(r, l, t, team):
    with open(f"{out}/r{r}_{l}_t{t}_team{team}.json") as f:
        return json.load(f)
first = load(1, loads[0], threads[0], 0)
names = ["fp32"] + [c["name"] for c in first.get("configs", [])[1:]]
def decode(j, name):
    if name == "fp32":
        return j["decode_tokens_per_s"]
    return next(c["decode_tokens_per_s"] for c in j["configs"] if c["name"] == name)
print(f"SmolLM2-135M decode tok/s after {first['prefill_tokens']} tokens, {first['decode_tokens']} steps; "
      f"{first['isa']} kernels (lowbit {first['lowbit_isa']}), read-bandwidth probe {first['measured_read_gbs']:.1f} GB/s "
      f"(first run), medians of {reps} interleaved rounds")
print()
print("| config | load | threads | team off | team on | on / off | on: 2 thr / 1 thr |")
print("|---|---|---|---|---|---|---|")
med = {}
for name in names:
    for l in loads:
        for t in threads:
            for team in (0, 1):
                med[name, l, t, team] = statistics.median(decode(load(r, l, t, team), name) for r in range(1, reps + 1))
for name in names:
    for l in loads:
        for t in threads:
            off, on = med[name, l, t, 0], med[name, l, t, 1]
            scale = ""
            if t != threads[0]:
                scale = f"{on / med[name, l, threads[0], 1]:.2f}"
            print(f"| {name} | {l} | {t} | {off:.1f} | {on:.1f} | {on / off:.2f} | {scale} |")
PY
