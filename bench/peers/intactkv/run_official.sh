#!/usr/bin/env bash
# Runs the official IntactKV code (github.com/ruikangliu/IntactKV, patched with official.patch) on one
# row, without and with IntactKV[B], and writes both runs' per-window NLL sums and the paired deltas.
#
#   bench/peers/intactkv/run_official.sh CHECKOUT MODEL_DIR ROW N_WINDOWS OUT_JSON
#
# ROW: w3g128-rtn       W3 g128 asym RTN, weights only (intactkv_eval.py --quant_method rtn)
#      w4a4-rot         QuaRot rotation, W4 sym per-channel RTN, A4 sym per-token (clip A_CLIP, default 1.0),
#                       KV16 -- the setting sinkq can express
#      w4a4-rot-quarot  scripts/eval/quarot.sh as released: GPTQ act-order + weight MSE clip, A4 clip 0.9,
#                       K4/V4 asym per head (group = head_dim) clip 0.95; GPTQ calibrates on CAL_IDS
#                       ({"ids": [...]} jsonl, e.g. `sinkq calib ids`) -- the release uses 128 x 2048 tokens of
#                       WikiText-2 train, which needs the HF dataset
# Environment: PY (python, default $PEERS/venv/bin/python, PEERS = ~/.cache/sinkq-peers as setup.sh), DATA (WikiText-2 test text, default
# ../shared/data/wikitext-2/wikitext2_test_joined.txt beside the checkout), TOKEN_IDS (JSON list of token ids used instead of
# tokenizing DATA), PROTOCOL (sinkq_prefix (default) | official), THREADS (torch threads, default 1),
# A_CLIP (w4a4-rot only), CAL_IDS (w4a4-rot-quarot), SEED (rotation seed, default 0), EMBED_MEAN (1: QuaRot's
# embedding mean subtraction as released, not exact before RMSNorm; default 0 for w4a4-rot, 1 for w4a4-rot-quarot).
set -euo pipefail
if [ $# -ne 5 ]; then sed -n 2,22p "$0"; exit 2; fi
CHECKOUT=$(cd "$1" && pwd); MODEL=$(cd "$2" && pwd); ROW=$3; N=$4; OUT=$5
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-${PEERS:-$HOME/.cache/sinkq-peers}/venv/bin/python}
DATA=${DATA:-$HERE/../../../shared/data/wikitext-2/wikitext2_test_joined.txt}
PROTOCOL=${PROTOCOL:-sinkq_prefix}
THREADS=${THREADS:-1}
SEED=${SEED:-0}

if [ ! -f "$CHECKOUT/fast_hadamard_transform.py" ]; then
  git -C "$CHECKOUT" apply "$HERE/official.patch"
fi
DATA_ARGS=(--data_file "$DATA")
[ -n "${TOKEN_IDS:-}" ] && DATA_ARGS=(--token_ids_file "$TOKEN_IDS")
COMMON=(--max_windows "$N" --ppl_protocol "$PROTOCOL" --threads "$THREADS" "${DATA_ARGS[@]}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run_one() {  # $1 = off|on
  local flag=() out="$WORK/$1.json"
  [ "$1" = on ] && flag=(--intactkv)
  mkdir -p "$WORK/out_$1"
  case "$ROW" in
    w3g128-rtn)
      (cd "$CHECKOUT" && "$PY" intactkv_eval.py --tasks ppl --fp16_model_path "$MODEL" --quant_method rtn \
        --bits 3 --group_size 128 --kv_bits 16 --dtype float32 --output_dir "$WORK/out_$1" \
        "${flag[@]}" "${COMMON[@]}" --out_json "$out") ;;
    w4a4-rot)
      (cd "$CHECKOUT" && SINKQ_PEER_DTYPE=float32 SINKQ_PEER_EMBED_MEAN=${EMBED_MEAN:-0} "$PY" intactkv_quarot.py --model "$MODEL" --seed "$SEED" --rotate \
        --w_bits 4 --w_rtn --a_bits 4 --a_clip_ratio "${A_CLIP:-1.0}" --output_dir "$WORK/out_$1" \
        "${flag[@]}" "${COMMON[@]}" --out_json "$out") ;;
    w4a4-rot-quarot)
      [ -n "${CAL_IDS:-}" ] || { echo "w4a4-rot-quarot needs CAL_IDS (jsonl of calibration token ids)" >&2; exit 2; }
      HD=$("$PY" -c "import json,sys; c=json.load(open(sys.argv[1]+'/config.json')); print(c.get('head_dim') or c['hidden_size']//c['num_attention_heads'])" "$MODEL")
      (cd "$CHECKOUT" && SINKQ_PEER_DTYPE=float32 SINKQ_PEER_EMBED_MEAN=${EMBED_MEAN:-1} "$PY" intactkv_quarot.py --model "$MODEL" --seed "$SEED" --rotate \
        --act_order --w_bits 4 --w_clip --a_bits 4 --a_clip_ratio 0.9 \
        --k_bits 4 --k_asym --k_groupsize "$HD" --k_clip_ratio 0.95 \
        --v_bits 4 --v_asym --v_groupsize "$HD" --v_clip_ratio 0.95 --cal_ids_jsonl "$CAL_IDS" \
        --output_dir "$WORK/out_$1" "${flag[@]}" "${COMMON[@]}" --out_json "$out") ;;
    *) echo "unknown row '$ROW'" >&2; exit 2 ;;
  esac
}
run_one off
run_one on
"$PY" - "$WORK/off.json" "$WORK/on.json" "$OUT" "$ROW" <<'PYEOF'
import json, math, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
rows = []
for a, b in zip(off["windows"], on["windows"]):
    assert a["window"] == b["window"] and a["targets"] == b["targets"]
    rows.append({"window": a["window"], "targets": a["targets"], "nll_off": a["nll_sum"] / a["targets"],
                 "nll_on": b["nll_sum"] / b["targets"], "delta": (b["nll_sum"] - a["nll_sum"]) / a["targets"]})
d = [r["delta"] for r in rows]
mean = sum(d) / len(d)
se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else 0.0
res = {"row": sys.argv[4], "protocol": off["protocol"], "setting": off["setting"], "windows": rows,
       "mean_nll_off": off["mean_nll"], "mean_nll_on": on["mean_nll"],
       "ppl_off": math.exp(off["mean_nll"]), "ppl_on": math.exp(on["mean_nll"]),
       "paired_delta_mean": mean, "paired_delta_se": se, "off": off, "on": on}
json.dump(res, open(sys.argv[3], "w"), indent=1)
for r in rows:
    print(f"window {r['window']:3d}  off {r['nll_off']:.5f}  on {r['nll_on']:.5f}  delta {r['delta']:+.5f}")
print(f"{sys.argv[4]}: ppl off {res['ppl_off']:.4f}  on {res['ppl_on']:.4f}  paired delta NLL {mean:+.5f} +- {se:.5f}")
PYEOF
