#!/usr/bin/env bash
# Builds the input-facing and ISA-sensitive test layers with AddressSanitizer + UndefinedBehavior-
# Sanitizer (gcc; build-asan/) and runs them: core, formats, io, tokenizer (every loader and
# parser), kernels, lowbit (every SIMD kernel against its scalar reference), cuda (the device
# arithmetic replayed on the host). Any report fails the
# test that triggered it (halt_on_error; no recovery). On an AVX-512 host the kernel layers run a
# second time on the AVX2 path. Called by scripts/test.sh (CI). SINKQ_SANITIZE_LAYERS overrides
# the layer list: "... runtime" adds the artifact loader and the packed model (clean on
# 2026-11-26: 326 tests, 16 minutes with the build on 2 cores, past CI's budget: runtime pulls
# in model, quant, calib and train and the SmolLM2 simulator comparisons; the loader is fuzzed
# under ASan by scripts/fuzz.sh instead).
set -euo pipefail
cd "$(dirname "$0")/.."
layers="${SINKQ_SANITIZE_LAYERS:-core formats io tokenizer kernels lowbit cuda}"
bash scripts/install-deps.sh
# -O1: a third of -O3's compile time, and sanitizer reports keep their line numbers.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DSINKQ_SANITIZE=address,undefined -DSINKQ_BUILD_BENCH=OFF >/dev/null
targets=() labels=()
for l in $layers; do targets+=("${l}_test"); labels+=("$l"); done
ninja -C build-asan -j"$(nproc)" "${targets[@]}"
re="^($(IFS='|'; echo "${labels[*]}"))\$"
export SINKQ_THREADS=2
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# ASan makes the code 2-4x slower: the per-case timeouts (tests/CMakeLists.txt) are 6x the
# measured times, which still covers it.
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L "$re"
if grep -qw avx512f /proc/cpuinfo; then
  echo "sanitize: second pass on the AVX2 path: kernels, lowbit"
  SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L '^(kernels|lowbit)$'
fi
