// bf16 linear on the packed weight layout (linear_dnnl.h) for CPUs without AVX512_BF16 and builds
// without it: AVX2 + FMA where the CPU has them (chosen at run time, so a portable build uses them
// too), plain C++ elsewhere. Weights stay bf16 in memory and are widened in registers (a bf16 is
// the top half of an f32, so widening is a shift or a mask); x is rounded to bf16 first, as on the
// vdpbf16ps path, so every ISA multiplies the same numbers. oneDNN 2.6 has no bf16 matmul below
// AVX-512 (AMD Zen 3, most laptops): without this, a bf16 model could not run there at all.
#include <algorithm>
#include <cstring>

#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu::detail {
namespace {

// Rows of x handled together against one slice of a weight block: enough to reuse each widened
// weight vector four times, few enough that the accumulators stay in AVX2's 16 registers.
constexpr int64_t kRowsPerTile = 4;

// thread_scratch slots: x widened, a chunk of W widened, the GEMM's accumulators (1-2 are
// linear()'s, 3-8 the prefill attention's, 9-10 gemm_bf16's).
constexpr int kScratchX = 11, kScratchWide = 12, kScratchAcc = 13;

// k pairs per L1 chunk of a block (256 bytes each) in the multi-row AVX2 path.
constexpr int64_t kChunkPairs = 32;

// Rows per panel of x in the many-row AVX2 path (its register tile's height).
constexpr int64_t kGemmRows = 6;

int64_t panel_count(int64_t M) { return (M + kGemmRows - 1) / kGemmRows; }

#if defined(__x86_64__)
// Panel g of x (see pack_x_panels), 8 k at a time: the panel's rows widened, transposed as an
// 8 x 8 block whose last two rows are zero, and each column (the panel's 6 values of one k) stored.
__attribute__((target("avx2,fma"))) void pack_x_panel(const uint16_t* xb, int64_t M, int64_t Kp,
                                                     int64_t g, float* xp) {
  float* dst = xp + g * Kp * kGemmRows;
  for (int64_t k = 0; k < Kp; k += 8) {
    __m256 r[8];
    for (int64_t m = 0; m < 8; ++m) {
      const int64_t row = g * kGemmRows + m;
      r[m] = m < kGemmRows && row < M
                 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                       _mm256_cvtepu16_epi32(_mm_loadu_si128(
                           reinterpret_cast<const __m128i*>(xb + row * Kp + k))),
                       16))
                 : _mm256_setzero_ps();
    }
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    const __m256 col[8] = {
        _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
        _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
        _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
        _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    // Stored whole, in order, each store's last two lanes overwritten by the next; the panel's
    // last 6 values without them, as the next panel may be another thread's.
    for (int64_t j = 0; j < 7; ++j) _mm256_storeu_ps(dst + (k + j) * kGemmRows, col[j]);
    float* last = dst + (k + 7) * kGemmRows;
    if (k + 8 < Kp) {
      _mm256_storeu_ps(last, col[7]);
    } else {
      _mm_storeu_ps(last, _mm256_castps256_ps128(col[7]));
      _mm_storel_pi(reinterpret_cast<__m64*>(last + 4), _mm256_extractf128_ps(col[7], 1));
    }
  }
}

// xp[(g * Kp + k) * kGemmRows + m] = x[g * kGemmRows + m][k], rows past M zero. Split over the
// threads: on one, the packing left the other idle for ~2.5 % of a 512 x 1024 x 3072 call. In
// vectors: element by element, it took 3.4 % of a 128 x 1024 x 1024 call on one thread (now 0.9).
void pack_x_panels(const uint16_t* xb, int64_t M, int64_t Kp, float* xp) {
  KILN_CHECK(Kp % 8 == 0, "pack_x_panels: Kp = ", Kp, " must be a multiple of 8");
  parallel_for(panel_count(M), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) pack_x_panel(xb, M, Kp, g, xp);
  }, std::max<int64_t>(1, (int64_t(16) << 10) / (kGemmRows * Kp)));
}
#endif

// Adds the residual, converts and stores tile values v[m][j] (columns c0 + j, clipped to N).
void store_tile(const float* v, int64_t ldv, int64_t rows, int64_t c0, int64_t cols, int64_t N,
                int64_t m0, void* y, bool y_bf16, const float* residual) {
  const int64_t n = std::min(cols, N - c0);
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t off = (m0 + m) * N + c0;
    int64_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    // In vectors where the build has them: a 512 x 6144 bf16 output (gate_up at P = 512) took
    // 0.9 ms on one thread element by element, 0.5 ms so (most of it is the write itself).
    for (; j + 8 <= n; j += 8) {
      __m256 s = _mm256_loadu_ps(v + m * ldv + j);
      if (residual) s = _mm256_add_ps(s, _mm256_loadu_ps(residual + off + j));
      if (y_bf16)
        store_bf16x8(static_cast<uint16_t*>(y) + off + j, s);
      else
        _mm256_storeu_ps(static_cast<float*>(y) + off + j, s);
    }
#endif
    for (; j < n; ++j) {
      float s = v[m * ldv + j];
      if (residual) s += residual[off + j];
      if (y_bf16)
        static_cast<uint16_t*>(y)[off + j] = f32_to_bf16(s);
      else
        static_cast<float*>(y)[off + j] = s;
    }
  }
}

// Plain C++: rows [m0, m0 + rows) against every column of block b.
void block_scalar(const float* x, int64_t Kp, int64_t m0, int64_t rows, const uint16_t* wblk,
                  int64_t b, int64_t N, void* y, bool y_bf16, const float* residual) {
  float acc[kRowsPerTile * kBlockN];
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + (m0 + m) * Kp;
    for (int64_t c = 0; c < kBlockN; ++c) {
      float s = 0.f;
      for (int64_t p = 0; p < Kp / 2; ++p) {
        const uint16_t* w = wblk + p * 2 * kBlockN + 2 * c;
        s += bf16_to_f32(w[0]) * xr[2 * p] + bf16_to_f32(w[1]) * xr[2 * p + 1];
      }
      acc[m * kBlockN + c] = s;
    }
  }
  store_tile(acc, kBlockN, rows, b * kBlockN, kBlockN, N, m0, y, y_bf16, residual);
}

#if defined(__x86_64__)
// MR rows x NV vectors of 8 columns, starting at column col of the block. Each 32-bit lane of the
// layout holds (W[k even][c], W[k odd][c]): the low half shifted up is the even k's f32, the high
// half masked is the odd k's. Prefetch: the next chunk's k pairs (below); Kick: one prefetch per
// 4 KiB page (kick_page_ahead), for one row streaming the whole block.
template <int MR, int NV, bool Prefetch = false, bool Kick = false>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int64_t Kp, int64_t m0,
                                                  const uint16_t* wblk, int64_t col, int64_t p0,
                                                  int64_t p1, float* out) {
  // AVX2 has 16 registers: MR x NV accumulators plus either every row's two broadcasts (rows
  // inner) or every vector's two widened halves (vectors inner), whichever fits; loops fully
  // unrolled so GCC keeps acc in registers.
  constexpr bool kRowsInner = 2 * MR + MR * NV + 3 <= 16;
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[m][v] = p0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + m * kBlockN + 8 * v);
  const __m256i high = _mm256_set1_epi32(int32_t(0xffff0000u));
  const float* xr = x + m0 * Kp;
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* w = wblk + p * 2 * kBlockN + 2 * col;
    if constexpr (Kick) kick_page_ahead(w);
    // The first slice of a chunk pulls in the next chunk's k pairs whole (all four lines).
    if (Prefetch)
      for (int line = 0; line < 4; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(wblk + (p + kChunkPairs) * 2 * kBlockN) +
                         64 * line,
                     _MM_HINT_T0);
    if constexpr (kRowsInner) {
      __m256 xe[MR], xo[MR];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        xe[m] = _mm256_broadcast_ss(xr + m * Kp + 2 * p);
        xo[m] = _mm256_broadcast_ss(xr + m * Kp + 2 * p + 1);
      }
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * v));
        const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
        const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          acc[m][v] = _mm256_fmadd_ps(even, xe[m], acc[m][v]);
          acc[m][v] = _mm256_fmadd_ps(odd, xo[m], acc[m][v]);
        }
      }
    } else {
      __m256 even[NV], odd[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * v));
        even[v] = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
        odd[v] = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
      }
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 xe = _mm256_broadcast_ss(xr + m * Kp + 2 * p);
        const __m256 xo = _mm256_broadcast_ss(xr + m * Kp + 2 * p + 1);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm256_fmadd_ps(even[v], xe, acc[m][v]);
          acc[m][v] = _mm256_fmadd_ps(odd[v], xo, acc[m][v]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + m * kBlockN + 8 * v, acc[m][v]);
}

// Rows [m0, m0 + rows) (rows <= 4) against every column of block b. One row streams the block
// front to back (the decode GEMV: 8 accumulators, one 256-byte k pair per step); more rows walk it
// in column slices so their accumulators fit in registers.
template <int MR>
__attribute__((target("avx2,fma"))) void rows_block_avx2(const float* x, int64_t Kp, int64_t m0,
                                                        const uint16_t* wblk, float* acc) {
  if constexpr (MR == 1) {
    // One prefetch per page as in gemv_bf16 (GemvPrefetch): on the Zen 5 this loop read a token
    // step's weights at a median of 52.3 and 54.2 GB/s with it, 35.4 and 40.0 without
    // (bench_gemv_portable, alternated; docs/benchmarks.md, thirty-fourth session). On a Zen 4,
    // where gemv_prefetch() takes none, none read 53.7-54.3 against 48.3-48.9 when memory was
    // fast (forty-seventh session). Not measured on an AVX2-only CPU.
    if (gemv_prefetch() == GemvPrefetch::kPageKick)
      tile_avx2<1, 8, false, true>(x, Kp, m0, wblk, 0, 0, Kp / 2, acc);
    else
      tile_avx2<1, 8>(x, Kp, m0, wblk, 0, 0, Kp / 2, acc);
  } else {
    // Chunks of k pairs small enough for L1, every slice over one chunk before the next: a
    // strided walk of the whole block per slice ran M = 2-4 at a third of the bandwidth. With
    // four slices (M = 3-4) the chunk is read front to back first, in loads (touch_bytes): the
    // prefetch instructions left those steps 20-25 % slower on the Zen 3 (bench_linear --m 3,4);
    // with two (M = 2) the prefetch was as fast or faster.
    constexpr int NV = MR == 2 ? 4 : 2;
    for (int64_t p0 = 0; p0 < Kp / 2; p0 += kChunkPairs) {
      const int64_t p1 = std::min(Kp / 2, p0 + kChunkPairs);
      if constexpr (NV == 2) {
        touch_bytes(wblk + p0 * 2 * kBlockN, (p1 - p0) * 2 * kBlockN * int64_t(sizeof(uint16_t)));
        tile_avx2<MR, NV>(x, Kp, m0, wblk, 0, p0, p1, acc);
      } else {
        tile_avx2<MR, NV, true>(x, Kp, m0, wblk, 0, p0, p1, acc);
      }
      for (int64_t col = 8 * NV; col < kBlockN; col += 8 * NV)
        tile_avx2<MR, NV>(x, Kp, m0, wblk, col, p0, p1, acc + col);
    }
  }
}

void block_avx2(const float* x, int64_t Kp, int64_t m0, int64_t rows, const uint16_t* wblk,
                int64_t b, int64_t N, void* y, bool y_bf16, const float* residual) {
  alignas(32) float acc[kRowsPerTile * kBlockN];
  switch (rows) {
    case 1: rows_block_avx2<1>(x, Kp, m0, wblk, acc); break;
    case 2: rows_block_avx2<2>(x, Kp, m0, wblk, acc); break;
    case 3: rows_block_avx2<3>(x, Kp, m0, wblk, acc); break;
    default: rows_block_avx2<4>(x, Kp, m0, wblk, acc); break;
  }
  store_tile(acc, kBlockN, rows, b * kBlockN, kBlockN, N, m0, y, y_bf16, residual);
}

// Many rows (prefill): a chunk of the block's k pairs is widened once into f32, then 6 x 16
// register tiles run every row against it, 12 FMAs per 2 loads of W and 6 broadcasts of x (the
// 4-row tiles above widen W again for every row group: ~75 GFLOP/s at M = 128 on two Zen 3
// cores). x comes packed in panels of 6 rows interleaved by k (pack_x_panels), so a tile's six
// broadcasts of a k are one 24-byte run rather than six rows Kp apart, and the tiles of a block
// of 96 rows run slice by slice, so a 16-column slice of the chunk is reused from L1: 1-10 %
// faster than rows read in place, tile by tile over the whole chunk (same-process A/B on the
// model's shapes, M = 128 and 512). The chunk is widened slice by slice (a slice's 256 k x 16
// columns contiguous, 16 KiB): as rows of 64 columns, a slice's lines were 256 bytes apart and
// fell in a quarter of L1's sets, so they could not all stay there (~15 % slower on one core).
constexpr int64_t kGemmChunkPairs = 128;  // 256 k x 64 columns of f32: 64 KiB, in L2
constexpr int64_t kGemmBlockGroups = 16;  // panels (of kGemmRows rows) per block of rows
constexpr int64_t kGemmCols = 16;         // columns of a register tile (two vectors)

// wf[s][k][j] = W[k0 + k][16 s + j] for the chunk's k pairs [p0, p1): slice s of 16 columns.
__attribute__((target("avx2,fma"))) void widen_chunk(const uint16_t* wblk, int64_t p0, int64_t p1,
                                                    float* wf) {
  const __m256i high = _mm256_set1_epi32(int32_t(0xffff0000u));
  const int64_t kn = 2 * (p1 - p0);
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* w = wblk + p * 2 * kBlockN;
    for (int v = 0; v < kBlockN / 8; ++v) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * v));
      float* even = wf + (v / 2) * kn * kGemmCols + 2 * (p - p0) * kGemmCols + 8 * (v % 2);
      _mm256_storeu_ps(even, _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)));
      _mm256_storeu_ps(even + kGemmCols, _mm256_castsi256_ps(_mm256_and_si256(raw, high)));
    }
  }
}

// c[m][col, col + 16) (+)= panel[k0, k0 + kn)[m] . wf[0, kn)[col, col + 16) for the first MR <= 6
// rows of one panel of x.
template <int MR>
__attribute__((target("avx2,fma"))) void gemm_tile_avx2(const float* panel, int64_t k0, int64_t kn,
                                                       const float* wf, int64_t col, float* c) {
  // Loops over m fully unrolled, so acc lives in registers (GCC kept a copy on the stack,
  // stored every iteration, without it).
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    acc[m][0] = _mm256_setzero_ps();
    acc[m][1] = _mm256_setzero_ps();
  }
  if (k0 > 0) {
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      acc[m][0] = _mm256_loadu_ps(c + m * kBlockN + col);
      acc[m][1] = _mm256_loadu_ps(c + m * kBlockN + col + 8);
    }
  }
  const float* xk = panel + k0 * kGemmRows;
  const float* ws = wf + (col / kGemmCols) * kn * kGemmCols;
  // Unrolled by 4: the rolled loop (20 instructions + 5 of loop upkeep) ran a tile from L1 at
  // ~78 % of one Zen 3 core's FMA peak, unrolled at ~96 %.
#pragma GCC unroll 4
  for (int64_t k = 0; k < kn; ++k) {
    const __m256 w0 = _mm256_loadu_ps(ws + k * kGemmCols);
    const __m256 w1 = _mm256_loadu_ps(ws + k * kGemmCols + 8);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m256 a = _mm256_broadcast_ss(xk + k * kGemmRows + m);
      acc[m][0] = _mm256_fmadd_ps(w0, a, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(w1, a, acc[m][1]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    _mm256_storeu_ps(c + m * kBlockN + col, acc[m][0]);
    _mm256_storeu_ps(c + m * kBlockN + col + 8, acc[m][1]);
  }
}

// Rows [m0, m0 + M) (x packed in panels, from the panel of row m0) against block b.
void gemm_block_avx2(const float* xp, int64_t m0, int64_t M, int64_t Kp, const uint16_t* wblk,
                     int64_t b, int64_t N, void* y, bool y_bf16, const float* residual) {
  auto* wf = static_cast<float*>(
      thread_scratch(kScratchWide, size_t(kGemmChunkPairs * 2 * kBlockN) * 4));
  auto* c = static_cast<float*>(thread_scratch(kScratchAcc, size_t(M * kBlockN) * 4));
  const int64_t panels = panel_count(M);
  for (int64_t p0 = 0; p0 < Kp / 2; p0 += kGemmChunkPairs) {
    const int64_t p1 = std::min(Kp / 2, p0 + kGemmChunkPairs), k0 = 2 * p0, kn = 2 * (p1 - p0);
    widen_chunk(wblk, p0, p1, wf);
    for (int64_t g0 = 0; g0 < panels; g0 += kGemmBlockGroups)
      for (int64_t col = 0; col < kBlockN; col += kGemmCols)
        for (int64_t g = g0; g < std::min(panels, g0 + kGemmBlockGroups); ++g) {
          const float* panel = xp + g * Kp * kGemmRows;
          float* cg = c + g * kGemmRows * kBlockN;
          switch (std::min(kGemmRows, M - g * kGemmRows)) {
            case 1: gemm_tile_avx2<1>(panel, k0, kn, wf, col, cg); break;
            case 2: gemm_tile_avx2<2>(panel, k0, kn, wf, col, cg); break;
            case 3: gemm_tile_avx2<3>(panel, k0, kn, wf, col, cg); break;
            case 4: gemm_tile_avx2<4>(panel, k0, kn, wf, col, cg); break;
            case 5: gemm_tile_avx2<5>(panel, k0, kn, wf, col, cg); break;
            default: gemm_tile_avx2<6>(panel, k0, kn, wf, col, cg); break;
          }
        }
  }
  store_tile(c, kBlockN, M, b * kBlockN, kBlockN, N, m0, y, y_bf16, residual);
}

// The GEMM in passes over the rows, each a parallel loop over the weight's blocks. x is streamed
// once per block; once x outgrew what stays in cache (6.3 MB at M = 512, K = 3072), the shapes
// with a large K lost 10-20 %: one thread ran 63-65 GFLOP/s there with x whole, 70-72 in passes
// of 1.6-2 MB (K = 1024: 77-85 either way). Passes re-read the weight, so they are as few as the
// limit allows, of equal size: x of 2.1 MB whole was 1-4 % faster than in two passes.
constexpr int64_t kGemmPassBytes = int64_t(3) << 20;

void gemm_avx2(const float* xp, int64_t M, int64_t Kp, const uint16_t* w, int64_t N, void* y,
               bool y_bf16, const float* residual) {
  const int64_t panels = panel_count(M), panel_floats = Kp * kGemmRows;
  const int64_t x_bytes = panels * panel_floats * int64_t(sizeof(float));
  const int64_t passes = (x_bytes + kGemmPassBytes - 1) / kGemmPassBytes;
  const int64_t pass_panels = (panels + passes - 1) / passes;
  for (int64_t g0 = 0; g0 < panels; g0 += pass_panels) {
    const int64_t m0 = g0 * kGemmRows, rows = std::min(M, (g0 + pass_panels) * kGemmRows) - m0;
    parallel_for_stealing((N + kBlockN - 1) / kBlockN, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        gemm_block_avx2(xp + g0 * panel_floats, m0, rows, Kp, w + b * Kp * kBlockN, b, N, y,
                        y_bf16, residual);
    });
  }
}
#endif

}  // namespace

bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

void linear_bf16_portable(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w,
                          int64_t N, void* y, bool y_bf16, const float* residual, bool vector) {
  KILN_CHECK(Kp % 2 == 0, "linear_bf16_portable: Kp = ", Kp, " must be even");
  const bool avx2 = vector && cpu_has_avx2_fma();
  // x widened once (exact): the kernels broadcast single f32 values of it. The AVX2 GEMM path
  // (M > kRowsPerTile) takes it in panels.
  const bool gemm = avx2 && M > kRowsPerTile;
  auto* x = static_cast<float*>(thread_scratch(
      kScratchX, size_t((gemm ? panel_count(M) * kGemmRows : M) * Kp) * 4));
#if defined(__x86_64__)
  if (gemm) {
    pack_x_panels(xb, M, Kp, x);
    gemm_avx2(x, M, Kp, w, N, y, y_bf16, residual);
    return;
  }
#endif
  for (int64_t i = 0; i < M * Kp; ++i) x[i] = bf16_to_f32(xb[i]);
  const int64_t nblocks = (N + kBlockN - 1) / kBlockN;
  // A block (64 columns, Kp * 128 bytes) is the work item: every row group runs against it while
  // it is in L2, so each weight byte is read from memory once per call. Threads steal blocks, as
  // in the AVX512_BF16 GEMV; tiny problems stay on one thread.
  const int64_t min_blocks =
      std::max<int64_t>(1, (int64_t(64) << 10) / std::max<int64_t>(1, Kp * kBlockN * 2 * M));
  parallel_for_stealing(nblocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint16_t* wblk = w + b * Kp * kBlockN;
      for (int64_t m0 = 0; m0 < M; m0 += kRowsPerTile) {
        const int64_t rows = std::min(kRowsPerTile, M - m0);
#if defined(__x86_64__)
        if (avx2) {
          block_avx2(x, Kp, m0, rows, wblk, b, N, y, y_bf16, residual);
          continue;
        }
#endif
        block_scalar(x, Kp, m0, rows, wblk, b, N, y, y_bf16, residual);
      }
    }
  }, min_blocks);
}

}  // namespace kiln::cpu::detail
