#!/usr/bin/env bash
# Reproduces docs/benchmarks.md: `kiln bench` (inference) on a random Qwen3-0.6B-shaped checkpoint,
# batch 1, bf16, prompts of 128 and 512 tokens, 64 new tokens, and a decode batch of 8; then
# `kiln bench-train` (training) on the `small` and Qwen3-0.6B shapes in bf16 autocast and f32.
#
# Usage: bench/run_benchmarks.sh [BUILD_DIR] [MODEL_DIR] [RUNS] [SMALL_DIR]
#   BUILD_DIR  a Release build holding tools/cli/kiln (default: build)
#   MODEL_DIR  where the random 0.6B model is made once (default: /tmp/kiln-qwen3-0.6b)
#   RUNS       runs per configuration; the best is what docs/benchmarks.md reports (default: 3)
#   SMALL_DIR  where the random `small` model is made once (default: /tmp/kiln-small)
# Other processes on the machine skew the numbers: each run prints the load average beside it.
# Set KILN_BENCH_SKIP_TRAIN=1 to run only the inference part (the 0.6B training runs take minutes).
# Where Debian's python3-torch is installed (scripts/setup.sh --with-reference), the inference part
# is followed by the PyTorch peer on the same model and shapes (bench/peers/torch_bench.py, one run,
# printed as {"peer_run": ...}); KILN_BENCH_SKIP_PEERS=1 skips it.
set -euo pipefail
BUILD_DIR=${1:-build}
MODEL_DIR=${2:-/tmp/kiln-qwen3-0.6b}
RUNS=${3:-3}
SMALL_DIR=${4:-/tmp/kiln-small}
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

# A decode batch of 8 (prompts of 128 tokens): the GEMV's 8 rows in one walk of each weight block.
for run in $(seq 1 "$RUNS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$("$KILN" bench "$MODEL_DIR" --batch 8 --dtype bf16 --prompt-tokens 128 --new-tokens 32 \
        --repeats 3 --json)
  echo "{\"run\": $run, \"load_before\": $load, \"result\": $out}"
done

if [ "${KILN_BENCH_SKIP_PEERS:-0}" != 1 ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
  JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2  # the issue's PyTorch figures used jemalloc
  [ -f "$JEMALLOC" ] || JEMALLOC=""
  load=$(cut -d' ' -f1 /proc/loadavg)
  LD_PRELOAD="$JEMALLOC" "$(dirname "$0")/peers/torch_bench.py" "$MODEL_DIR" --prompt-tokens 128,512 \
      --new-tokens 64 --repeats 3 --dtype bf16 --threads "$(nproc)" --json |
    while read -r row; do echo "{\"peer_run\": 1, \"load_before\": $load, \"result\": $row}"; done
fi

[ "${KILN_BENCH_SKIP_TRAIN:-0}" = 1 ] && exit 0
if [ ! -f "$SMALL_DIR/model.safetensors" ]; then
  "$KILN" create-model "$SMALL_DIR" --preset small --seed 0 --dtype bf16
fi
# Training: the issue's shapes (small at 8 x 128; 0.6B at 1 x 128 beside PyTorch's figure, and at
# 1 x 512, the memory target).
train() {  # MODEL BATCH SEQ STEPS [--f32]
  local model=$1 batch=$2 seq=$3 steps=$4
  shift 4
  for run in $(seq 1 "$RUNS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$KILN" bench-train "$model" --batch "$batch" --seq-len "$seq" --steps "$steps" "$@" \
          --json)
    echo "{\"run\": $run, \"load_before\": $load, \"result\": $out}"
  done
}
train "$SMALL_DIR" 8 128 5
train "$SMALL_DIR" 8 128 3 --f32
train "$MODEL_DIR" 1 128 2
train "$MODEL_DIR" 1 128 2 --f32
train "$MODEL_DIR" 1 512 2
