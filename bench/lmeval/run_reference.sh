#!/usr/bin/env bash
# Independent lm-evaluation-harness reference for sinkq's `eval` tasks (README.md beside this file).
#
#   bash bench/lmeval/run_reference.sh
#
# 1. creates the venv (once) with the pinned lm-eval / transformers / torch;
# 2. writes the GGUF model as a float32 HF directory (once; convert_gguf.py);
# 3. runs lm_eval (hf model, cpu, batch 1, zero-shot) on the 7 cs_* tasks for the first $LIMIT
#    items, and on $BIG_TASKS for the first $LIMIT_BIG items;
# 4. summarises the logged samples into $OUT/reference.json (summarize.py).
# Everything can be overridden from the environment:
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-/tmp/lmeval-venv}"
GGUF="${GGUF:-$HERE/../../../shared/models/smollm2-135m-instruct-q4_1/model.gguf}"
DATA_DIR="${DATA_DIR:-$HERE/../../../shared/data/commonsense}"
HF_DIR="${HF_DIR:-/tmp/smollm2-hf}"
OUT="${OUT:-/tmp/lmeval-out}"
LIMIT="${LIMIT:-50}"            # items per task; "all" for the whole files (hours on 2 cores)
LIMIT_BIG="${LIMIT_BIG:-200}"   # second run on BIG_TASKS; empty to skip
BIG_TASKS="${BIG_TASKS:-piqa arc_easy}"
THREADS="${THREADS:-2}"
TASKS="piqa arc_easy arc_challenge winogrande boolq openbookqa social_iqa"

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

# 1. venv (versions that were used for the committed numbers; lm-eval 0.4.13 works with transformers 5.24).
if ! "$VENV/bin/python" -c "import lm_eval, transformers, torch, gguf, accelerate" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q torch==2.15.0 transformers==5.24.0 gguf==0.19.0 accelerate==1.15.0 \
    lm-eval==0.4.13 numpy==2.4.6
fi
PY="$VENV/bin/python"
"$PY" -c "from importlib.metadata import version as v; print(*[f'{p} {v(p)}' for p in ('lm-eval', 'transformers', 'torch', 'gguf', 'accelerate', 'tokenizers', 'numpy')], sep=', ')"

# 2. model
if [ ! -f "$HF_DIR/model.safetensors" ]; then
  nice "$PY" "$HERE/convert_gguf.py" "$GGUF" "$HF_DIR"
fi

# Task YAMLs with the data directory filled in.
mkdir -p "$OUT"
rm -rf "$OUT/tasks"
cp -r "$HERE/tasks" "$OUT/tasks"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
sed -i "s#/work/shared/data/commonsense#$DATA_DIR#" "$OUT/tasks"/cs_*.yaml
"$PY" "$OUT/tasks/utils.py" "$DATA_DIR"   # parses every item of every file; lists failures

run() {  # run LIMIT TASK...
  local limit="$1"; shift
  local names; names="$(printf 'cs_%s,' "$@")"; names="${names%,}"
  local lim=(--limit "$limit"); [ "$limit" = all ] && lim=()
  echo "== lm_eval limit $limit: $names"
  /usr/bin/time -f "wall %e s" nice "$VENV/bin/lm_eval" --model hf \
    --model_args "pretrained=$HF_DIR,dtype=float32,attn_implementation=eager" \
    --include_path "$OUT/tasks" --tasks "$names" "${lim[@]}" \
    --log_samples --output_path "$OUT/limit$limit" --batch_size 1 --device cpu \
    2>&1 | tee "$OUT/limit$limit.log" | { grep -v -e "it/s]" -e "s/it]" || true; }
}
rm -rf "$OUT/limit$LIMIT"
run "$LIMIT" $TASKS
RUNS=("$OUT/limit$LIMIT")
if [ -n "$LIMIT_BIG" ]; then
  rm -rf "$OUT/limit$LIMIT_BIG"
  run "$LIMIT_BIG" $BIG_TASKS
  RUNS+=("$OUT/limit$LIMIT_BIG")
fi

# 4. summary
"$PY" "$HERE/summarize.py" --out "$OUT/reference.json" --tokenizer "$HF_DIR" "${RUNS[@]}"
