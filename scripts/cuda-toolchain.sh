#!/usr/bin/env bash
# Prints the path of an nvcc that builds src/cuda (CUDA 12.0 or newer: the sm_90a target).
# Uses nvcc from PATH or /usr/local/cuda; otherwise installs NVIDIA's compiler packages from PyPI
# (nvidia-cuda-nvcc, -runtime, -crt, -cccl and nvidia-nvvm; never imported, only their files used) into
# ~/.cache/sinkq-cuda, once, and prints that nvcc. No GPU is needed to compile.
set -euo pipefail
want_major=12 want_minor=0
ok() {  # nvcc path -> is it new enough?
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || return 1
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt "$want_major" ] || { [ "$1" -eq "$want_major" ] && [ "$2" -ge "$want_minor" ]; }
}
for c in "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ] && ok "$c"; then echo "$c"; exit 0; fi
done
cache=${SINKQ_CUDA_CACHE:-$HOME/.cache/sinkq-cuda}
nvcc="$cache/nvidia/cu13/bin/nvcc"
if ! { [ -x "$nvcc" ] && ok "$nvcc"; }; then
  echo "cuda-toolchain: no nvcc >= $want_major.$want_minor found; installing NVIDIA's compiler packages from PyPI into $cache" >&2
  rm -rf "$cache.tmp"
  python3 -m pip install --quiet --no-deps --no-compile --target "$cache.tmp" \
    "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-cuda-cccl==13.0.*" \
    "nvidia-nvvm==13.0.*" >&2
  rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
[ -x "$nvcc" ] && ok "$nvcc" || { echo "cuda-toolchain: $nvcc is not a working nvcc >= $want_major.$want_minor" >&2; exit 1; }
echo "$nvcc"
