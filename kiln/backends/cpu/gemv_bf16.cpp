// bf16 GEMV / skinny GEMM (M <= 8) over oneDNN's BA16a64b2a weight layout, with AVX512_BF16
// (vdpbf16ps). Decode is memory bound: the goal is to stream every weight byte exactly once at the
// machine's read bandwidth, so each thread walks a contiguous range of 64-column blocks front to
// back (one sequential stream per core) and keeps all M rows' accumulators in registers.
#include <immintrin.h>

#include <algorithm>

#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cpu::detail {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)

namespace {

// Prefetch distance in k pairs (256 bytes each). The hardware prefetcher follows one stream per
// core well; a modest software prefetch keeps it ahead at the start of each block.
constexpr int64_t kPrefetchPairs = 8;

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// acc[m][j] += W[block columns 16j..16j+15, :] . x[m, :] over all Kp (MR rows, MR <= 4).
// Prefetches the 4 cache lines of k pair p of the stream at `pf` (L1 for the block being read,
// L2 for the next block while a re-read pass runs from L2).
template <bool kNext>
inline void prefetch_pair(const uint16_t* pf) {
  // The hint must be a literal constant for clang's _mm_prefetch, hence two spelled-out branches.
  if constexpr (kNext) {
    for (int i = 0; i < 4; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * i), _MM_HINT_T1);
  } else {
    for (int i = 0; i < 4; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * i), _MM_HINT_T0);
  }
}

// pf: the stream to prefetch alongside (pf + p * 128 for k pair p).
template <int MR, bool kNext>
inline void block_dot(const uint32_t* const* xp, int64_t pairs, const uint16_t* wblk,
                      const uint16_t* pf, __m512 (&acc)[MR][4]) {
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  if constexpr (MR == 1) {
    // One row: two accumulator sets over even/odd k pairs, so 8 independent FMA chains hide the
    // dpbf16 latency.
    __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    const uint32_t* x0 = xp[0];
    for (int64_t p = 0; p < pairs; p += 2) {
      const uint16_t* w = wblk + p * 128;
      prefetch_pair<kNext>(pf + p * 128);
      prefetch_pair<kNext>(pf + p * 128 + 128);
      __m512bh xa = as_bh(_mm512_set1_epi32(int(x0[p])));
      __m512bh xb = as_bh(_mm512_set1_epi32(int(x0[p + 1])));
      for (int j = 0; j < 4; ++j) {
        acc[0][j] = _mm512_dpbf16_ps(acc[0][j], as_bh(_mm512_loadu_si512(w + 32 * j)), xa);
        b[j] = _mm512_dpbf16_ps(b[j], as_bh(_mm512_loadu_si512(w + 128 + 32 * j)), xb);
      }
    }
    for (int j = 0; j < 4; ++j) acc[0][j] = _mm512_add_ps(acc[0][j], b[j]);
  } else {
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* w = wblk + p * 128;
      prefetch_pair<kNext>(pf + p * 128);
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
}

// Writes acc for rows [m0, m0 + MR) and block columns [n0, n0 + 64) clipped to N.
template <int MR>
inline void store_block(const __m512 (&acc)[MR][4], int64_t m0, int64_t n0, int64_t N, void* y,
                        bool y_bf16, const float* residual) {
  for (int j = 0; j < 4; ++j) {
    int64_t c = n0 + 16 * j;
    if (c >= N) break;
    int64_t left = N - c;
    __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    for (int m = 0; m < MR; ++m) {
      int64_t off = (m0 + m) * N + c;
      __m512 v = acc[m][j];
      if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + off));
      if (y_bf16) {
        __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + off, mask, h);
      } else {
        _mm512_mask_storeu_ps(static_cast<float*>(y) + off, mask, v);
      }
    }
  }
}

// Rows [m0, m0 + MR) of one block. The first row chunk streams the block from memory; later chunks
// re-read it from L2 and meanwhile pull the next block into L2 (`next`), so the memory stream never
// idles while rows 5..8 are computed.
template <int MR>
inline void rows_block(const uint16_t* xb, int64_t m0, int64_t Kp, const uint16_t* wblk,
                       const uint16_t* next, int64_t n0, int64_t N, void* y, bool y_bf16,
                       const float* residual) {
  const uint32_t* xp[MR];
  for (int m = 0; m < MR; ++m) xp[m] = reinterpret_cast<const uint32_t*>(xb + (m0 + m) * Kp);
  __m512 acc[MR][4];
  if (m0 == 0) {
    block_dot<MR, false>(xp, Kp / 2, wblk, wblk + kPrefetchPairs * 128, acc);
  } else {
    block_dot<MR, true>(xp, Kp / 2, wblk, next, acc);
  }
  store_block<MR>(acc, m0, n0, N, y, y_bf16, residual);
}

}  // namespace

void gemv_bf16(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N, void* y,
               bool y_bf16, const float* residual) {
  const int64_t nblocks = (N + kBlockN - 1) / kBlockN;
  const int64_t block_elems = Kp * kBlockN;
  // Each thread gets at least ~64 KiB of weights: below that, waking the pool costs more than the
  // stream itself (tiny models, tests).
  const int64_t min_blocks = std::max<int64_t>(1, (int64_t(64) << 10) / (block_elems * 2));
  parallel_for(nblocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint16_t* wblk = w + b * block_elems;
      // Past this thread's range the prefetch target is harmless (prefetches never fault).
      const uint16_t* next = wblk + block_elems;
      const int64_t n0 = b * kBlockN;
      // Rows in chunks of up to 4 (16 accumulators); a second chunk re-reads the block from L2.
      // (linear() sends M > 4 to the GEMM kernel, gemm_bf16_packed.)
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        switch (std::min<int64_t>(4, M - m0)) {
          case 1: rows_block<1>(xb, m0, Kp, wblk, next, n0, N, y, y_bf16, residual); break;
          case 2: rows_block<2>(xb, m0, Kp, wblk, next, n0, N, y, y_bf16, residual); break;
          case 3: rows_block<3>(xb, m0, Kp, wblk, next, n0, N, y, y_bf16, residual); break;
          default: rows_block<4>(xb, m0, Kp, wblk, next, n0, N, y, y_bf16, residual); break;
        }
      }
    }
  }, min_blocks);
}

bool gemv_bf16_available() { return true; }

#else  // no AVX512_BF16 at compile time: linear() sends every M to oneDNN.

void gemv_bf16(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, void*, bool,
               const float*) {
  KILN_CHECK(false, "gemv_bf16 called in a build without AVX512_BF16");
}
bool gemv_bf16_available() { return false; }

#endif

}  // namespace kiln::cpu::detail
