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
SINKQ_THREADS=2 ctest --test-dir build --output-on-failure -j"$(nproc)"
