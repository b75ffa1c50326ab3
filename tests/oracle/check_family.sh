#!/usr/bin/env bash
# One ctest per model family: a small random checkpoint written by the PyTorch reference
# (torch_causal_lm.py, independent of kiln's own create-model), then kiln against it in f32
# (log-probabilities within 1e-4, greedy ids equal, alone and in a left-padded batch) and in bf16
# (mean deviation under 3e-2).
# Exits 77, which ctest reports as skipped, where Debian's python3-torch is not installed.
#   check_family.sh KILN_BINARY VARIANT
set -euo pipefail
KILN=$1
VARIANT=$2
PY=/usr/bin/python3
REFERENCE="$(dirname "$0")/torch_causal_lm.py"
if ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (apt-get install python3-torch)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" "$REFERENCE" make-model "$dir" --variant "$VARIANT"
"$PY" "$REFERENCE" check "$dir" --kiln "$KILN" --dtype f32
"$PY" "$REFERENCE" check "$dir" --kiln "$KILN" --dtype bf16
