#!/usr/bin/env bash
# Builds the CUDA test and benchmark here (no GPU needed) and packs them for the GPU machine:
# .device/bundle.tar.xz holds bin/ (sinkq_cuda_test, sinkq_cuda_bench) and lib/ (the shared
# libraries they load that a bare CUDA image lacks: OpenBLAS, oneDNN, fmt, OpenMP; the C and C++
# runtimes and the CUDA driver come from that machine, whose Ubuntu is newer than Debian 12). .device/ is git-ignored and travels with
# the device tool's `carry`; scripts/device_check.sh unpacks and runs it there.
#   bash scripts/device_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(bash scripts/cuda-toolchain.sh)
bash scripts/build.sh -DSINKQ_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" sinkq_cuda_test sinkq_cuda_bench
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
rm -rf .device/bundle .device/bundle.tar.xz
mkdir -p .device/bundle/bin .device/bundle/lib
cp build/tests/sinkq_cuda_test build/bench/sinkq_cuda_bench .device/bundle/bin/
for b in .device/bundle/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so|/ld-linux' | while read -r lib; do cp -L "$lib" .device/bundle/lib/; done
git rev-parse HEAD >.device/bundle/commit
git status --porcelain >.device/bundle/dirty
tar -C .device -cJf .device/bundle.tar.xz bundle
rm -rf .device/bundle
echo "device_bundle: .device/bundle.tar.xz ($(du -h .device/bundle.tar.xz | cut -f1)); carry .device to the GPU machine" >&2
