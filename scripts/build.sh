#!/usr/bin/env bash
# Configures and builds sinkq (Release) into build/. Installs dependencies first (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build -j"$(nproc)"
