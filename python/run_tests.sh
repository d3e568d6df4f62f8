#!/usr/bin/env bash
# Tests the Python module (python/tests, pytest) as the main CMake build made it:
# build/python/sinkq/ (the extension _sinkq and the package files), so CI does not compile the
# engine a second time; the CLI comparisons use build/src/cli/sinkq. Needs ../shared beside the
# checkout (models, data). Run after scripts/build.sh (or `ninja -C build _sinkq sinkq`).
# Extra arguments go to pytest (e.g. -k generate, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! ls build/python/sinkq/_sinkq*.so >/dev/null 2>&1; then
  echo "python/run_tests.sh: build/python/sinkq/_sinkq*.so is missing: build the _sinkq target (python/CMakeLists.txt;" \
       "it is skipped when CMake finds no pybind11 or Python headers: scripts/install-deps.sh installs them)" >&2
  exit 1
fi
# numpy (the module's arrays), pytest, and the wheel's build backend (the pip-wheel test builds
# without isolation, so without the network).
if ! "$PY" -c "import numpy, pytest, scikit_build_core, pybind11" >/dev/null 2>&1; then
  "$PY" -m pip install --quiet --disable-pip-version-check numpy pytest "scikit-build-core>=0.10" "pybind11>=2.10"
fi
# The same thread setting as the C++ tests (scripts/test.sh): the CI machine has 2 cores.
export SINKQ_THREADS=${SINKQ_THREADS:-2}
PYTHONPATH="build/python${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m pytest -q -p no:cacheprovider python/tests "$@"
