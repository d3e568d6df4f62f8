#!/usr/bin/env bash
# Builds sinkq and runs every test (unit, golden, CLI). Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/models/stories260K ]; then
  echo "test: ../shared (models, golden outputs, tokenizers) must sit beside the checkout" >&2
  exit 1
fi
bash scripts/build.sh
# SINKQ_THREADS=2: the CI machine has 2 cores; tests compare against references, not speed.
# OpenMP waits passively in every test (CMake sets it per test; the CLI sets it for itself).
export SINKQ_THREADS=2
ctest --test-dir build --output-on-failure -j"$(nproc)"
# The Python module (python/: pybind11) against the CLI, from build/python (no second engine build).
echo "test: the Python module (python/run_tests.sh, pytest)"
bash python/run_tests.sh
# Hosts differ: some expose AVX-512 (VNNI), others only AVX2 (the hypervisor hides AVX-512), and
# OpenBLAS picks its kernels per CPU too. On an AVX-512 host the ISA-sensitive layers run a second
# time as an AVX2-only host runs them; on an AVX2 host the first pass already was that path.
isa_layers='^(formats|kernels|lowbit|quant|model|runtime|calib|eval|engine|train)$'
if grep -qw avx512f /proc/cpuinfo; then
  echo "test: second pass on the AVX2 path (SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell): $isa_layers"
  SINKQ_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --test-dir build --output-on-failure -j"$(nproc)" -L "$isa_layers"
else
  echo "test: this host has no AVX-512: the pass above ran the AVX2 path"
fi
# The scalar reference kernels under the model-level tests of the kernel layers.
echo "test: scalar kernel path (SINKQ_ISA=scalar): kernels, lowbit"
SINKQ_ISA=scalar ctest --test-dir build --output-on-failure -j"$(nproc)" -L '^(kernels|lowbit)$'
# The loaders, parsers and kernels again under AddressSanitizer + UndefinedBehaviorSanitizer
# (docs/reliability.md).
echo "test: ASan + UBSan build of the input-facing and ISA-sensitive layers (scripts/sanitize.sh)"
bash scripts/sanitize.sh
