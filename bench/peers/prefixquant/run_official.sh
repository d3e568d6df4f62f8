#!/usr/bin/env bash
# Runs the official PrefixQuant code (github.com/ChenMnZ/PrefixQuant, commit 97cc15b) on the CPU
# in fp32, patched by official.patch (README.md here says why each hunk exists), on fixed
# calibration token ids, scoring the first N WikiText-2 windows of 2048 tokens.
#
#   run_official.sh OFFICIAL MODEL CALIB_IDS ROW SEARCH PREFIX OUT_JSON [WINDOWS]
#     OFFICIAL   the official repository: a checkout, or the git directory of a mirror
#                (the committed tree is exported; the checkout itself is never modified)
#     MODEL      HF model directory (e.g. SmolLM2-135M-Instruct)
#     CALIB_IDS  jsonl, one {"ids": [...]} per sample (exact token ids, BOS where it is)
#     ROW        w4a4kv4 | w4a8kv4 | w8a8kv8 | w4 | w8 | a8 | kv8 | fp | fp-rot
#                (quantized rows: rotation R1+R2 fused, online Hadamard on down_proj input and
#                 on q/k after RoPE; per-channel sym weights; static per-tensor sym activations;
#                 static sym KV, per head unless KV_GROUP=-1 (per tensor); w8 / a8 / kv8 quantize
#                 only weights / linear inputs / K and V at 8 bits, the rest 16 = not quantized)
#     SEARCH     on | off   (on = --mse_init: the official clip-factor search)
#     PREFIX     on | off   (on = --set_prefixed_tokens: the official finder, or PREFIX_IDS)
#     OUT_JSON   per-window NLL sums and target counts, ppl (written by the patched evaluate())
#     WINDOWS    number of 2048-token windows (default 4; 0 = all)
# Environment: PYTHON (default python3), THREADS (torch threads, default 1), WIKITEXT (default
# ../shared/data/wikitext-2/wikitext2_test_joined.txt beside the checkout), PREFIX_IDS (comma-separated ids: skip
# the finder), KV_GROUP (default head_dim), SEED (default 2, the official default), CTX (window,
# default 2048), PQ_EMBED_MEAN=0 skips the embedding mean-centring of fuse_layer_norms (default 1 =
# official), KEEP=1 keeps the patched copy.
set -euo pipefail
if [ $# -lt 7 ]; then sed -n 2,24p "$0"; exit 2; fi
OFFICIAL=$1; MODEL=$2; CALIB=$3; ROW=$4; SEARCH=$5; PREFIX=$6; OUT=$7; WINDOWS=${8:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
WIKI=${WIKITEXT:-$HERE/../../../shared/data/wikitext-2/wikitext2_test_joined.txt}
MODEL=$(cd "$MODEL" && pwd); MODEL_NAME=$(basename "$MODEL"); CALIB=$(readlink -f "$CALIB"); WIKI=$(readlink -f "$WIKI")
OUT=$(readlink -f "$OUT")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prefixquant-official.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
if git --git-dir="$OFFICIAL" rev-parse HEAD >/dev/null 2>&1 && [ ! -d "$OFFICIAL/.git" ]; then
  git --git-dir="$OFFICIAL" archive HEAD | tar -x -C "$WORK"     # a bare mirror
elif git -C "$OFFICIAL" rev-parse HEAD >/dev/null 2>&1; then
  git -C "$OFFICIAL" archive HEAD | tar -x -C "$WORK"            # a checkout: its committed tree
else
  cp -a "$OFFICIAL"/. "$WORK"/
fi
(cd "$WORK" && git apply --whitespace=nowarn "$HERE/official.patch")

# A transformers-5 model directory read by transformers 4.40: rope_theta at the top level and a
# tokenizer class 4.40 knows (README.md "Model directory for transformers 4.40").
mkdir -p "$WORK/model"
for f in "$MODEL"/*; do ln -s "$f" "$WORK/model/$(basename "$f")"; done
rm -f "$WORK/model/config.json" "$WORK/model/tokenizer_config.json"
"$PY" - "$MODEL" "$WORK/model" <<'PYEOF'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
c = json.load(open(os.path.join(src, "config.json")))
rp = c.pop("rope_parameters", None)
if rp:
    c.setdefault("rope_theta", rp.get("rope_theta", 10000.0))
    if rp.get("rope_type", "default") != "default":
        c["rope_scaling"] = rp
json.dump(c, open(os.path.join(dst, "config.json"), "w"), indent=1)
tc_path = os.path.join(src, "tokenizer_config.json")
tc = json.load(open(tc_path)) if os.path.exists(tc_path) else {}
if tc.get("tokenizer_class") in (None, "TokenizersBackend"):
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
tc.pop("backend", None)
json.dump(tc, open(os.path.join(dst, "tokenizer_config.json"), "w"), indent=1)
tj = os.path.join(src, "tokenizer.json")
if os.path.exists(tj):  # tokenizers >= 0.20 writes merges as pairs; 0.19 reads "a b" strings
    t = json.load(open(tj, encoding="utf-8"))
    m = t.get("model", {}).get("merges")
    if m and isinstance(m[0], list):
        t["model"]["merges"] = [" ".join(p) for p in m]
        os.remove(os.path.join(dst, "tokenizer.json"))
        json.dump(t, open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
MODEL="$WORK/model"
HEAD_DIM=$("$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('head_dim') or c['hidden_size']//c['num_attention_heads'])" "$MODEL/config.json")
KVG=${KV_GROUP:-$HEAD_DIM}
case "$ROW" in
  w4a4kv4) Q="--wbits 4 --input_bits 4 --k_bits 4 --v_bits 4" ;;
  w4a8kv4) Q="--wbits 4 --input_bits 8 --k_bits 4 --v_bits 4" ;;
  w8a8kv8) Q="--wbits 8 --input_bits 8 --k_bits 8 --v_bits 8" ;;
  w4)      Q="--wbits 4 --input_bits 16 --k_bits 16 --v_bits 16" ;;
  w8)      Q="--wbits 8 --input_bits 16 --k_bits 16 --v_bits 16" ;;   # 16 bits = no quantizer
  a8)      Q="--wbits 16 --input_bits 8 --k_bits 16 --v_bits 16" ;;   # (main.py:261-276)
  kv8)     Q="--wbits 16 --input_bits 16 --k_bits 8 --v_bits 8" ;;
  fp|fp-rot) Q="" ;;
  *) echo "unknown ROW $ROW" >&2; exit 2 ;;
esac
ARGS=(--model_path "$MODEL" --model_name "llama-$MODEL_NAME" --use_fp32
      --output_dir "$WORK/log" --cache_dir "$WORK/cache" --seed "${SEED:-2}"
      --calib_ids "$CALIB" --wikitext_file "$WIKI" --eval_windows "$WINDOWS" --eval_json "$OUT"
      --threads "${THREADS:-1}" --ppl_seqlen "${CTX:-2048}")
if [ "$ROW" != fp ]; then ARGS+=(--pre_rotate --down_online_had --qk_online_had); fi
if [ -n "$Q" ]; then
  # shellcheck disable=SC2206
  ARGS+=($Q --input_mode static --kv_mode static --kv_group_size "$KVG")
fi
case "$SEARCH" in on) ARGS+=(--mse_init) ;; off) ;; *) echo "SEARCH must be on|off" >&2; exit 2 ;; esac
case "$PREFIX" in
  on) ARGS+=(--set_prefixed_tokens); [ -n "${PREFIX_IDS:-}" ] && ARGS+=(--prefix_ids "$PREFIX_IDS") ;;
  off) ;;
  *) echo "PREFIX must be on|off" >&2; exit 2 ;;
esac
echo "+ (cd $WORK && PQ_EMBED_MEAN=${PQ_EMBED_MEAN:-1} OMP_NUM_THREADS=${THREADS:-1} $PY main.py ${ARGS[*]})" >&2
cd "$WORK" && OMP_NUM_THREADS=${THREADS:-1} TOKENIZERS_PARALLELISM=false "$PY" main.py "${ARGS[@]}"
