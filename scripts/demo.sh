#!/usr/bin/env bash
# The main job on the bundled real model: build, then a short generation and a perplexity run
# with stories260K (../shared/models/stories260K).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
M=../shared/models/stories260K
echo "== sinkq generate -m $M -p 'Once upon a time' -n 64 --temp 0"
./build/src/cli/sinkq generate -m "$M" -p "Once upon a time" -n 64 --temp 0
echo "== sinkq ppl -m $M -f ../shared/data/wikitext-2/wikitext2_test_joined.txt --ctx 512 --max-windows 16"
./build/src/cli/sinkq ppl -m "$M" -f ../shared/data/wikitext-2/wikitext2_test_joined.txt --ctx 512 --max-windows 16
