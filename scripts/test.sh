#!/usr/bin/env bash
# The whole test suite: the Release build's tests, the fast tests again under ASan+UBSan, and each
# fuzz target for a bounded time. Expects scripts/setup.sh to have installed the dependencies.
#   bash scripts/test.sh [--quick]   (--quick: Release tests only)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${KILN_SHARED_DIR:-$ROOT/../shared}
JOBS=$(nproc)
FUZZ_SECONDS=${KILN_FUZZ_SECONDS:-30}

echo "== Release tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_SHARED_DIR="$SHARED" >/dev/null
ninja -C build -j"$JOBS"
(cd build && ctest -j"$JOBS" --output-on-failure --timeout 900)

[ "${1:-}" = "--quick" ] && exit 0

echo "== fast tests under ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON \
  -DKILN_BUILD_BENCH=OFF -DKILN_SHARED_DIR="$SHARED" >/dev/null
ninja -C build-asan -j"$JOBS" test_core test_io test_tokenizer test_ops test_models test_training
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest -j"$JOBS" --output-on-failure --timeout 900 \
  -L '^(core|io|tokenizer|ops|models|training)$')

echo "== fuzz targets, ${FUZZ_SECONDS}s each"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON \
  -DKILN_WERROR=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DKILN_SHARED_DIR="$SHARED" >/dev/null
ninja -C build-fuzz -j"$JOBS"
for target in build-fuzz/fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  corpus=build-fuzz/corpus/$name; mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "-- $name"
  "$target" "$corpus" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 -timeout=20 2>&1 | tail -n 3
done
echo "== all tests passed"
