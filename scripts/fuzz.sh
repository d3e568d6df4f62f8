#!/usr/bin/env bash
# Fuzzes sinkq's loaders with libFuzzer (clang-14; ASan + UBSan; fuzz/*.cc):
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
# Each target runs until 1,000,000 executions or SECONDS (default 600), whichever comes first,
# on one core (two runs with different TARGETs may go side by side once the first has built),
# from a seed corpus of the real files in ../shared (and an artifact written by sinkq quantize).
# Not part of CI (docs/reliability.md has the counts of the last run). Findings (crash-*, leak-*,
# timeout-*, oom-*) land in build-fuzz/findings/TARGET/; reproduce one with
#   build-fuzz/fuzz/TARGET build-fuzz/findings/TARGET/crash-...
# and keep it as a regression test. Exit status 1 when any target has a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-600}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(fuzz_safetensors fuzz_config fuzz_tokenizer_json fuzz_tokenizer_model fuzz_gguf
                              fuzz_artifact_recipe fuzz_artifact_tensors fuzz_server_request)
S=../shared
[ -d "$S/models/stories260K" ] || { echo "fuzz: ../shared must sit beside the checkout" >&2; exit 1; }
bash scripts/install-deps.sh clang-14 libclang-rt-14-dev libomp-14-dev
bash scripts/build.sh >/dev/null  # the Release sinkq writes the seed artifact
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSINKQ_FUZZ=ON \
  -DSINKQ_BUILD_TESTS=OFF -DSINKQ_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz fuzz_safetensors fuzz_config fuzz_tokenizer_json fuzz_tokenizer_model fuzz_gguf fuzz_artifact \
  fuzz_server_request

# Seed corpora: the real files in ../shared below a size cap, and, for the large kinds, the same
# files cut to their first 300 tokens / their small tensors (scripts/fuzz_seeds.py): a seed's size
# bounds every mutated input's, and a 2 MB tokenizer.json parses ~100 times a second under ASan.
C=build-fuzz/corpus-$$  # per run: two runs with different targets may go side by side
ART=build-fuzz/seed-artifact-$$
trap 'rm -rf "$C" "$ART"' EXIT
rm -rf "$C" && mkdir -p "$C"/{safetensors,config,tokenizer_json,tokenizer_model,gguf,artifact_recipe,artifact_tensors,server_request}
seed() {  # seed MAX_BYTES DIR FILE...: copies the files below MAX_BYTES, named after their path
  local max="$1" d="$2"; shift 2
  for f in "$@"; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt "$max" ] && cp "$f" "$d/$(echo "${f#$S/}" | tr / _)" || true
  done
}
build/src/cli/sinkq quantize -m "$S/models/stories260K" -o "$ART" --preset w8a8 --threads 2 >/dev/null 2>&1
python3 scripts/fuzz_seeds.py "$C/safetensors" "$S"/models/*/model.safetensors
python3 scripts/fuzz_seeds.py "$C/tokenizer_json" $(find "$S/models" "$S/tokenizers" -name tokenizer.json)
python3 scripts/fuzz_seeds.py "$C/gguf" $(find "$S/tokenizers" -name '*.gguf')
seed 100000 "$C/config" $(find "$S" -name 'config.json' -o -name '*_config.json')
seed 100000 "$C/tokenizer_json" $(find "$S/models" "$S/tokenizers" -name tokenizer.json)
seed 100000 "$C/tokenizer_model" $(find "$S" -name tokenizer.model)
seed 1000000 "$C/artifact_recipe" "$ART/sinkq_recipe.json"
seed 1000000 "$C/artifact_tensors" "$ART/model.safetensors"
# Request bodies of sinkq serve: the shapes its tests and lm-eval send.
i=0
for b in '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 1, "stop": ["\n", "END"]}' \
         '{"model": "m", "prompt": [[1, 2, 3]], "max_tokens": 1, "echo": true, "logprobs": 1, "temperature": 0, "seed": 1234}' \
         '{"prompt": ["a", "b"], "stream": true, "stream_options": {"include_usage": true}, "n": 1, "logit_bias": {}}' \
         '{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "logprobs": true, "top_logprobs": 2}' \
         '{"prompt": "x", "add_special_tokens": false}' '{"tokens": [1, 2, 511]}'; do
  printf '%s' "$b" > "$C/server_request/seed$((i++)).json"
done

status=0
printf '%-24s %12s %10s %9s %s\n' target executions exec/s seconds findings
for t in "${TARGETS[@]}"; do
  bin="$t" corpus="${t#fuzz_}" env=()
  case "$t" in
    fuzz_artifact_recipe) bin=fuzz_artifact env=(SINKQ_FUZZ_ARTIFACT="$ART" SINKQ_FUZZ_FILE=recipe) ;;
    fuzz_artifact_tensors) bin=fuzz_artifact env=(SINKQ_FUZZ_ARTIFACT="$ART" SINKQ_FUZZ_FILE=tensors) ;;
  esac
  F="build-fuzz/findings/$t"
  rm -rf "$F" && mkdir -p "$F"
  log="build-fuzz/$t.log"
  start=$(date +%s)
  env "${env[@]}" OMP_NUM_THREADS=1 "build-fuzz/fuzz/$bin" "$C/$corpus" -runs=1000000 \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$F/" >"$log" 2>&1 || true
  secs=$(( $(date +%s) - start ))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  n=$(find "$F" -type f | wc -l)
  ((n == 0)) || status=1
  printf '%-24s %12s %10s %9s %s\n' "$t" "${runs:-0}" "${speed:-0}" "$secs" "$n"
done
exit $status
