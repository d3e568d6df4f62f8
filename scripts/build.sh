#!/usr/bin/env bash
# Configures and builds sinkq (Release) into build/. Installs dependencies first (idempotent).
#   bash scripts/build.sh [-DOPTION=VALUE ...] [TARGET ...]
# -D options go to CMake; targets to ninja (none: everything — engine, CLI, tests, benchmarks,
# Python module; `sinkq` alone is what the demo runs, about half the build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
defs=() targets=()
for a in "$@"; do
  case "$a" in -D*) defs+=("$a") ;; *) targets+=("$a") ;; esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${defs[@]}" >/dev/null
ninja -C build -j"$(nproc)" "${targets[@]}"
