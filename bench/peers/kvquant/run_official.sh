#!/usr/bin/env bash
# The official KVQuant fake-quant (SqueezeAILab/KVQuant quant/llama_simquant.py) on SmolLM2-135M
# beside sinkq: CPU, fp32, local data, per-window NLL as JSON. See README.md for what official.patch
# changes and why. Nothing here is copied into sinkq.
#
# Usage: bash bench/peers/kvquant/run_official.sh [ROW ...]      (default rows: fp u2-1pct)
# Rows (K per-channel pre-RoPE with offline-calibrated ranges, V per-token online: the official
# defaults --perchannel '["k_proj"]' --pertoken '["v_proj"]'):
#   fp                 --abits 16
#   u{2,3,4}[-1pct][-sink]     uniform (asymmetric min-max integer) levels
#   nuq{2,3,4}[-1pct][-sink][-qnorm]  Fisher-weighted k-means levels (fisher_local.py first)
#   -1pct: --include_sparse --sparsity-threshold 0.99; -sink: --first_few_fp16 1 (the window's
#   first token, [BOS] under the bos / prefix protocols, kept in full precision); -qnorm: --norm.
# Environment:
#   OFFICIAL  checkout of the official repo (default $PEERS/src/KVQuant; cloned from the
#             local mirror or GitHub at commit $COMMIT and patched when absent)
#   VENV      python venv with torch (CPU), transformers, numpy, scikit-learn (default $PEERS/venv; PEERS = ~/.cache/sinkq-peers as setup.sh prepares)
#   MODEL     HF directory of SmolLM2-135M(-Instruct) (default $PEERS/smollm2-hf)
#   IDS       calibration token ids, {"ids": [...]} per line (default: `sinkq calib ids` with the
#             sinkq defaults if $SINKQ exists, else the official get_c4 recipe on the C4 jsonl)
#   NSAMPLES=8 CTX=512 WINDOWS=8 PROTOCOL=prefix|bos|gptq THREADS=1 OUT=dir
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MAIN=$(cd "$HERE/../../.." && pwd)
COMMIT=${COMMIT:-57a238357f0ffe50084670fcd5781c9848f80ea2}
PEERS=${PEERS:-$HOME/.cache/sinkq-peers}
OFFICIAL=${OFFICIAL:-$PEERS/src/KVQuant}
VENV=${VENV:-$PEERS/venv}
MODEL=${MODEL:-$PEERS/smollm2-hf}
NSAMPLES=${NSAMPLES:-8}
CTX=${CTX:-512}
WINDOWS=${WINDOWS:-8}
PROTOCOL=${PROTOCOL:-prefix}
THREADS=${THREADS:-1}
OUT=${OUT:-$PEERS/out/kvquant}
TEST=${TEST:-$MAIN/../shared/data/wikitext-2/wikitext2_test_joined.txt}
C4=${C4:-$MAIN/../shared/data/c4/c4_train_00000_first1000.jsonl}
SINKQ=${SINKQ:-$MAIN/build/src/cli/sinkq}
GGUF=${GGUF:-$MAIN/../shared/models/smollm2-135m-instruct-q4_1/model.gguf}
mkdir -p "$OUT"
PY="$VENV/bin/python"

if [ ! -f "$OFFICIAL/quant/llama_simquant.py" ]; then
  MIRROR=/work/.mirror/SqueezeAILab+KVQuant/repo
  SRC=$([ -d "$MIRROR" ] && echo "$MIRROR" || echo https://github.com/SqueezeAILab/KVQuant)
  git clone -q --no-checkout "$SRC" "$OFFICIAL"
  git -C "$OFFICIAL" sparse-checkout init --no-cone
  printf '/quant/*.py\n/quant/kvquant/\n/quant/pyproject.toml\n/gradients/run-fisher.py\n' > "$OFFICIAL/.git/info/sparse-checkout"
  git -C "$OFFICIAL" checkout -q "$(git -C "$OFFICIAL" rev-parse --verify -q "$COMMIT^{commit}" || echo HEAD)"
fi
if ! grep -q 'sinkq peer patch' "$OFFICIAL/quant/llama_simquant.py"; then
  git -C "$OFFICIAL" apply "$HERE/official.patch"
fi

# Calibration ids: the same tokens sinkq calibrates on.
CAL=()
if [ -n "${IDS:-}" ]; then
  CAL=(--calib-ids "$IDS")
elif [ -x "$SINKQ" ]; then
  IDS="$OUT/calib_ids.jsonl"
  [ -s "$IDS" ] || "$SINKQ" calib ids -m "$GGUF" --calib "$C4" --calib-samples "$NSAMPLES" --calib-len "$CTX" -o "$IDS" --force
  CAL=(--calib-ids "$IDS")
else
  echo "run_official: no IDS and no sinkq binary: official get_c4 sampling of $C4 (not sinkq's tokens)" >&2
  CAL=(--calib-text "$C4")
fi

cd "$OFFICIAL/quant"
export PYTHONPATH="$OFFICIAL/quant${PYTHONPATH:+:$PYTHONPATH}"
COMMON=(--nsamples "$NSAMPLES" --seqlen "$CTX" --threads "$THREADS")
EVAL=(--test-file "$TEST" --protocol "$PROTOCOL" --windows "$WINDOWS")

fisher_dir() {  # Fisher information of the calibration samples (once)
  local d="$OUT/fisher"
  [ -s "$d/pytorch_model.bin" ] || "$PY" fisher_local.py "$MODEL" "${CAL[@]}" --nsamples "$NSAMPLES" --seqlen "$CTX" \
    --threads "$THREADS" --out "$d" >"$OUT/fisher.log" 2>&1
  echo "$d"
}

rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(fp u2-1pct)
for row in "${rows[@]}"; do
  flags=()
  case "$row" in
    fp) flags=(--abits 16) ;;
    u[234]*|nuq[234]*)
      b=${row#u}; b=${b#nuq}; b=${b:0:1}
      flags=(--abits "$b")
      [[ $row == nuq* ]] && flags+=(--nuq --fisher "$(fisher_dir)")
      [[ $row == *-1pct* ]] && flags+=(--include_sparse --sparsity-threshold 0.99)
      [[ $row == *-sink* ]] && flags+=(--first_few_fp16 1)
      [[ $row == *-qnorm* ]] && flags+=(--norm)
      ;;
    *) echo "run_official: unknown row '$row'" >&2; exit 2 ;;
  esac
  echo "run_official: $row (${flags[*]})" >&2
  t0=$(date +%s)
  if [ "$row" != fp ]; then
    # calibration (the official two-step flow: --quantize writes the quantizers' pickle)
    "$PY" llama_simquant.py "$MODEL" "${COMMON[@]}" "${CAL[@]}" "${flags[@]}" --quantize \
      --quantizer-path "$OUT/$row.pickle" >"$OUT/$row.calib.log" 2>&1
  fi
  # evaluation flags: --fisher only matters for calibration
  ev=(); skip=0
  for f in "${flags[@]}"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    if [ "$f" = --fisher ]; then skip=1; continue; fi
    ev+=("$f")
  done
  "$PY" llama_simquant.py "$MODEL" "${COMMON[@]}" "${EVAL[@]}" "${ev[@]}" \
    --quantizer-path "$OUT/$row.pickle" --json-out "$OUT/$row.json" >"$OUT/$row.eval.log" 2>&1
  "$PY" - "$OUT/$row.json" "$row" "$(( $(date +%s) - t0 ))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:24s} ppl {r['ppl']:.4f}  mean NLL {r['mean_nll']:.5f}  windows {r['windows']}  "
      f"({r['protocol']}, {r['tokens_scored']} predictions, {sys.argv[3]} s)")
print("  per-window NLL:", " ".join(f"{x:.5f}" for x in r['window_nll']))
PY
done
