// Rooflines measured on the running machine, for `kiln bench`: streaming read bandwidth, the
// best rate of linear() itself (so "% of peak" compares kiln with what its own GEMM can reach) and
// the arithmetic peak of the instruction its GEMMs run on (what no kernel can pass).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cpu {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


// Register-only chains of one multiply-add instruction (no memory traffic). Each returns a value
// derived from every accumulator so the loop stays. One function per instruction set: each needs
// its own target attribute (a shared template would let the compiler use the widest one in all).
// f32 FMAs: 12 independent accumulators cover a 4-5 cycle latency at two instructions a cycle
// (on the Zen 5, 24 ran no faster: 226-232 GFLOP/s a core either way).
constexpr int kChains = 12;
// vdpbf16ps: 24, as many as the GEMM's register tile keeps. On the Zen 5, 12 chains do not cover
// its latency: on one thread 12 ran 414-416 GFLOP/s, 16 451-465, 24 460-471, and the GEMM's 6 x 64
// tile itself 460-480 in cache; on both cores, alternated in one process, 24 read 6-12 % above 12
// (851-888 against 791-840). So the 12-chain figure that kiln reported until the thirty-seventh
// session was not a ceiling: bench_linear's one-thread linears passed it (docs/benchmarks.md).
constexpr int kDpbf16Chains = 24;

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1e-3f * float(i));
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  for (int i = 1; i < kChains; ++i) a[0] = _mm256_add_ps(a[0], a[i]);
  return _mm256_cvtss_f32(a[0]);
}

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1e-3f * float(i));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  for (int i = 1; i < kChains; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  return _mm512_cvtss_f32(a[0]);
}

// vdpbf16ps: 16 lanes x 2 bf16 products, each a multiply and an add.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(int64_t iters) {
  __m512 a[kDpbf16Chains];
  for (int i = 0; i < kDpbf16Chains; ++i) a[i] = _mm512_set1_ps(1e-3f * float(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1)
  const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // (1e-7, 1e-7)
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 24
    for (int i = 0; i < kDpbf16Chains; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  for (int i = 1; i < kDpbf16Chains; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  return _mm512_cvtss_f32(a[0]);
}
#endif

// The best of `reps` runs of chains(iters) on each of `threads` threads, in FLOP/s: the sum of
// each thread's own rate. On this VM one core often runs a few percent slower than the other; a
// kernel that balances its work between them (work stealing) reaches the sum, not twice the
// slower core's rate, so the sum is the ceiling to hold it to.
double chains_rate(float (*chains)(int64_t), double flops_per_iter, int64_t iters, int threads,
                   int reps) {
  volatile float sink = 0;
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<float> out(size_t(threads), 0.f);
    std::vector<double> seconds(size_t(threads), 0.0);
    auto run = [&](int64_t t) {
      const double t0 = now_s();
      out[size_t(t)] = chains(iters);
      seconds[size_t(t)] = now_s() - t0;
    };
    if (threads == 1) {
      run(0);
    } else {
      parallel_for(threads, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) run(t);
      });
    }
    double rate = 0;
    for (int t = 0; t < threads; ++t) {
      sink = sink + out[size_t(t)];
      rate += double(iters) * flops_per_iter / seconds[size_t(t)];
    }
    best = std::max(best, rate);
  }
  return best;
}

}  // namespace

#if defined(__AVX512F__)
namespace {
// sum_lines for one kind of read: a loop of its own for each, with nothing decided inside it (a
// runtime choice tested in the loop cost the page-kick read a fifth of its speed).
template <ReadPrefetch kPrefetch, int kStreams>
uint64_t sum_lines_as(const uint64_t* p, int64_t lines) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const auto* first = reinterpret_cast<const __m512i*>(p);
  const int64_t per_stream = lines / kStreams;  // stream s: lines [s * per_stream, + per_stream)
  int64_t i = 0;
  for (; i + 4 <= per_stream; i += 4)
    for (int s = 0; s < kStreams; ++s) {
      const __m512i* q = first + s * per_stream + i;
      if constexpr (kPrefetch == ReadPrefetch::kEveryLine)
        for (int j = 0; j < 4; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(q + 64 + j), _MM_HINT_T1);
      if constexpr (kPrefetch == ReadPrefetch::kPageKick) detail::kick_page_ahead(q);
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(q));
      a1 = _mm512_add_epi64(a1, _mm512_load_si512(q + 1));
      a2 = _mm512_add_epi64(a2, _mm512_load_si512(q + 2));
      a3 = _mm512_add_epi64(a3, _mm512_load_si512(q + 3));
    }
  for (int s = 0; s < kStreams; ++s)  // each stream's last < 4 lines
    for (int64_t j = i; j < per_stream; ++j)
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(first + s * per_stream + j));
  for (int64_t j = kStreams * per_stream; j < lines; ++j)  // an odd line left over
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(first + j));
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t v : out) sum += v;
  return sum;
}

template <ReadPrefetch kPrefetch>
uint64_t sum_lines_streams(const uint64_t* p, int64_t lines, int streams) {
  return streams == 2 ? sum_lines_as<kPrefetch, 2>(p, lines)
                      : sum_lines_as<kPrefetch, 1>(p, lines);
}
}  // namespace
#endif

// Sums `lines` 64-byte lines starting at p (64-byte aligned): a pure read stream the compiler
// cannot drop, helped by `prefetch` (kernels.h). With two streams, the halves [0, lines / 2) and
// [lines / 2, lines) are read side by side.
uint64_t sum_lines(const uint64_t* p, int64_t lines, ReadPrefetch prefetch, int streams) {
  KILN_CHECK(streams == 1 || streams == 2, "sum_lines: streams = ", streams, " must be 1 or 2");
#if defined(__AVX512F__)
  switch (prefetch) {
    case ReadPrefetch::kEveryLine:
      return sum_lines_streams<ReadPrefetch::kEveryLine>(p, lines, streams);
    case ReadPrefetch::kPageKick:
      return sum_lines_streams<ReadPrefetch::kPageKick>(p, lines, streams);
    default:
      return sum_lines_streams<ReadPrefetch::kNone>(p, lines, streams);
  }
#else
  (void)prefetch;
  uint64_t s[8] = {};
  for (int64_t i = 0; i < lines; ++i)
    for (int j = 0; j < 8; ++j) s[j] += p[8 * i + j];
  uint64_t t = 0;
  for (uint64_t v : s) t += v;
  return t;
#endif
}

bool f32_fma_outruns_dpbf16() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512f")) return false;
  // ~0.3 ms each on one thread. The two differ by 2x or more on every CPU seen (Zen 4/5: vdpbf16ps
  // twice the f32 FMA rate; Intel Sapphire/Emerald Rapids: half of it), far beyond this noise.
  constexpr int64_t kIters = 1 << 15;
  const double dp = chains_rate(dpbf16_chains, kDpbf16Chains * 16 * 4, kIters, 1, 3);
  const double fma = chains_rate(fma_chains_avx512, kChains * 16 * 2, kIters, 1, 3);
  return fma > dp;
#else
  return false;
#endif
}

double measure_arithmetic_peak(DType dtype) {
  KILN_CHECK(dtype == DType::bf16 || dtype == DType::f32, "measure_arithmetic_peak: dtype ",
             dtype_name(dtype), " must be f32 or bf16");
#if defined(__x86_64__)
  constexpr int64_t kIters = 4 << 20;  // ~50M instructions per thread: 10-30 ms
  const int threads = num_threads();
  if (dtype == DType::bf16 && __builtin_cpu_supports("avx512bf16")) {
    // A bf16 GEMM runs on whichever of the two this CPU issues faster (gemm_bf16.cpp): the peak
    // is the faster one's.
    return std::max(chains_rate(dpbf16_chains, kDpbf16Chains * 16 * 4,
                                kIters * kChains / kDpbf16Chains, threads, 10),
                    chains_rate(fma_chains_avx512, kChains * 16 * 2, kIters, threads, 10));
  }
  float (*chains)(int64_t) = nullptr;
  double flops_per_iter = 0;
  if (__builtin_cpu_supports("avx512f")) {
    chains = fma_chains_avx512;
    flops_per_iter = kChains * 16 * 2;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    chains = fma_chains_avx2;
    flops_per_iter = kChains * 8 * 2;
  } else {
    return 0;
  }
  return chains_rate(chains, flops_per_iter, kIters, threads, 10);
#else
  (void)dtype;
  return 0;
#endif
}

double measure_memory_bandwidth(size_t bytes) {
  // At least 256 MiB: far beyond any cache here; huge pages make faulting it in quick.
  const size_t buffer_bytes = std::max(bytes, kMinBandwidthBytes) / 64 * 64;
  detail::HugeBuffer buf(buffer_bytes);
  auto* words = static_cast<uint64_t*>(buf.ptr);
  const int64_t n = int64_t(buffer_bytes / 8);
  // First touch from the threads that will read it (spreads the page-fault work).
  parallel_for(n, [&](int64_t b, int64_t e) {
    std::memset(words + b, 1, size_t(e - b) * 8);
  }, 1 << 16);
  volatile uint64_t sink = 0;
  double best = 0;
  const double t_start = now_s();
  constexpr int kKinds = int(std::size(kBandwidthPasses));
  for (int rep = 0; rep < 4 * kKinds; ++rep) {
    std::vector<uint64_t> partial(size_t(num_threads()) * 8, 0);
    const double t0 = now_s();
    // Chunks aligned to 64 bytes (8 words) so the aligned loads are valid. The kinds of pass in
    // kBandwidthPasses take turns and the best of all counts:
    // - one stream a core, plain or with a prefetch of every line (Intel's decode GEMV);
    // - two 128 KiB streams side by side a core: 3-30 % faster than one on the Zen 5 VM, and
    //   faster than the decode GEMVs walking one, before they kicked each page (thirty-third
    //   session);
    // - one stream a core with one prefetch per 4 KiB page, 32 KiB ahead: 35-40 % faster than
    //   the best of the above on the same VM, as the decode GEMVs became when they took it up
    //   (two streams with it read 10 % slower than one; docs/benchmarks.md, thirty-fourth
    //   session).
    // The threads share the lines by work stealing, as the decode GEMVs share their blocks: with
    // a static half each, the pass waits for the slower core, and on this VM one core often
    // streams 10-20 % slower (then a static split read 5-20 % below a stealing one; level where
    // the cores ran alike: docs/benchmarks.md, thirtieth session).
    const int64_t lines = n / 8;
    const BandwidthPass kind = kBandwidthPasses[rep % kKinds];
    constexpr int64_t kGrainLines = 2048;  // 128 KiB, about one decode GEMV block
    parallel_for_stealing(lines, kind.streams * kGrainLines, [&](int64_t b, int64_t e) {
      partial[size_t(omp_get_thread_num()) * 8] +=
          sum_lines(words + b * 8, e - b, kind.prefetch, kind.streams);
    }, 1 << 12);
    const double t = now_s() - t0;
    for (uint64_t v : partial) sink = sink + v;
    best = std::max(best, double(buffer_bytes) / t);
    if (rep >= 2 * kKinds - 1 && now_s() - t_start > 0.5) break;  // two passes of each kind
  }
  return best;
}

double measure_load_latency(size_t bytes, bool from_memory) {
  constexpr int64_t kMemoryNodes = int64_t(1) << 16;
  const int64_t lines = int64_t(bytes / 64);
  KILN_CHECK(lines >= 2 && (!from_memory || lines >= kMemoryNodes), "measure_load_latency: ",
             bytes, " bytes");
  detail::HugeBuffer buf(size_t(lines) * 64);
  auto* words = static_cast<uint64_t*>(buf.ptr);
  // The nodes: every line of a cached buffer; 64 Ki lines spread evenly over a memory one, which
  // is then flushed. Sattolo's shuffle links them in one random cycle: each node's first word holds
  // the next node's word index.
  const int64_t nodes = from_memory ? kMemoryNodes : lines, stride = lines / nodes;
  std::vector<uint32_t> order(static_cast<size_t>(nodes));
  for (int64_t i = 0; i < nodes; ++i) order[size_t(i)] = uint32_t(i);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t i = nodes - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(order[size_t(i)], order[size_t((s >> 33) % uint64_t(i))]);
  }
  auto word_of = [&](int64_t node) { return uint64_t(order[size_t(node)]) * uint64_t(stride) * 8; };
  for (int64_t i = 0; i < nodes; ++i) words[word_of(i)] = word_of((i + 1) % nodes);
  uint64_t at = word_of(0);
  if (from_memory) {
#if defined(__x86_64__)
    for (int64_t i = 0; i < nodes; ++i) _mm_clflush(words + word_of(i));
    _mm_mfence();
#endif
  } else {
    for (int64_t i = 0; i < nodes; ++i) at = words[at];  // a lap untimed: into the caches
  }
  const double t0 = now_s();
  for (int64_t i = 0; i < nodes; ++i) at = words[at];
  const double t = now_s() - t0;
  asm volatile("" : : "r"(at));  // keeps the chase
  return t / double(nodes) * 1e9;
}

double measure_gemm_peak(DType dtype) {
  KILN_CHECK(dtype == DType::bf16 || dtype == DType::f32, "measure_gemm_peak: dtype ",
             dtype_name(dtype), " must be f32 or bf16");
  constexpr int64_t M = 512, N = 2048, K = 2048;
  std::vector<float> wv(size_t(N * K)), xv(size_t(M * K));
  uint32_t s = 12345;
  auto rnd = [&s] {
    s = s * 1664525u + 1013904223u;
    return float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23);
  };
  for (float& v : wv) v = rnd();
  for (float& v : xv) v = rnd();
  auto w = PackedLinear::pack(Tensor::from_vector(wv, {N, K}), dtype);
  Tensor x = Tensor::from_vector(xv, {M, K}).to(dtype);
  Tensor y = Tensor::empty({M, N}, DType::f32);
  linear(x, *w, y);  // creates and caches the primitive
  double best = 0;
  const double t_start = now_s();
  for (int rep = 0; rep < 30; ++rep) {
    const double t0 = now_s();
    linear(x, *w, y);
    const double t = now_s() - t0;
    best = std::max(best, 2.0 * M * N * K / t);
    if (rep >= 4 && now_s() - t_start > 0.5) break;
  }
  return best;
}

}  // namespace kiln::cpu
