#!/usr/bin/env bash
# Installs sinkq's build and test dependencies from Debian's packages (and any packages given as
# arguments). Idempotent: packages that are already present are not touched, and apt-get runs only
# when something is missing.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev   # config.json / safetensors headers / tokenizer.json
  libopenblas-dev      # sgemm for prefill (threaded OpenBLAS)
  libdnnl-dev          # oneDNN: the AVX-512 path's sgemm (1.7-1.9x OpenBLAS 0.3.21's on Zen 5)
  libsentencepiece-dev # tokenizer.model when a model has no tokenizer.json
  libpcre2-dev         # byte-level BPE pre-tokenizer regexes (look-ahead, \p{L})
  libicu-dev           # Unicode normalizers of tokenizer.json (NFC for Qwen2)
  libcli11-dev         # command line
  libfmt-dev           # formatting (g++ 12 has no std::format)
  libxxhash-dev        # XXH3 checksums of the artifact's tensors and files
  libcpp-httplib-dev   # sinkq serve: HTTP/1.1 server (the library llama.cpp's server uses)
  libopenmpi-dev openmpi-bin  # mpirun -np N: pipeline parallelism (src/dist)
  pybind11-dev         # the Python module (python/); built against the python3 on PATH
  libgtest-dev libgmock-dev libbenchmark-dev
)
# Extra packages for one script (scripts/fuzz.sh: clang's libFuzzer): given as arguments.
PKGS+=("$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
