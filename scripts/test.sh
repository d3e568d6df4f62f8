#!/usr/bin/env bash
# Builds sinkq and runs every test (unit, golden, CLI). Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/models/stories260K ]; then
  echo "test: ../shared (models, golden outputs, tokenizers) must sit beside the checkout" >&2
  exit 1
fi
# The CUDA room (src/cuda) compiles on every CI host, GPU or not, so it never rots: nvcc from the
# machine or NVIDIA's compiler packages from PyPI (scripts/cuda-toolchain.sh). Its device test
# runs on a GPU machine (scripts/device_check.sh); tests/cuda replays its arithmetic here.
nvcc=$(bash scripts/cuda-toolchain.sh)
bash scripts/build.sh -DSINKQ_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"
# SINKQ_THREADS=2: the CI machine has 2 cores; tests compare against references, not speed.
# OpenMP waits passively in every test (CMake sets it per test; the CLI sets it for itself).
export SINKQ_THREADS=2
ctest --test-dir build --output-on-failure -j"$(nproc)"
# The Python module (python/: pybind11) against the CLI, from build/python (no second engine build).
echo "test: the Python module (python/run_tests.sh, pytest)"
bash python/run_tests.sh
# Hosts differ: the kernel path (AVX-512, or AVX2 where the hypervisor hides it) and the kernel
# set OpenBLAS picks per CPU model decide a result's bits (docs/architecture.md "Reproducibility").
# The ISA-sensitive layers run again as every other host kind CI has run on that this CPU can act as
# (scripts/host-kinds.txt, scripts/as-host.sh), so a test that holds only on the kind at hand fails
# here, not on the next CI host. The pass above ran as this host (or as SINKQ_ISA /
# OPENBLAS_CORETYPE in the environment say): its kind is not run twice.
isa_layers='^(formats|kernels|lowbit|quant|model|runtime|calib|eval|engine|train)$'
echo "test: this host: $(./build/src/cli/sinkq --version | tail -n +2 | paste -sd ';' -)"
native_isa="$(./build/src/cli/sinkq --version | sed -n 's/^kernels: \([a-z0-9]*\) .*/\1/p')"
# The kernel set the test binaries got (they run unpinned; the CLI pins OpenBLAS to Haswell's).
native_core="$(python3 -c "import ctypes; f = ctypes.CDLL('libopenblas.so.0').openblas_get_corename
f.restype = ctypes.c_char_p; print(f().decode())")" || native_core=unknown
echo "test: the test binaries' OpenBLAS kernel set: $native_core"
for kind in $(bash scripts/as-host.sh --list-usable); do
  read -r isa core <<<"$(awk -v k="$kind" '$1 == k { print $2, $3 }' scripts/host-kinds.txt)"
  if [ "$isa" = "$native_isa" ] && [ "$core" = "$native_core" ]; then
    echo "test: host kind $kind is this host's own: the pass above ran it"
    continue
  fi
  echo "test: as host kind $kind (SINKQ_ISA=$isa OPENBLAS_CORETYPE=$core): $isa_layers"
  bash scripts/as-host.sh "$kind" ctest --test-dir build --output-on-failure -j"$(nproc)" -L "$isa_layers"
done
# The scalar reference kernels under the model-level tests of the kernel layers.
echo "test: scalar kernel path (SINKQ_ISA=scalar): kernels, lowbit"
SINKQ_ISA=scalar ctest --test-dir build --output-on-failure -j"$(nproc)" -L '^(kernels|lowbit)$'
# The loaders, parsers and kernels again under AddressSanitizer + UndefinedBehaviorSanitizer
# (docs/reliability.md).
echo "test: ASan + UBSan build of the input-facing and ISA-sensitive layers (scripts/sanitize.sh)"
bash scripts/sanitize.sh
