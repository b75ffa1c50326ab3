// bf16 GEMV / skinny GEMM (M <= kGemvMaxM) over oneDNN's BA16a64b2a weight layout, with
// AVX512_BF16 (vdpbf16ps). Decode is memory bound: the goal is to stream every weight byte once
// from memory at the machine's read bandwidth, so each thread walks a contiguous range of
// 64-column blocks front to back (one sequential stream per core), computes up to 8 rows in one
// walk of a block (more rows walk it again, from L2), and takes blocks from the other thread's
// range when its own is done (parallel_for_stealing).
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cpu::detail {

// How the GEMV helps the hardware prefetcher, chosen once per process.
// - Every line, 4 KiB ahead into L2 (Intel cores): on an Emerald Rapids the GEMVs streamed 18-19
//   GB/s without, 25-29 GB/s with it (bench_linear's model order, median 64.7 -> 41.4-48.6 ms):
//   its L2 streamer stops at each 4 KiB page, and a core running vdpbf16ps between loads keeps too
//   few misses in flight to cover the restart.
// - One line per 4 KiB page, 32 KiB ahead (kick_page_ahead, simd.h; other CPUs): AMD's Zen 5
//   restarts at each page too, but there a prefetch of every line, 0.5-64 KiB ahead, streamed
//   slower than none (16.4 against 18.1-18.5 ms per token's linears), while one per page took
//   the linears of a token step, in model order, from a median of 30.1-31.2 ms to 19.5-22.0
//   (8-64 KiB ahead alike, switched in one process), and `kiln bench`'s decode from 30-41 to
//   43-52 tokens/s (docs/benchmarks.md, thirty-fourth session).
// - None on AMD's family 19h (Zen 3, Zen 4): on a Zen 4 VM the page kick read 10-15 % slower
//   than no prefetch whenever memory was fast (bench_linear's model order, alternated: 14.7-15.6
//   against 12.6-13.6 ms), and level when it was slow; decode steps with the kick took 1.08-1.16x
//   as long (bench_decode_ab, 192 pairs a run), and a prefetch of every line 1.01x (docs/
//   benchmarks.md, forty-seventh session).
// KILN_GEMV_PREFETCH=line|page|0 overrides (1 is line), for measuring them on another CPU.
GemvPrefetch gemv_prefetch() {
  static const GemvPrefetch mode = [] {
    const char* env = std::getenv("KILN_GEMV_PREFETCH");
    if (env && *env) {
      const std::string v = env;
      return v == "page" ? GemvPrefetch::kPageKick
             : v == "0"  ? GemvPrefetch::kNone
                         : GemvPrefetch::kEveryLine;
    }
#if defined(__x86_64__)
    if (__builtin_cpu_is("intel")) return GemvPrefetch::kEveryLine;
    if (__builtin_cpu_is("amdfam19h")) return GemvPrefetch::kNone;
#endif
    return GemvPrefetch::kPageKick;
  }();
  return mode;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)

namespace {

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

constexpr int64_t kPrefetchAhead = 4096;  // bytes, for GemvPrefetch::kEveryLine
constexpr int64_t kRowsMax = 8;  // rows one walk of a block takes (blocks_as)

// Fetches the 4 lines of one k pair kPrefetchAhead bytes past w into L2.
inline void prefetch_ahead(const uint16_t* w) {
  const char* q = reinterpret_cast<const char*>(w) + kPrefetchAhead;
  for (int i = 0; i < 4; ++i) _mm_prefetch(q + 64 * i, _MM_HINT_T1);
}

// acc[m][j] = W[block columns 16j..16j+15, :] . x[m, :] over all k pairs (MR <= kRowsMax rows).
template <int MR, GemvPrefetch kPrefetch>
inline void block_dot(const uint32_t* const* xp, int64_t pairs, const uint16_t* wblk,
                      __m512 (&acc)[MR][4]) {
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  // One k pair (4 lines of W) per iteration for every MR, MR x 4 chains. For one row the 4 chains
  // of vdpbf16ps (~6 cycles) would take ~40 B a cycle, far above what memory gives a core. On a Zen 4
  // this loop streams at a plain read's speed, where the old two pairs per iteration (8 chains) ran
  // 5-14 % slower in the same rounds (docs/benchmarks.md, twenty-seventh session).
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* w = wblk + p * 128;
    if constexpr (kPrefetch == GemvPrefetch::kEveryLine) prefetch_ahead(w);
    if constexpr (kPrefetch == GemvPrefetch::kPageKick) kick_page_ahead(w);  // a pair: 256 bytes
    __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 32);
    __m512i w2 = _mm512_loadu_si512(w + 64), w3 = _mm512_loadu_si512(w + 96);
    for (int m = 0; m < MR; ++m) {
      __m512bh xv = as_bh(_mm512_set1_epi32(int(xp[m][p])));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], as_bh(w0), xv);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], as_bh(w1), xv);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], as_bh(w2), xv);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], as_bh(w3), xv);
    }
  }
}

// Writes acc for rows [0, MR) and block columns [n0, n0 + 64) clipped to N.
template <int MR>
inline void store_block(const __m512 (&acc)[MR][4], int64_t n0, int64_t N, void* y, bool y_bf16,
                        const float* residual) {
  for (int j = 0; j < 4; ++j) {
    int64_t c = n0 + 16 * j;
    if (c >= N) break;
    int64_t left = N - c;
    __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    for (int m = 0; m < MR; ++m) {
      int64_t off = m * N + c;
      __m512 v = acc[m][j];
      if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + off));
      if (y_bf16) {
        __m256i h = detail::cvt_f32_bf16x16(v);
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + off, mask, h);
      } else {
        _mm512_mask_storeu_ps(static_cast<float*>(y) + off, mask, v);
      }
    }
  }
}

// Rows [0, MR) against blocks [b0, b1).
template <int MR, GemvPrefetch kPrefetch>
void rows_blocks_as(const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t b0, int64_t b1,
                    int64_t N, void* y, bool y_bf16, const float* residual) {
  const uint32_t* xp[MR];
  for (int m = 0; m < MR; ++m) xp[m] = reinterpret_cast<const uint32_t*>(xb + m * Kp);
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[MR][4];
    block_dot<MR, kPrefetch>(xp, Kp / 2, w + b * Kp * kBlockN, acc);
    store_block<MR>(acc, b * kBlockN, N, y, y_bf16, residual);
  }
}

// f(std::integral_constant<int, rows>) for rows in [R, kRowsMax].
template <int R = 1, typename F>
void with_rows(int64_t rows, F&& f) {
  if constexpr (R == kRowsMax)
    f(std::integral_constant<int, R>{});
  else if (rows == R)
    f(std::integral_constant<int, R>{});
  else
    with_rows<R + 1>(rows, f);
}

// All M rows against blocks [b0, b1). A row holds a block's 64 columns in 4 accumulators, so a
// block is walked by groups of up to kRowsMax rows: the first group streams it from memory, any
// others read it from L2 (a block is 128-384 KiB). Past 6 rows GCC keeps some accumulators on
// the stack (4 a row, W's 4 registers and x's broadcast), which a walk bound by memory absorbs:
// at M = 8 one walk read 0.74-0.76 of a paired plain read, 7 + 1 0.66-0.69; walks of 10-16 rows
// spill more than that. Rows 5 to 16 went to the GEMM's register tiles until the forty-sixth
// session, where a step's linears took 15.6 ms at M = 5 and 20.0 at M = 8 against 10.5 at M = 4
// (`bench_linear --layers 14`; here 9.8-11.2 and 11.9-13.2; docs/notes/cpu-gemm.md).
template <GemvPrefetch kPrefetch>
void blocks_as(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t b0,
               int64_t b1, int64_t N, void* y, bool y_bf16, const float* residual) {
  if (M <= kRowsMax)  // one walk: the thread's blocks in one loop, x's rows addressed once
    return with_rows(M, [&](auto mr) {
      rows_blocks_as<decltype(mr)::value, kPrefetch>(xb, Kp, w, b0, b1, N, y, y_bf16, residual);
    });
  const size_t elt = y_bf16 ? 2 : 4;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t g0 = 0; g0 < M; g0 += kRowsMax)
      with_rows(std::min(kRowsMax, M - g0), [&](auto mr) {
        rows_blocks_as<decltype(mr)::value, kPrefetch>(
            xb + g0 * Kp, Kp, w, b, b + 1, N, static_cast<char*>(y) + size_t(g0 * N) * elt, y_bf16,
            residual ? residual + g0 * N : nullptr);
      });
}

}  // namespace

void gemv_bf16(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N, void* y,
               bool y_bf16, const float* residual) {
  KILN_CHECK(M >= 1 && M <= kGemvMaxM, "gemv_bf16: M = ", M, " must be in [1, ", kGemvMaxM, "]");
  const int64_t nblocks = (N + kBlockN - 1) / kBlockN;
  // Each thread gets at least ~64 KiB of weights: below that, waking the pool costs more than the
  // stream itself (tiny models, tests).
  const int64_t min_blocks = std::max<int64_t>(1, (int64_t(64) << 10) / (Kp * kBlockN * 2));
  // One block (64 columns, 128-384 KiB at these widths) per claim: a claim is one atomic, next to
  // microseconds of streaming.
  // The kind of prefetch is chosen here, outside the loops, which then have nothing to test.
  auto body = [&](int64_t b0, int64_t b1) {
    switch (gemv_prefetch()) {
      case GemvPrefetch::kPageKick:
        return blocks_as<GemvPrefetch::kPageKick>(xb, M, Kp, w, b0, b1, N, y, y_bf16, residual);
      case GemvPrefetch::kEveryLine:
        return blocks_as<GemvPrefetch::kEveryLine>(xb, M, Kp, w, b0, b1, N, y, y_bf16, residual);
      default:
        return blocks_as<GemvPrefetch::kNone>(xb, M, Kp, w, b0, b1, N, y, y_bf16, residual);
    }
  };
  parallel_for_stealing(nblocks, 1, body, min_blocks);
}

bool avx512_bf16_kernels() { return true; }

#else  // no AVX512_BF16 at compile time: linear() uses oneDNN or linear_bf16_portable.

void gemv_bf16(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, void*, bool,
               const float*) {
  KILN_CHECK(false, "gemv_bf16 called in a build without AVX512_BF16");
}
bool avx512_bf16_kernels() { return false; }

#endif

}  // namespace kiln::cpu::detail
