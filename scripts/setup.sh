#!/usr/bin/env bash
# Installs kiln's dependencies (Debian packages only), builds it in Release, and runs the main job:
# a generation on the default model. Idempotent: run it again at any time.
#   bash scripts/setup.sh            install + build + run the main job
#   bash scripts/setup.sh --no-run   install + build only (CI)
#   --with-reference                 also Debian's python3-torch: the tests' reference oracle
#                                    (tests/oracle, skipped without it) and the benchmarks' peer,
#                                    with jemalloc, as the issue's PyTorch figures were taken
set -euo pipefail
RUN=1
REFERENCE=0
for arg in "$@"; do
  case "$arg" in
    --no-run) RUN=0 ;;
    --with-reference) REFERENCE=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (known: --no-run, --with-reference)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${KILN_SHARED_DIR:-$ROOT/../shared}

PACKAGES=(build-essential cmake ninja-build pkg-config libdnnl-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libicu-dev clang libclang-rt-14-dev libomp-14-dev)
[ "$REFERENCE" = 1 ] && PACKAGES+=(python3-torch python3-numpy libjemalloc2)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== building (Release) in build/"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_SHARED_DIR="$SHARED" >/dev/null
ninja -C build -j"$(nproc)"

[ "$RUN" = 0 ] && exit 0

# The main job: generate from the default model.
MODEL=${KILN_DEMO_MODEL:-}
if [ -z "$MODEL" ] && [ -f models/demo/config.json ]; then MODEL=models/demo; fi
if [ -z "$MODEL" ]; then
  MODEL=out/tiny-random
  if [ ! -f "$MODEL/model.safetensors" ]; then
    TOK_ARGS=()
    [ -f "$SHARED/models/qwen3-tokenizer/tokenizer.json" ] && TOK_ARGS=(--tokenizer "$SHARED/models/qwen3-tokenizer")
    ./build/tools/cli/kiln create-model "$MODEL" --preset tiny --seed 0 "${TOK_ARGS[@]}"
  fi
  echo
  echo "== NOTE: $MODEL has RANDOM weights (no trained model ships yet), so the text below is"
  echo "==       gibberish; it shows the pipeline working end to end, not a language model."
fi
PROMPT="Once upon a time"
if [ "$MODEL" = models/demo ]; then
  PROMPT="In the beginning"
  echo "== models/demo: a 2-layer Qwen3 trained by kiln for 8 minutes on the King James Bible"
  echo "==              (scripts/train_demo.sh; expect KJV-flavoured word salad, see its README)"
fi
echo "== kiln generate $MODEL \"$PROMPT\" --max-new-tokens 32 --stats"
./build/tools/cli/kiln generate "$MODEL" "$PROMPT" --max-new-tokens 32 --stats
