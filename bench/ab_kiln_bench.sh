#!/usr/bin/env bash
# Alternates `kiln bench` between two kiln binaries, so the VM's phases meet both alike, and prints
# one line per run: prefill and decode tokens/s and their fractions. The pairs take turns at which
# binary runs first (A B, B A, ...): on this VM the first of a round often ran ahead.
#
# Usage: bench/ab_kiln_bench.sh KILN_A KILN_B MODEL_DIR [PAIRS] [PROMPT_TOKENS] [NEW_TOKENS]
#   e.g. bench/ab_kiln_bench.sh /tmp/base/build/tools/cli/kiln build/tools/cli/kiln /tmp/q06 4 128
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,7p "$0" >&2; exit 2; }
A=$1 B=$2 MODEL=$3 PAIRS=${4:-4} P=${5:-128} N=${6:-64}
for i in $(seq 1 "$PAIRS"); do
  order="A B"; [ $((i % 2)) -eq 0 ] && order="B A"
  for which in $order; do
    bin=$A; [ "$which" = B ] && bin=$B
    "$bin" bench "$MODEL" --batch 1 --dtype bf16 --prompt-tokens "$P" --new-tokens "$N" \
      --repeats 3 --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$which P=$P pair $i: prefill %.1f tok/s, %.1f%% of the machine peak (%.0f GFLOP/s) | '
      'decode %.2f tok/s, %.1f%% of the step-sized read (%.1f GB/s; %.1f%% of the 256 MiB read) | '
      'RSS %.3fx' % (d['prefill_tokens_per_s'], 100 * d['prefill_machine_peak_fraction'],
      d['machine_peak_gflops'], d['decode_tokens_per_s'], 100 * d['decode_roofline_fraction'],
      d['memory_bandwidth_gbs'], 100 * d['decode_roofline_fraction_256mib'],
      d['rss_ratio_to_bf16_weights_plus_kv']))"
  done
done
