#!/usr/bin/env bash
# The GPU check of issue 40, in one call on the GPU machine (under 10 minutes):
#   bash scripts/device_check.sh OUT_DIR
# with .device/bundle.tar.xz made here first by scripts/device_bundle.sh and carried along. Writes
# to OUT_DIR: device.txt (nvidia-smi, nvcc), nvcc_device.txt (the kernels compiled again by that
# machine's nvcc for sm_90a, with ptxas' register / spill report), cuda_test.log + .xml (the
# device test: bit for bit the CPU), memcheck.log / racecheck.log (compute-sanitizer over the
# small cases), bench.txt + bench.json (GEMV against the copy bandwidth), torch.txt (PyTorch's
# fp16 GEMV at the same shapes, the baseline); prints a summary last.
set -uo pipefail
OUT=${1:?usage: device_check.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
t0=$(date +%s)
step() { echo "device_check: [$(($(date +%s) - t0)) s] $*" >&2; }
summary=()
{ date -u; nvidia-smi; nvcc --version; } >"$OUT/device.txt" 2>&1
[ -f .device/bundle.tar.xz ] || { echo "device_check: no .device/bundle.tar.xz (run scripts/device_bundle.sh here, carry .device)" >&2; exit 2; }
rm -rf /tmp/sinkq-bundle && mkdir -p /tmp/sinkq-bundle
tar -C /tmp/sinkq-bundle -xJf .device/bundle.tar.xz 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .device/bundle.tar.xz /tmp/sinkq-bundle
B=/tmp/sinkq-bundle/bundle
run() { LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }  # the bundle's libraries for its binaries only
step "bundle of commit $(cat $B/commit) ($(wc -l <$B/dirty) files changed)"

step "the kernels through this machine's nvcc (sm_90a)"
rc=0
for cu in src/cuda/*.cu; do
  nvcc -std=c++17 -I src -gencode=arch=compute_90a,code=sm_90a -fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
    -Xptxas -v -c "$cu" -o /tmp/sinkq-kernels.o >>"$OUT/nvcc_device.txt" 2>&1 || rc=$?
done
summary+=("device nvcc sm_90a (every .cu): rc=$rc")

step "device test"
run timeout 300 "$B/bin/sinkq_cuda_test" --gtest_output="xml:$OUT/cuda_test.xml" >"$OUT/cuda_test.log" 2>&1
rc=$?
summary+=("cuda test: rc=$rc; $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/cuda_test.log" | tr '\n' ' ')")

small='*SmallCasesForTheSanitizers*:*NonFinite*:*Refuses*:CudaKvStore.*'
for tool in memcheck racecheck; do
  step "compute-sanitizer $tool"
  run timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/bin/sinkq_cuda_test" --gtest_filter="$small" \
    >"$OUT/$tool.log" 2>&1
  summary+=("compute-sanitizer $tool: rc=$? ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" || echo 'no summary'))")
done

step "benchmark"
run timeout 240 "$B/bin/sinkq_cuda_bench" --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
summary+=("bench: rc=$?")

step "PyTorch baseline"
timeout 120 python3 bench/cuda/torch_gemv.py >"$OUT/torch.txt" 2>&1
summary+=("torch baseline: rc=$?")

step "done"
cat "$OUT/bench.txt" "$OUT/torch.txt"
printf '%s\n' "${summary[@]}"
