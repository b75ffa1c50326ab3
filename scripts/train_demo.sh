#!/usr/bin/env bash
# Reproduces models/demo/: a tiny Qwen3-architecture model trained by kiln itself on the King James
# Bible (public domain; Debian packages bible-kjv + bible-kjv-text). Idempotent: run it again at any
# time; it rebuilds the data and the model from scratch and replaces models/demo/.
#   bash scripts/train_demo.sh            install + extract + create + train + copy to models/demo/
# Environment: KILN (path of the kiln binary; default build/tools/cli/kiln, built if missing),
# KILN_SHARED_DIR (folder holding models/qwen3-tokenizer; default ../shared), STEPS, LR, SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${KILN_SHARED_DIR:-$ROOT/../shared}
TOKENIZER=$SHARED/models/qwen3-tokenizer
STEPS=${STEPS:-320}
LR=${LR:-1e-2}
BATCH=${BATCH:-8}
SEED=${SEED:-0}
DATA_DIR=out/demo-data
WORK=out/demo-train
DEST=models/demo

# 1. The text: the KJV from Debian (bible-kjv ships the `bible` reader, bible-kjv-text the data).
missing=()
for p in bible-kjv bible-kjv-text; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. One verse per line. `bible -f` turns pretty-printing off, so each verse is one line
#    "Ge1:1 In the beginning ..."; the range Gen1:1-Rev22:21 is the whole book (31,102 verses).
#    The reference is stripped so the model sees only the text.
mkdir -p "$DATA_DIR"
(cd /tmp && bible -f Gen1:1-Rev22:21) | sed -E 's/^[^ ]+ //' | grep -v '^[[:space:]]*$' \
  > "$DATA_DIR/kjv.txt"
echo "== $DATA_DIR/kjv.txt: $(wc -l < "$DATA_DIR/kjv.txt") verses, $(wc -c < "$DATA_DIR/kjv.txt") bytes"

# 3. kiln itself.
KILN=${KILN:-build/tools/cli/kiln}
if [ ! -x "$KILN" ]; then
  echo "== building kiln in build/"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_SHARED_DIR="$SHARED" >/dev/null
  ninja -C build kiln
fi

# 4. A random tiny Qwen3 (hidden 64, 2 layers, tied embeddings, the real 151,936-token vocabulary so
#    the Qwen3 tokenizer fits) in bf16: the trainer keeps f32 master weights and saves in the model's
#    dtype, so the final model is bf16 (~19.5 MB of weights).
rm -rf "$WORK"
"$KILN" create-model "$WORK/init" --preset tiny --seed "$SEED" --dtype bf16 --tokenizer "$TOKENIZER"

# 5. Train: packed 128-token blocks, batch 8 (1,024 tokens a step), cosine schedule with warmup.
#    Most of a step is the 151,936-way output layer, so the step count is what fits in ~10 minutes
#    on 2 busy cores, not what the model could use.
start=$(date +%s)
"$KILN" train --model "$WORK/init" --data "$DATA_DIR/kjv.txt" --output-dir "$WORK/run" \
  --max-length 128 --packing --per-device-train-batch-size "$BATCH" --bf16 \
  --learning-rate "$LR" --lr-scheduler-type cosine --warmup-steps 15 --weight-decay 0.01 \
  --max-steps "$STEPS" --logging-steps 10 --logging-first-step --save-strategy no \
  --seed "$SEED" --disable-tqdm
end=$(date +%s)
echo "== trained $STEPS steps in $((end - start)) s"

# 6. The final model (weights, config, generation config, tokenizer files) into models/demo/.
mkdir -p "$DEST"
find "$DEST" -maxdepth 1 -type f ! -name README.md -delete
for f in "$WORK/run"/*; do
  case "$(basename "$f")" in
    checkpoint-*|train_log.jsonl|trainer_state.json|.*) ;;
    *) [ -f "$f" ] && cp "$f" "$DEST/" ;;
  esac
done
cp "$WORK/run/train_log.jsonl" "$DEST/train_log.jsonl"
"$KILN" plot "$WORK/run/train_log.jsonl" --out "$DEST/loss.svg"
du -sh "$DEST"
echo "== kiln generate $DEST \"In the beginning\" --max-new-tokens 32 --stats"
"$KILN" generate "$DEST" "In the beginning" --max-new-tokens 32 --stats
