#!/usr/bin/env bash
# sinkq's kernels against ggml's, kernel by kernel, in one Google Benchmark binary (issue 19 goal 1;
# not run by CI). bench/vs_ggml/vs_ggml.cc says what each pair runs.
#
#   bash bench/vs_ggml.sh              # native ISA;  ISA=avx2 bash bench/vs_ggml.sh: both as an AVX2-only host
#
# 1. ggml: the llama.cpp build of bench/vs_llamacpp.sh (BUILD_ONLY=1: the llama-cpp-python sdist's
#    vendored source, CPU only, Release; reused when it is there).
# 2. A separate CMake build of sinkq ($SCRATCH/vs_ggml-build[-avx2]) with SINKQ_VS_GGML_SRC / _LIB
#    set, target sinkq_vs_ggml only.
# 3. Runs it: $REPS repetitions, randomly interleaved, medians; prints a markdown table of the pairs
#    (sinkq ÷ ggml time: < 1 is faster) with the host's ISA and the read-bandwidth probe.
# Environment: SCRATCH (/tmp/sinkq-vs-llamacpp), LCPP (0.3.36), REPS (3), ISA (native | avx2),
# FILTER (a --benchmark_filter regex; default all), JOBS (nproc).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
LCPP="${LCPP:-0.3.36}"
SCRATCH="${SCRATCH:-/tmp/sinkq-vs-llamacpp}"
REPS="${REPS:-3}"
ISA="${ISA:-native}"
JOBS="${JOBS:-$(nproc)}"
case "$ISA" in
  native) SUFFIX="" ;;
  avx2) SUFFIX="-avx2"; export SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell ;;
  *) echo "vs_ggml: ISA='$ISA': expected native or avx2" >&2; exit 1 ;;
esac
log() { echo "vs_ggml: $*" >&2; }

BUILD_ONLY=1 ISA="$ISA" SCRATCH="$SCRATCH" LCPP="$LCPP" bash "$HERE/vs_llamacpp.sh"
SRC="$SCRATCH/llama_cpp_python-$LCPP/vendor/llama.cpp"
LIB="$SCRATCH/build-$LCPP$SUFFIX/bin"
[ -f "$LIB/libggml-cpu.so" ] || { echo "vs_ggml: no libggml-cpu.so in $LIB" >&2; exit 1; }
B="$SCRATCH/vs_ggml-build$SUFFIX"
log "building sinkq_vs_ggml in $B"
cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSINKQ_BUILD_TESTS=OFF -DSINKQ_BUILD_PYTHON=OFF \
  -DSINKQ_VS_GGML_SRC="$SRC" -DSINKQ_VS_GGML_LIB="$LIB" >"$SCRATCH/vs_ggml-cmake$SUFFIX.log"
cmake --build "$B" -j "$JOBS" --target sinkq_vs_ggml >"$SCRATCH/vs_ggml-build$SUFFIX.log"
J="$SCRATCH/vs_ggml$SUFFIX.json"
log "running ($REPS repetitions, interleaved)"
"$B/bench/sinkq_vs_ggml" --benchmark_repetitions="$REPS" --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true --benchmark_out="$J" --benchmark_out_format=json \
  ${FILTER:+--benchmark_filter="$FILTER"} >&2
BW=$("$ROOT/build/src/cli/sinkq" bench --random tiny --prefill 8 --decode 2 --reps 1 --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["measured_read_gbs"], 1), "(" + d["isa"] + ")")' || echo "?")
python3 - "$J" "$ISA" "$BW" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
med = {}
for b in d["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    med[b["run_name"]] = b
kinds = ["fp32 GEMM T=512", "bf16 GEMV", "W8A8 / Q8_0 GEMV", "W4A8 / Q4_0 GEMV", "W8A8 / Q8_0 GEMM T=512",
         "W4A8 / Q4_0 GEMM T=512"]
print(f"host ISA path: {sys.argv[2]}; sinkq bench read-bandwidth probe: {sys.argv[3]} GB/s; medians of the repetitions")
print()
print("| kernel | shape | threads | ggml | time | sinkq | time | sinkq ÷ ggml time |")
print("|---|---|---|---|---|---|---|---|")
def key(name):
    a = [int(v) for v in name.split("/")[1:5]]
    return (a[0], -a[1], a[3])
for name in sorted((n for n in med if n.startswith("BM_Ggml/")), key=key):
    g = med[name]
    args = name.split("/")[1:5]
    for sname, s in med.items():
        if sname.startswith("BM_Sinkq/" + "/".join(args) + "/"):
            unit = g["time_unit"]
            gt, st = g["real_time"], s["real_time"]
            print(f"| {kinds[int(args[0])]} | {args[1]}x{args[2]} | {args[3]} | {g.get('label','')} | "
                  f"{gt:.0f} {unit} | {s.get('label','')} | {st:.0f} {unit} | **{st/gt:.2f}** |")
PY
