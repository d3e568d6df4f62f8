#!/usr/bin/env bash
# lm-evaluation-harness's `local-completions` model against `sinkq serve`, compared item by item
# with `sinkq eval`, and the server's echo logprobs against `sinkq ppl` (not run by CI).
#
#   bash bench/server/lmeval_local.sh
#
# 1. starts `sinkq serve -m SmolLM2 --ctx 2048 --port 0 --json --alias smollm2` (port from its
#    first stdout line);
# 2. lm_eval --model local-completions (tokenized_requests=True: the tokenizer backend is
#    auto-detected from the server's /tokenizer_info + /tokenize) on cs_arc_easy and cs_piqa of
#    bench/lmeval/tasks (the same LLM-Adapters files as `sinkq eval`), --limit $LIMIT, --log_samples;
#    checks that lm-eval's log says it used the remote tokenizer;
# 3. sends the first $PPL_WINDOWS WikiText-2 windows of $PPL_CTX tokens (as `sinkq ppl --protocol
#    gptq` cuts them) as token ids with echo=true, logprobs=0, max_tokens=0;
#    then (DIAGNOSE=1, default; not a check) re-sends lm-eval's requests and records what the server
#    generated, to explain mismatches (compare_lmeval.py diagnose);
# 4. stops the server with SIGTERM (exit code 0 required);
# 5. runs `sinkq eval --tasks arc_easy,piqa --limit $LIMIT --samples --json` and `sinkq ppl --ctx
#    $PPL_CTX --max-windows $PPL_WINDOWS --protocol gptq --json`;
# 6. compare_lmeval.py compare: acc / acc_norm, per-item predictions, per-choice log-likelihoods
#    (|Δ| ≤ $TOL nats) and the window NLLs (relative ≤ $PPL_RTOL).
# Environment overrides: VENV (/tmp/lmeval-venv: lm-eval 0.4.13 from bench/lmeval/run_reference.sh, plus
# tenacity, which lm-eval's API models need and this script installs when missing),
# GGUF, DATA_DIR, WIKITEXT, OUT (/tmp/lmeval-serve), LIMIT (200), THREADS (server / eval threads;
# default: sinkq's, all cores), TOL (1e-3), PPL_RTOL (1e-6), PPL_CTX (512), PPL_WINDOWS (4).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${VENV:-/tmp/lmeval-venv}"
SINKQ="${SINKQ:-$ROOT/build/src/cli/sinkq}"
GGUF="${GGUF:-$ROOT/../shared/models/smollm2-135m-instruct-q4_1/model.gguf}"
DATA_DIR="${DATA_DIR:-$ROOT/../shared/data/commonsense}"
WIKITEXT="${WIKITEXT:-$ROOT/../shared/data/wikitext-2/wikitext2_test_joined.txt}"
OUT="${OUT:-/tmp/lmeval-serve}"
LIMIT="${LIMIT:-200}"
TOL="${TOL:-1e-3}"
PPL_RTOL="${PPL_RTOL:-1e-6}"
PPL_CTX="${PPL_CTX:-512}"
PPL_WINDOWS="${PPL_WINDOWS:-4}"
ALIAS=smollm2
THREAD_ARGS=(); [ -n "${THREADS:-}" ] && THREAD_ARGS=(--threads "$THREADS")
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

# lm-eval's API models also need tenacity (lm-eval[api]; not in the venv run_reference.sh makes).
"$VENV/bin/python" -c "import tenacity, aiohttp, requests" 2>/dev/null || "$VENV/bin/pip" install -q tenacity
"$VENV/bin/python" -c "from importlib.metadata import version as v; print(*[f'{p} {v(p)}' for p in ('lm-eval', 'tenacity', 'aiohttp', 'requests')], sep=', ')"
mkdir -p "$OUT"
rm -rf "$OUT/tasks" "$OUT/lm_eval"
cp -r "$ROOT/bench/lmeval/tasks" "$OUT/tasks"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
sed -i "s#/work/shared/data/commonsense#$DATA_DIR#" "$OUT/tasks"/cs_*.yaml

# 1. the server
"$SINKQ" serve -m "$GGUF" --ctx 2048 --port 0 --json --alias "$ALIAS" "${THREAD_ARGS[@]}" \
  >"$OUT/serve.stdout" 2>"$OUT/serve.log" &
SERVER_PID=$!
trap '[ -n "${SERVER_PID:-}" ] && kill -TERM "$SERVER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q . "$OUT/serve.stdout" 2>/dev/null && [ "$(tail -c1 "$OUT/serve.stdout" | od -An -c | tr -d ' ')" = '\n' ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "sinkq serve died:"; cat "$OUT/serve.log"; exit 1; }
  sleep 0.5
done
PORT="$(head -1 "$OUT/serve.stdout" | python3 -c 'import json, sys; print(json.load(sys.stdin)["port"])')"
echo "sinkq serve: pid $SERVER_PID, port $PORT ($(head -1 "$OUT/serve.stdout"))"
BASE="http://127.0.0.1:$PORT"

# 2. lm-eval
echo "== lm_eval local-completions, limit $LIMIT"
T0=$(date +%s)
"$VENV/bin/lm_eval" --model local-completions \
  --model_args "model=$ALIAS,base_url=$BASE/v1/completions,num_concurrent=1,max_retries=3,tokenized_requests=True" \
  --include_path "$OUT/tasks" --tasks cs_arc_easy,cs_piqa --limit "$LIMIT" --batch_size 1 \
  --log_samples --output_path "$OUT/lm_eval" 2>&1 | tee "$OUT/lm_eval.log" | { grep -v -e "it/s]" -e "s/it]" || true; }
T1=$(date +%s)
echo "lm_eval wall: $((T1 - T0)) s"
if grep -q "Auto-detected remote tokenizer support" "$OUT/lm_eval.log" && grep -q "Using remote tokenizer from" "$OUT/lm_eval.log"; then
  echo "lm-eval used the remote tokenizer: $(grep -m1 -o 'Using remote tokenizer from.*' "$OUT/lm_eval.log")"
else
  echo "FAIL: lm-eval's log does not say that it used the server's tokenizer"; exit 1
fi
curl -s "$BASE/metrics" | grep -E '^sinkq_(requests_total|prompt_tokens_total|generated_tokens_total)' >"$OUT/metrics.txt" || true
cat "$OUT/metrics.txt"

# 3. WikiText-2 windows through the server
"$VENV/bin/python" "$HERE/compare_lmeval.py" windows --port "$PORT" --model "$GGUF" --file "$WIKITEXT" \
  --ctx "$PPL_CTX" --windows "$PPL_WINDOWS" --out "$OUT/windows.json"

# 3b. diagnosis (not a check): lm-eval's requests re-sent, with what the server generated
if [ "${DIAGNOSE:-1}" = 1 ]; then
  "$VENV/bin/python" "$HERE/compare_lmeval.py" diagnose --port "$PORT" --lmeval-dir "$OUT/lm_eval" --out "$OUT/diag.json"
fi

# 4. stop
kill -TERM "$SERVER_PID"
RC=0
wait "$SERVER_PID" || RC=$?
SERVER_PID=
echo "sinkq serve: SIGTERM → exit code $RC"
[ "$RC" = 0 ] || { echo "FAIL: sinkq serve exited $RC on SIGTERM"; tail -20 "$OUT/serve.log"; exit 1; }

# 5. sinkq's own evaluator and perplexity
echo "== sinkq eval --tasks arc_easy,piqa --limit $LIMIT"
T0=$(date +%s)
"$SINKQ" eval -m "$GGUF" --tasks arc_easy,piqa --limit "$LIMIT" --samples --json "${THREAD_ARGS[@]}" \
  --data "$DATA_DIR" >"$OUT/sinkq_eval.json" 2>"$OUT/sinkq_eval.log"
echo "sinkq eval wall: $(( $(date +%s) - T0 )) s"
"$SINKQ" ppl -m "$GGUF" -f "$WIKITEXT" --ctx "$PPL_CTX" --max-windows "$PPL_WINDOWS" --protocol gptq --json \
  "${THREAD_ARGS[@]}" >"$OUT/sinkq_ppl.json" 2>"$OUT/sinkq_ppl.log"

# 6. compare
"$VENV/bin/python" "$HERE/compare_lmeval.py" compare --lmeval-dir "$OUT/lm_eval" --sinkq-eval "$OUT/sinkq_eval.json" \
  --ppl "$OUT/sinkq_ppl.json" --windows "$OUT/windows.json" --tol "$TOL" --ppl-rtol "$PPL_RTOL" \
  --diag "$OUT/diag.json" | tee "$OUT/compare.txt"
