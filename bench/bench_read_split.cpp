// How the threads should share a streaming read: each thread's own static half (parallel_for),
// or grains taken by work stealing (parallel_for_stealing, as the decode GEMVs and, since the
// thirtieth session, measure_memory_bandwidth share theirs), over the probe's own read loop
// (sum_lines); and stealing pairs of grains, each pair read as two streams side by side (as the
// decode GEMVs walk two blocks at once since the thirty-third session). Passes of the three
// alternate over one huge-page buffer, so the VM's bandwidth phases meet all alike; for the
// static split each thread also times its own half, which shows whether one core streams slower
// than the other.
//
// Usage: bench_read_split [--gb 1.25] [--rounds 8] [--passes 10]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"

using kiln::bench::median;
using kiln::bench::now_s;

int main(int argc, char** argv) {
  kiln::bench::ReadArgs args;
  args.rounds = 8;
  args.passes = 10;
  if (!kiln::bench::parse_read_args(argc, argv, args)) return 2;
  const double gb = args.gb;
  const int rounds = args.rounds, passes = args.passes;
  const size_t bytes = size_t(gb * 1e9) / 64 * 64;
  const int64_t lines = int64_t(bytes / 64);
  const int threads = kiln::num_threads();
  auto* words = static_cast<uint64_t*>(kiln::map_pages(bytes));
  kiln::parallel_for(int64_t(bytes / 8), [&](int64_t b, int64_t e) {
    std::memset(words + b, 1, size_t(e - b) * 8);
  }, 1 << 16);
  std::printf("%d threads, %.2f GB buffer, %d passes of each split a round\n", threads,
              double(bytes) / 1e9, passes);
  std::vector<uint64_t> sums(size_t(threads) * 8, 0);
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> fixed, stolen, two_streams;
    std::vector<std::vector<double>> own_ms(static_cast<size_t>(threads));
    for (int p = 0; p < passes; ++p) {
      std::vector<double> ms(size_t(threads), 0);
      double t0 = now_s();
      kiln::parallel_for(lines, [&](int64_t b, int64_t e) {
        const double s = now_s();
        sums[size_t(omp_get_thread_num()) * 8] +=
            kiln::cpu::sum_lines(words + b * 8, e - b, kiln::cpu::ReadPrefetch::kNone);
        ms[size_t(omp_get_thread_num())] = (now_s() - s) * 1e3;
      }, 1 << 12);
      fixed.push_back(double(bytes) / (now_s() - t0) / 1e9);
      for (int t = 0; t < threads; ++t) own_ms[size_t(t)].push_back(ms[size_t(t)]);
      t0 = now_s();
      kiln::parallel_for_stealing(lines, 2048, [&](int64_t b, int64_t e) {
        sums[size_t(omp_get_thread_num()) * 8] +=
            kiln::cpu::sum_lines(words + b * 8, e - b, kiln::cpu::ReadPrefetch::kNone);
      }, 1 << 12);
      stolen.push_back(double(bytes) / (now_s() - t0) / 1e9);
      t0 = now_s();
      kiln::parallel_for_stealing(lines, 2 * 2048, [&](int64_t b, int64_t e) {
        sums[size_t(omp_get_thread_num()) * 8] +=
            kiln::cpu::sum_lines(words + b * 8, e - b, kiln::cpu::ReadPrefetch::kNone,
                                 /*streams=*/2);
      }, 1 << 12);
      two_streams.push_back(double(bytes) / (now_s() - t0) / 1e9);
    }
    std::printf("round %d: static halves best %.1f, median %.1f GB/s (each thread's half, median ms:",
                r, *std::max_element(fixed.begin(), fixed.end()), median(fixed));
    for (int t = 0; t < threads; ++t) std::printf(" %.1f", median(own_ms[size_t(t)]));
    std::printf(") | stealing best %.1f, median %.1f GB/s | two streams a core best %.1f, median"
                " %.1f GB/s\n",
                *std::max_element(stolen.begin(), stolen.end()), median(stolen),
                *std::max_element(two_streams.begin(), two_streams.end()), median(two_streams));
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  kiln::unmap_pages(words, bytes);
  return total == 42 ? 1 : 0;  // keeps the sums live
}
