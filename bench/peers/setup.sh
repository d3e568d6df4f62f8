#!/usr/bin/env bash
# Prepares everything the peer-accuracy harness needs, outside the repository (idempotent):
#   $PEERS/venv       torch (CPU) + transformers 5 + gguf + scikit-learn (KVQuant, IntactKV, the HF export)
#   $PEERS/pq-site    transformers 4.40.1 overlay for PrefixQuant (its monkeypatches need 4.40; PYTHONPATH)
#   $PEERS/smollm2-hf the shared GGUF as an HF directory (gguf_to_hf.py): the model both sides run
#   $PEERS/src/*      the official repositories at the commits the patches apply to
#   $PEERS/calib/*    calibration token ids drawn by `sinkq calib ids` (the one file both sides read)
# PEERS defaults to ~/.cache/sinkq-peers. Needs the sinkq binary (bash scripts/build.sh sinkq) and
# network access to PyPI and GitHub.   Usage: bash bench/peers/setup.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEERS=${PEERS:-$HOME/.cache/sinkq-peers}
SHARED=${SHARED:-$ROOT/../shared}
SINKQ=${SINKQ:-$ROOT/build/src/cli/sinkq}
GGUF=${GGUF:-$SHARED/models/smollm2-135m-instruct-q4_1/model.gguf}
C4=$SHARED/data/c4/c4_train_00000_first1000.jsonl
mkdir -p "$PEERS"/{src,calib}
[ -x "$SINKQ" ] || { echo "setup.sh: no sinkq binary at $SINKQ (bash scripts/build.sh sinkq)" >&2; exit 1; }

if [ ! -x "$PEERS/venv/bin/python" ]; then python3 -m venv "$PEERS/venv"; fi
P="$PEERS/venv/bin/python"
"$P" -c "import torch, transformers, gguf, sklearn" 2>/dev/null || {
  "$P" -m pip install -q --upgrade pip
  "$P" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu || "$P" -m pip install -q torch
  "$P" -m pip install -q "transformers>=5" gguf safetensors numpy scikit-learn accelerate sentencepiece
}
[ -d "$PEERS/pq-site/transformers" ] || "$P" -m pip install -q --target "$PEERS/pq-site" --no-deps \
  transformers==4.40.1 tokenizers==0.19.1 huggingface-hub==0.23.4 termcolor protobuf

[ -f "$PEERS/smollm2-hf/READY" ] || "$P" "$ROOT/bench/peers/gguf_to_hf.py" "$GGUF" "$PEERS/smollm2-hf"

clone() {  # clone URL DIR COMMIT
  [ -d "$2/.git" ] || git clone -q "$1" "$2"
  git -C "$2" checkout -q "$3"
}
clone https://github.com/ChenMnZ/PrefixQuant "$PEERS/src/PrefixQuant" 97cc15b
clone https://github.com/SqueezeAILab/KVQuant "$PEERS/src/KVQuant" 57a238357f0ffe50084670fcd5781c9848f80ea2
clone https://github.com/ruikangliu/IntactKV "$PEERS/src/IntactKV" e9b841e

# PrefixQuant / IntactKV protocol: 4 x 256 C4 tokens; KVQuant protocol: 8 x 512 ([BOS] first).
[ -s "$PEERS/calib/c4_4x256.jsonl" ] || "$SINKQ" calib ids -m "$GGUF" --calib "$C4" --calib-samples 4 --calib-len 256 \
  -o "$PEERS/calib/c4_4x256.jsonl"
[ -s "$PEERS/calib/c4_8x512.jsonl" ] || "$SINKQ" calib ids -m "$GGUF" --calib "$C4" --calib-samples 8 --calib-len 512 \
  -o "$PEERS/calib/c4_8x512.jsonl"
echo "setup.sh: ready in $PEERS"
