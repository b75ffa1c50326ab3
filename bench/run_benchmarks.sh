#!/usr/bin/env bash
# Reproduces docs/benchmarks.md: `kiln bench` on a random Qwen3-0.6B-shaped checkpoint, batch 1,
# bf16, prompts of 128 and 512 tokens, 64 new tokens.
#
# Usage: bench/run_benchmarks.sh [BUILD_DIR] [MODEL_DIR] [RUNS]
#   BUILD_DIR  a Release build holding tools/cli/kiln (default: build)
#   MODEL_DIR  where the random model is made once (default: /tmp/kiln-qwen3-0.6b)
#   RUNS       runs per configuration; the best is what docs/benchmarks.md reports (default: 3)
# Other processes on the machine skew the numbers: each run prints the load average beside it.
set -euo pipefail
BUILD_DIR=${1:-build}
MODEL_DIR=${2:-/tmp/kiln-qwen3-0.6b}
RUNS=${3:-3}
KILN="$BUILD_DIR/tools/cli/kiln"
[ -x "$KILN" ] || { echo "no kiln binary at $KILN (build first)" >&2; exit 1; }

if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  "$KILN" create-model "$MODEL_DIR" --preset qwen3-0.6b --seed 0 --dtype bf16
fi

for P in 128 512; do
  for run in $(seq 1 "$RUNS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$KILN" bench "$MODEL_DIR" --batch 1 --dtype bf16 --prompt-tokens "$P" --new-tokens 64 \
          --repeats 3 --json)
    echo "{\"run\": $run, \"load_before\": $load, \"result\": $out}"
  done
done
