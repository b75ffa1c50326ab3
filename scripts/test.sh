#!/usr/bin/env bash
# The whole test suite: the Release build's tests, all of them again in a portable build (no
# -march=native) and under ASan+UBSan, and each fuzz target for a bounded time. Expects scripts/setup.sh to have installed the dependencies.
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

# Every kernel picks its SIMD path from the compiler's macros, with scalar fallbacks; build once
# without -march=native so the fallbacks (and oneDNN for every GEMM) compile and pass too.
echo "== portable build (no -march=native) and its tests"
cmake -S . -B build-portable -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_NATIVE=OFF \
  -DKILN_BUILD_BENCH=OFF -DKILN_SHARED_DIR="$SHARED" >/dev/null
ninja -C build-portable -j"$JOBS"
(cd build-portable && ctest -j"$JOBS" --output-on-failure --timeout 900)

# One clang build serves both: every test under ASan+UBSan (the training, generation and CLI tests
# included: under a minute since the suite got faster), and the libFuzzer targets (coverage
# instrumentation is harmless for the tests and saves a third full build).
echo "== all tests under ASan+UBSan (clang)"
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_WERROR=OFF -DKILN_BUILD_BENCH=OFF \
  -DKILN_SHARED_DIR="$SHARED" >/dev/null
FUZZ_TARGETS=$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
ninja -C build-san -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-san && ctest -j"$JOBS" --output-on-failure --timeout 900)

echo "== fuzz targets, ${FUZZ_SECONDS}s each"
for name in $FUZZ_TARGETS; do
  target=build-san/fuzz/$name
  corpus=build-san/corpus/$name; mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "-- $name"
  ASAN_OPTIONS=detect_leaks=0 "$target" "$corpus" -max_total_time="$FUZZ_SECONDS" \
    -rss_limit_mb=4096 -timeout=20 2>&1 | tail -n 2
done
echo "== all tests passed"
