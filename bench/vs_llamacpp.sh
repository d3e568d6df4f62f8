#!/usr/bin/env bash
# sinkq against llama.cpp on the same real model, side by side and interleaved (issue 19; not run
# by CI: it builds llama.cpp, ~15 min on 2 cores, then measures, ~15 min).
#
#   bash bench/vs_llamacpp.sh            # after bash scripts/build.sh
#
# 1. llama.cpp from the source the PyPI package llama-cpp-python ships (its sdist vendors
#    llama.cpp; nothing else is downloaded): `pip download --no-binary :all: llama-cpp-python==$LCPP`
#    into $SCRATCH, then CMake, CPU only, Release, GGML_NATIVE (the host's ISA, as llama.cpp builds
#    by default), the targets llama-bench, llama-quantize and llama-perplexity. Kept in $SCRATCH:
#    a second run reuses the build.
# 2. The model: the bundled SmolLM2-135M GGUF (Q4_1 linears, Q8_0 embedding), requantized by
#    llama-quantize --allow-requantize to Q8_0, Q4_0 and F32 — from the same dequantized values
#    that sinkq reads from that file (sinkq quantizes them to W8 / W4 itself).
# 3. Speed, $REPS rounds, each round llama.cpp then sinkq (interleaved, so load changes hit both),
#    at 1 and 2 threads: prefill of 512 tokens and 64 decode steps after it — llama-bench
#    `-p 512 -n 64 -d 0,512` (pp512 at depth 0, and tg64 at depth 512), `sinkq bench --prefill 512 --decode 64`
#    (decode after its 512-token prefill). Pairs: F32 ↔ fp32, Q8_0 ↔ W8A8 and W8A8 + int8 head,
#    Q4_0 ↔ W4A8 (per output channel), W4A8 + int8 head and W4A8 g32 + int8 head (Q4_0's own
#    granularity: blocks of 32 with one scale; llama-quantize keeps the tied table in Q8_0); and
#    the +int8 head rows with sinkq's int8 KV cache (kv8: llama.cpp's default KV is f16, sinkq's fp32). Medians over the rounds; ratios sinkq ÷ llama.cpp.
# 4. Perplexity on the same targets: `llama-perplexity -c 512 --chunks $CHUNKS` and `sinkq ppl
#    --protocol llamacpp --ctx 512 --max-windows $CHUNKS` (eval/ppl.h: llama-perplexity's chunks,
#    the second half of each scored), WikiText-2 test, same tokenizer.
# 5. Prints markdown tables (and writes them to $OUT/tables.md) with the host's ISA and the
#    read-bandwidth probe of sinkq bench's first run.
# Environment: LCPP (0.3.36), SCRATCH (/tmp/sinkq-vs-llamacpp), OUT ($SCRATCH/out), REPS (3),
# THREADS ("1 2"), CHUNKS (16), GGUF, WIKITEXT, SINKQ (build/src/cli/sinkq), JOBS (nproc),
# BUILD_ONLY (1: stop after steps 1-2), ISA (native | avx2: on an AVX-512 host, both engines as an
# AVX2-only host runs them — llama.cpp built with GGML_NATIVE=OFF and AVX/AVX2/FMA/F16C only, into
# its own build directory, and sinkq with SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
LCPP="${LCPP:-0.3.36}"
SCRATCH="${SCRATCH:-/tmp/sinkq-vs-llamacpp}"
OUT="${OUT:-$SCRATCH/out}"
REPS="${REPS:-3}"
THREADS="${THREADS:-1 2}"
CHUNKS="${CHUNKS:-16}"
GGUF="${GGUF:-$ROOT/../shared/models/smollm2-135m-instruct-q4_1/model.gguf}"
WIKITEXT="${WIKITEXT:-$ROOT/../shared/data/wikitext-2/wikitext2_test_joined.txt}"
SINKQ="${SINKQ:-$ROOT/build/src/cli/sinkq}"
JOBS="${JOBS:-$(nproc)}"
ISA="${ISA:-native}"
case "$ISA" in
  native) CPU_FLAGS=(-DGGML_NATIVE=ON); SUFFIX="" ;;
  avx2) CPU_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF)
        SUFFIX="-avx2"; export SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell ;;
  *) echo "vs_llamacpp: ISA='$ISA': expected native or avx2" >&2; exit 1 ;;
esac
log() { echo "vs_llamacpp: $*" >&2; }

[ -x "$SINKQ" ] || { echo "vs_llamacpp: $SINKQ not found: run bash scripts/build.sh first" >&2; exit 1; }
[ -f "$GGUF" ] || { echo "vs_llamacpp: model $GGUF not found (GGUF=...)" >&2; exit 1; }
[ -f "$WIKITEXT" ] || { echo "vs_llamacpp: $WIKITEXT not found (WIKITEXT=...)" >&2; exit 1; }
mkdir -p "$SCRATCH" "$OUT"

# ---- 1. llama.cpp -----------------------------------------------------------------------------
SRC="$SCRATCH/llama_cpp_python-$LCPP/vendor/llama.cpp"
BUILD="$SCRATCH/build-$LCPP$SUFFIX"
if [ ! -x "$BUILD/bin/llama-bench" ] || [ ! -x "$BUILD/bin/llama-quantize" ] || [ ! -x "$BUILD/bin/llama-perplexity" ]; then
  if [ ! -d "$SRC" ]; then
    log "downloading the llama-cpp-python $LCPP sdist"
    python3 -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$LCPP" -d "$SCRATCH"
    tar -xzf "$SCRATCH/llama_cpp_python-$LCPP.tar.gz" -C "$SCRATCH"
  fi
  [ -f "$SRC/CMakeLists.txt" ] || { echo "vs_llamacpp: no vendored llama.cpp in the sdist ($SRC)" >&2; exit 1; }
  log "building llama.cpp ($SRC) into $BUILD with $JOBS jobs"
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CPU_FLAGS[@]}" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=OFF >"$OUT/cmake.log"
  cmake --build "$BUILD" -j "$JOBS" --target llama-bench llama-quantize llama-perplexity >"$OUT/build.log"
fi
LBIN="$BUILD/bin"

# ---- 2. the model in llama.cpp's types ----------------------------------------------------------
for t in Q8_0 Q4_0 F32; do
  f="$SCRATCH/smollm2-$t.gguf"
  if [ ! -s "$f" ]; then
    log "llama-quantize --allow-requantize -> $t"
    "$LBIN/llama-quantize" --allow-requantize "$GGUF" "$f.tmp" "$t" >"$OUT/quantize-$t.log" 2>&1
    mv "$f.tmp" "$f"
  fi
done

if [ "${BUILD_ONLY:-0}" = 1 ]; then log "BUILD_ONLY: llama.cpp and the models are in $SCRATCH"; exit 0; fi

# ---- 3. speed, interleaved ----------------------------------------------------------------------
for r in $(seq 1 "$REPS"); do
  for th in $THREADS; do
    for t in F32 Q8_0 Q4_0; do
      log "round $r/$REPS, $th thread(s): llama-bench $t"
      "$LBIN/llama-bench" -m "$SCRATCH/smollm2-$t.gguf" -p 512 -n 64 -d 0,512 -t "$th" -r 1 -o json \
        >"$OUT/llama-$t-t$th-r$r.json" 2>"$OUT/llama-$t-t$th-r$r.err"
    done
    log "round $r/$REPS, $th thread(s): sinkq bench"
    # fp32 weights (not the file's Q4_1 blocks, sinkq's default) beside llama.cpp's F32.
    SINKQ_GGUF_WEIGHTS=f32 "$SINKQ" bench -m "$GGUF" --quant fp32,w8a8,w8a8-head8,w8a8kv8-head8,w4a8,w4a8-head8,w4a8kv8-head8,w4a8-g32-head8 --prefill 512 --decode 64 --reps 1 \
      --threads "$th" --no-profile --no-hook-probe --json >"$OUT/sinkq-t$th-r$r.json" 2>"$OUT/sinkq-t$th-r$r.err"
  done
done

# ---- 4. perplexity on the same targets -----------------------------------------------------------
for t in F32 Q8_0 Q4_0; do
  log "llama-perplexity $t ($CHUNKS chunks of 512)"
  "$LBIN/llama-perplexity" -m "$SCRATCH/smollm2-$t.gguf" -f "$WIKITEXT" -c 512 --chunks "$CHUNKS" -t "$JOBS" \
    >"$OUT/ppl-llama-$t.out" 2>&1
done
for q in fp16 w8a8 w8a8-head8 w8a8kv8-head8 w4a8 w4a8-head8 w4a8kv8-head8 w4a8-g32-head8; do
  log "sinkq ppl $q (--protocol llamacpp, $CHUNKS windows)"
  "$SINKQ" ppl -m "$GGUF" -f "$WIKITEXT" --ctx 512 --protocol llamacpp --max-windows "$CHUNKS" --preset "$q" \
    --json >"$OUT/ppl-sinkq-$q.json" 2>/dev/null
done

# ---- 5. tables ----------------------------------------------------------------------------------
python3 - "$OUT" "$REPS" "$THREADS" "$LCPP" <<'PY' | tee "$OUT/tables.md"
import json, math, os, re, statistics, sys
out, reps, threads, lcpp = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def load(p): return json.load(open(os.path.join(out, p)))
first = load(f"sinkq-t{threads[0]}-r1.json")
commit = load(f"llama-Q8_0-t{threads[0]}-r1.json")[0].get("build_commit", "")

print(f"llama.cpp: llama-cpp-python {lcpp} sdist ({commit or 'vendored'}); sinkq bench: {first['isa']} kernels, "
      f"lowbit {first['lowbit_isa']}, read-bandwidth probe {first['measured_read_gbs']:.1f} GB/s; medians of {reps} "
      f"interleaved rounds")
print()
pairs = [("F32", "fp32"), ("Q8_0", "w8a8"), ("Q8_0", "w8a8-head8"), ("Q8_0", "w8a8kv8-head8"), ("Q4_0", "w4a8"),
         ("Q4_0", "w4a8-head8"), ("Q4_0", "w4a8kv8-head8"), ("Q4_0", "w4a8-g32-head8")]
msize = {t: load(f"llama-{t}-t{threads[0]}-r1.json")[0].get("model_size", 0) / 1e6 for t in ("F32", "Q8_0", "Q4_0")}
wbytes = {c["name"]: c["decode_weight_bytes"] / 1e6 for c in first["configs"]}
wbytes["fp32"] = first["decode_weight_bytes"] / 1e6
print("| threads | llama.cpp (file MB) | sinkq (MB read / token) | prefill 512 tok/s llama.cpp | sinkq | ratio | decode tok/s (after 512) llama.cpp | sinkq | ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for th in threads:
    for lt, sq in pairs:
        lp, lg, sp, sd = [], [], [], []
        for r in range(1, reps + 1):
            for e in load(f"llama-{lt}-t{th}-r{r}.json"):  # pp512 at depth 0, tg64 at depth 512
                if e["n_prompt"] > 0 and e.get("n_depth", 0) == 0: lp.append(e["avg_ts"])
                if e["n_gen"] > 0 and e.get("n_depth", 0) == 512: lg.append(e["avg_ts"])
            s = load(f"sinkq-t{th}-r{r}.json")
            if sq == "fp32":
                sp.append(s["prefill_tokens_per_s"]); sd.append(s["decode_tokens_per_s"])
            else:
                c = next(c for c in s["configs"] if c["name"] == sq)
                sp.append(c["prefill_tokens_per_s"]); sd.append(c["decode_tokens_per_s"])
        m = statistics.median
        print(f"| {th} | {lt} ({msize[lt]:.0f}) | {sq} ({wbytes[sq]:.0f}) | {m(lp):.1f} | {m(sp):.1f} | {m(sp)/m(lp):.2f}x | {m(lg):.1f} | {m(sd):.1f} | {m(sd)/m(lg):.2f}x |")
print()
print("| model | llama-perplexity | sinkq ppl --protocol llamacpp |")
print("|---|---|---|")
def lppl(t):
    txt = open(os.path.join(out, f"ppl-llama-{t}.out")).read()
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", txt)
    return f"{float(m.group(1)):.4f} ± {float(m.group(2)):.4f}" if m else "?"
for lt, sq in [("F32", "fp16"), ("Q8_0", "w8a8"), ("Q8_0", "w8a8-head8"), ("Q8_0", "w8a8kv8-head8"), ("Q4_0", "w4a8"),
               ("Q4_0", "w4a8-head8"), ("Q4_0", "w4a8kv8-head8"), ("Q4_0", "w4a8-g32-head8")]:
    s = load(f"ppl-sinkq-{sq}.json")
    n = s.get("tokens_scored", 0)
    print(f"| {lt} / {sq} | {lppl(lt)} | {s['ppl']:.4f} ({s['windows']} windows, {n} targets) |")
PY
log "done: $OUT/tables.md"
