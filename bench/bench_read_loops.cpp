// What a core's loop does to its read rate: the same bytes (128 KiB blocks, shared two at a time
// by work stealing, as the decode GEMVs share a weight's blocks) read by loops that differ only in
// what consumes each loaded line. Passes of every loop take turns, each pass starting one loop
// later, so the VM's bandwidth phases meet all alike.
//
// On the Zen 5 VM of the thirty-third session (docs/benchmarks.md), two streams a core read
// fastest in most rounds, with integer sums (3-22 % over one stream) or about as fast with the
// GEMV's vdpbf16ps; the f32 add tree read slowest. The real GEMV walking two blocks at once was
// level with one block in bench_linear (15 alternated runs), so it walks one. In the thirty-fourth
// session one prefetch per 4 KiB page, 32 KiB ahead (kick_page_ahead), beat all of them: the
// integer sum 46-49 -> 69-71 GB/s, the vdpbf16ps loop 36-47 -> 54-62.
//
// Usage: bench_read_loops [--gb 1.25] [--rounds 6] [--passes 6]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/simd.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

namespace {

using kiln::bench::median;
using kiln::bench::now_s;

constexpr int64_t kBlockLines = 2048;  // 128 KiB: a K = 1024 weight's 64-column block

// Each loop reads `blocks` blocks from p (1 or 2) and returns a value that depends on every line.
using ReadLoop = float (*)(const char* p, int64_t blocks);

float integer_sum(const char* p, int64_t blocks, int streams) {
  return float(kiln::cpu::sum_lines(reinterpret_cast<const uint64_t*>(p), blocks * kBlockLines,
                                    kiln::cpu::ReadPrefetch::kNone, streams));
}
float integer_one(const char* p, int64_t blocks) { return integer_sum(p, blocks, 1); }
float integer_two(const char* p, int64_t blocks) {
  return integer_sum(p, blocks, int(std::min<int64_t>(blocks, 2)));
}
float integer_kick(const char* p, int64_t blocks) {
  return float(kiln::cpu::sum_lines(reinterpret_cast<const uint64_t*>(p), blocks * kBlockLines,
                                    kiln::cpu::ReadPrefetch::kPageKick));
}

float reduce(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float l : lanes) s += l;
  return s;
}

// Four lines summed as a tree (f32 adds keep the order), then one add into the accumulator.
float f32_tree(const char* p, int64_t blocks) {
  __m512 acc = _mm512_setzero_ps();
  for (const char* q = p; q < p + blocks * kBlockLines * 64; q += 256) {
    const auto* f = reinterpret_cast<const float*>(q);
    acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(f), _mm512_load_ps(f + 16)),
                                           _mm512_add_ps(_mm512_load_ps(f + 32),
                                                         _mm512_load_ps(f + 48))));
  }
  return reduce(acc);
}

// Four accumulators, each line added into its own: the GEMV's shape with an add.
float f32_chains(const char* p, int64_t blocks) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (const char* q = p; q < p + blocks * kBlockLines * 64; q += 256)
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(reinterpret_cast<const float*>(q) + 16 * j));
  return reduce(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// The decode GEMV's loop (gemv_bf16.cpp, M = 1): per k pair, 4 lines into 4 accumulators by
// vdpbf16ps against one broadcast x pair; S blocks side by side; with kKick, one prefetch per
// 4 KiB page, as the GEMV takes off Intel cores.
template <int S, bool kKick = false>
float dpbf16_blocks(const char* p, int64_t blocks) {
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1)
  __m512 total = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b += S) {  // whole grains of 2 blocks: S divides blocks
    __m512 acc[S][4];
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j) acc[s][j] = _mm512_setzero_ps();
    for (int64_t o = 0; o < kBlockLines * 64; o += 256)
      for (int s = 0; s < S; ++s) {
        const char* q = p + (b + s) * kBlockLines * 64 + o;
        if constexpr (kKick) kiln::cpu::detail::kick_page_ahead(q);
        for (int j = 0; j < 4; ++j)
          acc[s][j] = _mm512_dpbf16_ps(acc[s][j], (__m512bh)_mm512_load_si512(q + 64 * j), x);
      }
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j) total = _mm512_add_ps(total, acc[s][j]);
  }
  return reduce(total);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::ReadArgs args;
  if (!kiln::bench::parse_read_args(argc, argv, args)) return 2;
  const double gb = args.gb;
  const int rounds = args.rounds, passes = args.passes;
  const int64_t block_bytes = kBlockLines * 64;
  const int64_t blocks = std::max<int64_t>(2, int64_t(gb * 1e9) / block_bytes / 2 * 2);
  const size_t bytes = size_t(blocks * block_bytes);
  auto* buf = static_cast<char*>(kiln::map_pages(bytes));
  // bf16 1.0 pairs: finite for every loop's arithmetic.
  kiln::parallel_for(int64_t(bytes / 4), [&](int64_t b, int64_t e) {
    std::fill(reinterpret_cast<uint32_t*>(buf) + b, reinterpret_cast<uint32_t*>(buf) + e,
              0x3f803f80u);
  }, 1 << 16);
  struct Loop {
    const char* name;
    ReadLoop fn;
  };
  const std::vector<Loop> loops = {{"integer sum, 1 stream", integer_one},
                                   {"integer sum, 2 streams", integer_two},
                                   {"integer sum, page kick", integer_kick},
                                   {"f32 add tree", f32_tree},
                                   {"f32 add, 4 chains", f32_chains},
                                   {"vdpbf16ps (GEMV), 1 stream", dpbf16_blocks<1>},
                                   {"vdpbf16ps, 2 streams", dpbf16_blocks<2>},
                                   {"vdpbf16ps, page kick", dpbf16_blocks<1, true>}};
  std::printf("%d threads, %.2f GB in %lld blocks of 128 KiB, %d passes of each loop a round; "
              "median GB/s\n",
              kiln::num_threads(), double(bytes) / 1e9, static_cast<long long>(blocks), passes);
  std::vector<float> sink(64 * 16, 0.f);
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<double>> rate(loops.size());
    for (int p = 0; p < passes; ++p)
      for (size_t j = 0; j < loops.size(); ++j) {
        const size_t i = (size_t(p) + j) % loops.size();
        const double t0 = now_s();
        kiln::parallel_for_stealing(blocks, 2, [&](int64_t b0, int64_t b1) {
          sink[size_t(omp_get_thread_num()) * 16] += loops[i].fn(buf + b0 * block_bytes, b1 - b0);
        });
        rate[i].push_back(double(bytes) / (now_s() - t0) / 1e9);
      }
    std::printf("round %d:", r);
    for (size_t i = 0; i < loops.size(); ++i)
      std::printf(" %s %.1f%s", loops[i].name, median(rate[i]), i + 1 < loops.size() ? " |" : "\n");
  }
  float total = 0;
  for (float s : sink) total += s;
  kiln::unmap_pages(buf, bytes);
  return total == 42.f ? 1 : 0;  // keeps the sums live
}

#else

int main() {
  std::printf("bench_read_loops: needs AVX512_BF16 (its GEMV loop is vdpbf16ps)\n");
  return 0;
}

#endif
