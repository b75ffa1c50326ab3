// kiln's bf16 GEMM, for training and prefill: C = beta * C + op(A) op(B) with bf16 A and B, f32
// accumulation and an f32 C (or a bf16 C with beta = 0), on AVX512_BF16 (vdpbf16ps). Written
// because oneDNN 2.6 runs the lm_head's three GEMMs of a training step (forward [T, H] x [H, V],
// input gradient [T, V] x [V, H], weight gradient [V, T] x [T, H], V = 151,936) at 375-600 GFLOP/s
// here, and they are most of a small model's step; prefill runs it on the linear layers' packed
// weights, which are already its B panels (docs/notes/cpu-gemm.md, "Training GEMM and prefill").
//
// Structure: the usual loops around a register-tile micro-kernel. For each block of kNC columns and
// kKC k values, B is packed into panels of 64 columns laid out as the k pairs vdpbf16ps multiplies
// ([pairs][64 columns][2] bf16, zero past K and N); for each block of kMC rows, A is either read in
// place (untransposed with even K: a row's k pair is one 32-bit word, broadcast as is) or packed
// (transposed: [pairs][rows] words, two rows of the stored matrix interleaved). The micro-kernel
// keeps a 6 x 64 f32 tile in 24 registers while it walks the k pairs of one A panel and one B
// panel, then adds it into C once per k block. Each thread owns a range of C's rows or columns
// (whichever avoids packing the same A twice). On CPUs that run f32 FMAs faster than vdpbf16ps
// (Intel's Sapphire and Emerald Rapids) a second tile does the same work on FMAs over inputs
// widened to f32 (micro_tile_fma, below).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"  // f32_fma_outruns_dpbf16
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"  // <immintrin.h>, under its GCC 12 warning pragma
#include "kiln/core/threads.h"

namespace kiln::cpu::detail {

namespace {

// Interleaves 32 elements of rows r0 and r1 into 32 words (r0[i] low, r1[i] high): the permutation
// indices for the first and second 16 words.
#ifdef __AVX512BW__
struct PairInterleave {
  __m512i lo, hi;
  PairInterleave() {
    alignas(64) uint16_t l[32], h[32];
    for (int i = 0; i < 32; ++i) {
      l[i] = uint16_t((i & 1 ? 32 : 0) + i / 2);
      h[i] = uint16_t((i & 1 ? 32 : 0) + 16 + i / 2);
    }
    lo = _mm512_load_si512(l);
    hi = _mm512_load_si512(h);
  }
};
const PairInterleave& pair_interleave() {
  static const PairInterleave il;
  return il;
}

// Transposes the 16 x 16 32-bit words in r (row i = r[i]) in place: four rounds that swap the
// off-diagonal d x d blocks of every 2d x 2d block (d = 8, 4, 2, 1), two permutes per row pair.
struct Transpose16 {
  __m512i lo[4], hi[4];  // per round: the permutes giving rows i and i + d
  Transpose16() {
    for (int s = 0; s < 4; ++s) {
      const int d = 8 >> s;
      alignas(64) int32_t l[16], h[16];
      for (int j = 0; j < 16; ++j) {
        l[j] = (j & d) ? 16 + j - d : j;
        h[j] = (j & d) ? 16 + j : j + d;
      }
      lo[s] = _mm512_load_si512(l);
      hi[s] = _mm512_load_si512(h);
    }
  }
  void operator()(__m512i (&r)[16]) const {
    for (int s = 0; s < 4; ++s) {
      const int d = 8 >> s;
      for (int i = 0; i < 16; ++i) {
        if (i & d) continue;
        const __m512i a = r[i], b = r[i + d];
        r[i] = _mm512_permutex2var_epi32(a, lo[s], b);
        r[i + d] = _mm512_permutex2var_epi32(a, hi[s], b);
      }
    }
  }
};
const Transpose16& transpose16() {
  static const Transpose16 t;
  return t;
}
#endif

// Packs B[k0, k0 + kc) x [n0, n0 + nc) (B[k, n] = b[k * ldb + n], or b[n * ldb + k] if trans)
// into panels of 64 columns, [pairs][64][2] each, zero past kc and nc.
void pack_b(const uint16_t* b, int64_t ldb, bool trans, int64_t k0, int64_t kc, int64_t n0,
            int64_t nc, uint16_t* out) {
  const int64_t pairs = (kc + 1) / 2;
#ifdef __AVX512BW__
  const PairInterleave& il = pair_interleave();
  alignas(64) int32_t row_off[16];
  for (int i = 0; i < 16; ++i) row_off[i] = int32_t(i * ldb);
  const __m512i gather_idx = _mm512_load_si512(row_off);
#endif

  for (int64_t jp = 0; jp * kBlockN < nc; ++jp) {
    const int64_t cols = std::min(kBlockN, nc - jp * kBlockN), n = n0 + jp * kBlockN;
    uint16_t* dst = out + jp * pairs * 2 * kBlockN;
    int64_t p = 0;
#ifdef __AVX512BW__
    if (trans && cols == kBlockN) {
      // Transposed B, 16 k pairs x 16 columns at a time: the pair (B[k, n], B[k + 1, n]) is one
      // 32-bit word of row n, so 16 rows' 64-byte loads transposed in registers are 16 pairs'
      // vectors. (Per-pair gathers, below, took ~3x as long: ~7 % of a 512-token prefill
      // attention, which packs K this way.)
      const Transpose16& tr = transpose16();
      for (; 2 * (p + 16) <= kc; p += 16, dst += 16 * 2 * kBlockN) {
        for (int q = 0; q < 4; ++q) {
          __m512i r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = _mm512_loadu_si512(b + (n + 16 * q + i) * ldb + k0 + 2 * p);
          tr(r);
          for (int i = 0; i < 16; ++i) _mm512_store_si512(dst + i * 2 * kBlockN + 32 * q, r[i]);
        }
      }
    }
#endif
    for (; p < pairs; ++p, dst += 2 * kBlockN) {
      const int64_t k = k0 + 2 * p;
      const bool has_hi = 2 * p + 1 < kc;
#ifdef __AVX512BW__
      if (cols == kBlockN && has_hi) {
        if (!trans) {
          const uint16_t* r0 = b + k * ldb + n;
          for (int h = 0; h < 2; ++h) {
            const __m512i x0 = _mm512_loadu_si512(r0 + 32 * h);
            const __m512i x1 = _mm512_loadu_si512(r0 + ldb + 32 * h);
            _mm512_store_si512(dst + 64 * h, _mm512_permutex2var_epi16(x0, il.lo, x1));
            _mm512_store_si512(dst + 64 * h + 32, _mm512_permutex2var_epi16(x0, il.hi, x1));
          }
        } else {
          // The pair (B[k, n], B[k + 1, n]) is one 32-bit word of row n: gather 16 rows at once
          // (scale 2: the offsets count bf16 elements, so odd row lengths work too).
          for (int q = 0; q < 4; ++q) {
            const uint16_t* base = b + (n + 16 * q) * ldb + k;
            // (The masked form: GCC 12 warns that the unmasked one's source is uninitialised.)
            _mm512_store_si512(
                dst + 32 * q, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xFFFF),
                                                          gather_idx, base, 2));
          }
        }
        continue;
      }
#endif
      for (int64_t c = 0; c < kBlockN; ++c) {
        uint16_t lo = 0, hi = 0;
        if (c < cols) {
          lo = trans ? b[(n + c) * ldb + k] : b[k * ldb + n + c];
          if (has_hi) hi = trans ? b[(n + c) * ldb + k + 1] : b[(k + 1) * ldb + n + c];
        }
        dst[2 * c] = lo;
        dst[2 * c + 1] = hi;
      }
    }
  }
}

}  // namespace

void pack_b_panels(const uint16_t* b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                   uint16_t* out) {
  pack_b(b, ldb, trans, 0, kc, 0, nc, out);
}

namespace {
// -1 until decided: then a Bf16GemmArithmetic.
std::atomic<int> g_arithmetic{-1};
}  // namespace

Bf16GemmArithmetic bf16_gemm_arithmetic() {
  int a = g_arithmetic.load(std::memory_order_relaxed);
  if (a < 0) {
    const char* env = std::getenv("KILN_BF16_GEMM");
    const std::string choice = env ? env : "";
    KILN_CHECK(choice.empty() || choice == "fma" || choice == "dpbf16",
               "KILN_BF16_GEMM=", choice, ": expected fma or dpbf16");
    const bool fma = choice.empty() ? f32_fma_outruns_dpbf16() : choice == "fma";
    a = int(fma ? Bf16GemmArithmetic::kF32Fma : Bf16GemmArithmetic::kDpbf16);
    g_arithmetic.store(a, std::memory_order_relaxed);
  }
  return Bf16GemmArithmetic(a);
}

void set_bf16_gemm_arithmetic(Bf16GemmArithmetic a) {
  g_arithmetic.store(int(a), std::memory_order_relaxed);
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)

namespace {

constexpr int kMR = 6;      // rows of the vdpbf16ps tile (6 x 4 accumulators, 4 B registers)
constexpr int kFmaMR = 12;  // rows of the FMA tile (12 x 2 accumulators per 32-column half)
constexpr int kMaxMR = kFmaMR;
constexpr int64_t kNR = 64;  // columns of the register tile: 4 registers of 16 floats
constexpr int64_t kBAhead = 16;  // k pairs a panel's first tile requests its B lines ahead
static_assert(kNR == kBlockN, "a register tile is one packed B panel wide");
// Block sizes, tuned with bench/bench_gemm.cpp on the lm_head shapes (Zen 5: 48 KiB L1, 1 MiB L2
// per core): a packed B panel of 512 k pairs x 64 columns is 128 KiB and streams from L2 (4 loads
// per 24 vdpbf16ps), an A block of 96 rows x 1024 k is 192 KiB. KC = 256 (B panel in L1) and MC =
// 192 or 384 measured 2-15 % slower; a larger KC means fewer passes over an f32 C.
constexpr int64_t kKC = 1024;  // k per block
constexpr int64_t kMC = 96;    // rows of A per block, reused from L2 across the block's B panels
// Over a linear's packed weights, and for the FMA tiles everywhere: blocks of at most 128 rows,
// balanced (M = 128 is one block, not 96 + 32: each weight panel then comes from memory once and
// serves every tile, where the 32-row block read it a second time for a few). FMA tiles: 7-10 %
// faster at M = 128 on Emerald Rapids; their widened A is 4 bytes a value, 128 rows x 1024 k is
// 512 KiB of its 2 MiB L2. vdpbf16ps tiles on the Zen 5 (thirty-fourth session; weights from
// memory, the two switched call by call in one process): 1-5 % faster at M = 128, level at 512.
constexpr int64_t kBalancedMaxMC = 128;
constexpr int64_t kNC = 1024;  // columns of B per packed block
constexpr int64_t kMinRowsForPackedTransB = 128;
constexpr int64_t kStreamBytes = int64_t(64) << 20;  // bf16 C above this is stored non-temporally

// Scratch slots of thread_scratch (0-2: linear and gemm, 3-8: attention).
constexpr int kScratchB = 9, kScratchA = 10, kScratchWideA = 14;

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

inline int load_pair(const uint16_t* p) {
  int v;
  std::memcpy(&v, p, 4);
  return v;
}

// Packs A[m0, m0 + mc) x [k0, k0 + kc) for the micro-kernel, zero past kc, and returns the strides
// it reads them with (in bf16 elements: row r, k pair p at out + r * row_stride + p * pair_stride).
// Transposed A (A[m, k] = a[k * lda + m]) packs as [pairs][mc] words: two rows of `a` interleaved,
// 32 columns per instruction. Untransposed A with odd K (A[m, k] = a[m * lda + k]) packs as
// [mc][pairs] words with a zero past K.
struct PackedA {
  int64_t row_stride, pair_stride;
};
PackedA pack_a(const uint16_t* a, int64_t lda, bool trans, int64_t m0, int64_t mc, int64_t k0,
               int64_t kc, uint16_t* out, const PairInterleave& il) {
  const int64_t pairs = (kc + 1) / 2;
  if (!trans) {
    for (int64_t r = 0; r < mc; ++r) {
      const uint16_t* src = a + (m0 + r) * lda + k0;
      uint16_t* dst = out + r * 2 * pairs;
      std::memcpy(dst, src, size_t(kc) * 2);
      if (kc % 2) dst[kc] = 0;
    }
    return {2 * pairs, 2};
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* r0 = a + (k0 + 2 * p) * lda + m0;
    const uint16_t* r1 = r0 + lda;
    const bool has_hi = 2 * p + 1 < kc;
    uint16_t* dst = out + p * 2 * mc;
    int64_t m = 0;
    if (has_hi) {
      for (; m + 32 <= mc; m += 32) {
        const __m512i x0 = _mm512_loadu_si512(r0 + m), x1 = _mm512_loadu_si512(r1 + m);
        _mm512_storeu_si512(dst + 2 * m, _mm512_permutex2var_epi16(x0, il.lo, x1));
        _mm512_storeu_si512(dst + 2 * m + 32, _mm512_permutex2var_epi16(x0, il.hi, x1));
      }
    }
    for (; m < mc; ++m) {
      dst[2 * m] = r0[m];
      dst[2 * m + 1] = has_hi ? r1[m] : 0;
    }
  }
  return {2, 2 * mc};
}

// How a tile reaches C. kStreamBf16: a bf16 C larger than the last-level cache (the lm_head's
// logits) is written with non-temporal stores, which skip reading each line in before overwriting
// it.
enum class Store { kSet, kAdd, kScaleAdd, kSetBf16, kStreamBf16 };

// Where and how one register tile lands in C: rows from c (row stride ldc elements), `cols` <= 64
// columns; res (f32, same layout as an f32 C, or null) is added by the kSet* modes.
struct TileOut {
  void* c;
  const float* res;
  int64_t ldc, cols;
  Store mode;
  float beta;
  // Lines [prefetch, prefetch + 64 * prefetch_lines) to fetch into L2 while the tile runs, spread
  // over its k loop (see gemm_part).
  const char* prefetch = nullptr;
  int64_t prefetch_lines = 0;
  // SwiGLU: the tile is the up projection, and gate (a [rows][64] f32 tile of the same rows)
  // makes it SiLU(gate) * up before the store.
  const float* gate = nullptr;
  // The first row tile on a packed weight panel: it requests its B lines kBAhead k pairs ahead
  // into L1 (gemm_part; the vdpbf16ps tiles: on the FMA tiles it is unmeasured and ignored).
  bool first_on_panel = false;
};

inline __m512 load16(const float* p, bool whole, __mmask16 mask) {
  return whole ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask, p);
}

template <int R, int J = 4>
inline void store_tile(const __m512 (&acc)[R][J], const TileOut& o) {
  // An f32 C set or added to in whole 16-column groups, with no gate or separate residual (the
  // attention's scores and p V, training's products): the loop below's per-group branches cost
  // ~15 % of a tile over a 128-deep k (one attention item's scores, `bench_attention`'s
  // BM_AttentionItemProducts on one thread: 302-312 GFLOP/s with them, 351-361 without), and
  // ~0.7 % of 128- and 512-token prefills (docs/benchmarks.md, forty-first session). Same bits.
  if (!o.gate && !o.res && o.cols >= 16 * J && (o.mode == Store::kSet || o.mode == Store::kAdd)) {
    float* const c = static_cast<float*>(o.c);
    if (o.mode == Store::kSet) {
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < J; ++j) _mm512_storeu_ps(c + r * o.ldc + 16 * j, acc[r][j]);
    } else {
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < J; ++j) {
          float* dst = c + r * o.ldc + 16 * j;
          _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), acc[r][j]));
        }
    }
    return;
  }
  const __m512 vbeta = _mm512_set1_ps(o.beta);
  // Row by row, so that each row's line is whole before the next row's starts: non-temporal
  // stores gather in a few write-combining buffers, and with the column groups outermost 12 rows'
  // lines were half-written at once. On Emerald Rapids that made the small model's logits (the
  // lm_head forward in bench_gemm, 311 MB of bf16) take 620-1100 ms, against 310-390 row by row.
  const int jn = int(std::min<int64_t>(J, (o.cols + 15) / 16));
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < jn; ++j) {
      const int64_t left = o.cols - 16 * j;
      // Whole 16 columns go through plain loads and stores, a last partial group through masked
      // ones: with every group masked, 128-token prefills took 1-2 % longer (0.981-0.997 of
      // the time in five runs of 40-60 alternated pairs, 0.980 at 512 tokens), and `perf`
      // stalled on the residual's masked load.
      const bool whole = left >= 16;
      const __mmask16 mask = whole ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      __m512 v = acc[r][j];
      if (o.gate) v = _mm512_mul_ps(vsilu(load16(o.gate + r * kNR + 16 * j, whole, mask)), v);
      if (o.res && o.mode != Store::kAdd && o.mode != Store::kScaleAdd)
        v = _mm512_add_ps(v, load16(o.res + r * o.ldc + 16 * j, whole, mask));
      if (o.mode == Store::kSetBf16 || o.mode == Store::kStreamBf16) {
        uint16_t* dst = static_cast<uint16_t*>(o.c) + r * o.ldc + 16 * j;
        const __m256i h = detail::cvt_f32_bf16x16(v);
        if (o.mode == Store::kStreamBf16 && whole && reinterpret_cast<uintptr_t>(dst) % 32 == 0)
          _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), h);
        else if (whole)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
        else
          _mm256_mask_storeu_epi16(dst, mask, h);
        continue;
      }
      float* dst = static_cast<float*>(o.c) + r * o.ldc + 16 * j;
      if (o.mode == Store::kAdd) v = _mm512_add_ps(load16(dst, whole, mask), v);
      if (o.mode == Store::kScaleAdd) v = _mm512_fmadd_ps(vbeta, load16(dst, whole, mask), v);
      if (whole)
        _mm512_storeu_ps(dst, v);
      else
        _mm512_mask_storeu_ps(dst, mask, v);
    }
  }
}

// Where a register tile's rows of A are. For the vdpbf16ps tiles, row r's k pair p is the bf16 pair
// word at base + (r * rs + p * ps) elements; for the FMA tiles, base is the tile's block of f32
// from widen_a (its own layout; rs = 2 * pairs places each tile's block).
struct TileA {
  const char* base;
  int64_t rs, ps, elt;
  TileA rows_from(int64_t r) const { return {base + r * rs * elt, rs, ps, elt}; }
};

// The f32 tile read at the end (C or the residual): start fetching it now, so a short K (a weight
// gradient over 128 tokens) does not wait for memory once per tile.
inline void prefetch_tile_out(int rows, const TileOut& out) {
  if (out.mode != Store::kAdd && out.mode != Store::kScaleAdd && !out.res) return;
  const float* f = out.res ? out.res : static_cast<const float*>(out.c);
  for (int r = 0; r < rows; ++r)
    for (int64_t col = 0; col < out.cols; col += 16)
      _mm_prefetch(reinterpret_cast<const char*>(f + r * out.ldc + col), _MM_HINT_T0);
}

// The lines of TileOut::prefetch, spread over a tile's `pairs` k pairs: step() once per pair.
struct PanelPrefetch {
  const char* next;
  int64_t left, every, countdown = 1;
  PanelPrefetch(const TileOut& out, int64_t pairs)
      : next(out.prefetch),
        left(out.prefetch_lines),
        every(left > 0 ? std::max<int64_t>(1, pairs / left) : 0) {}
  void step() {
    if (left > 0 && --countdown == 0) {
      _mm_prefetch(next, _MM_HINT_T1);
      next += 64;
      --left;
      countdown = every;
    }
  }
};

// The register tile: R rows of A (bf16 pair words) times the first 16 J columns of one packed
// 64-column B panel, over `pairs` k pairs on vdpbf16ps, stored into C. J < 4 serves a last panel
// that is mostly padding (the attention's scores over 16-48 keys), where the full tile would
// compute up to four times the useful columns.
template <int R, int J = 4>
void micro_tile(int64_t pairs, TileA ta, const uint16_t* bp, const TileOut& out) {
  const auto* a = reinterpret_cast<const uint16_t*>(ta.base);
  const int64_t a_rs = ta.rs, a_ps = ta.ps;
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
  prefetch_tile_out(R, out);
  PanelPrefetch pf(out, pairs);
  const char* b_ahead =
      out.first_on_panel ? reinterpret_cast<const char*>(bp + kBAhead * 2 * kNR) : nullptr;
  for (int64_t p = 0; p < pairs; ++p, a += a_ps, bp += 2 * kNR) {
    pf.step();
    if (b_ahead) {
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) _mm_prefetch(b_ahead + 64 * j, _MM_HINT_T0);
      b_ahead += 4 * kNR;  // bytes of one k pair's 64 columns
    }
    __m512bh b[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) b[j] = as_bh(_mm512_load_si512(bp + 32 * j));
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512bh x = as_bh(_mm512_set1_epi32(load_pair(a + r * a_rs)));
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], b[j], x);
    }
  }
  store_tile<R, J>(acc, out);
}

// One 32-column half (b: its first line) of micro_tile_fma, stored through `half`. a: the tile's
// rows widened by widen_a, pair p of row r at a[p * 2R + 2r] and a[p * 2R + 2r + 1].
template <int R, bool kPrefetch>
inline __attribute__((always_inline)) void fma_half(int64_t pairs, const float* a,
                                                    const uint16_t* b, PanelPrefetch& pf,
                                                    const TileOut& half) {
  const __m512i hi_half = _mm512_set1_epi32(int(0xFFFF0000u));
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p, a += 2 * R, b += 2 * kNR) {
    if constexpr (kPrefetch) pf.step();
    __m512 even[2], odd[2];
    for (int j = 0; j < 2; ++j) {
      const __m512i w = _mm512_load_si512(b + 32 * j);
      even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
      odd[j] = _mm512_castsi512_ps(_mm512_and_si512(w, hi_half));
    }
    // Each A value feeds two FMAs (one per 16 columns). Broadcast into a register once, it costs
    // a vbroadcastss per two FMAs, which on Emerald Rapids takes issue slots from them; as the
    // FMA's own memory operand ({1to16}) it rides in the FMA's uop: 48 FMAs per pair either way,
    // 2-8 % faster in the model's linears (docs/benchmarks.md, twenty-third session). GCC
    // merges two loads of one value into one register broadcast, so the second column group
    // reads A through a pointer it cannot see is the same.
    const float* a2 = a;
    __asm__("" : "+r"(a2));
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * r]), even[0], acc[r][0]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * r + 1]), odd[0], acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(a2[2 * r]), even[1], acc[r][1]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(a2[2 * r + 1]), odd[1], acc[r][1]);
    }
  }
  store_tile<R, 2>(acc, half);
}

// The same tile on f32 FMAs, for CPUs that issue them faster than vdpbf16ps (f32_fma_outruns_dpbf16:
// twice as fast on Intel's Sapphire and Emerald Rapids). A arrives widened to f32 and interleaved
// by widen_a (a tile's R rows of one k pair side by side: one stream, fixed offsets); each B
// line, 16 columns x one k pair, widens in registers (a bf16 is the top half of an f32: the even k
// shifted up, the odd k masked). The products are exact in f32 either way; the sums round per FMA.
// The panel runs as two 32-column halves of up to 12 rows, so that 24 accumulators, 4 widened B
// vectors and a row's two broadcast A values fit the 32 registers, and each B line serves 12 rows.
template <int R>
void micro_tile_fma(int64_t pairs, TileA ta, const uint16_t* bp, const TileOut& out) {
  const auto* a = reinterpret_cast<const float*>(ta.base);
  prefetch_tile_out(R, out);
  PanelPrefetch pf(out, pairs);  // all in the first half
  fma_half<R, true>(pairs, a, bp, pf, out);
  if (out.cols <= 32) return;
  const int64_t elt = out.mode == Store::kSetBf16 || out.mode == Store::kStreamBf16 ? 2 : 4;
  TileOut half = out;
  half.c = static_cast<char*>(out.c) + 32 * elt;
  half.cols = out.cols - 32;
  if (half.res) half.res += 32;
  if (half.gate) half.gate += 32;
  fma_half<R, false>(pairs, a, bp + 64, pf, half);
}

using TileFn = void (*)(int64_t, TileA, const uint16_t*, const TileOut&);
constexpr TileFn kDpbf16Tiles[kMR + 1] = {nullptr,       micro_tile<1>, micro_tile<2>,
                                          micro_tile<3>, micro_tile<4>, micro_tile<5>,
                                          micro_tile<6>};
// [J - 1][R]: the tiles of a panel's first 16 J columns.
constexpr TileFn kDpbf16NarrowTiles[3][kMR + 1] = {
    {nullptr, micro_tile<1, 1>, micro_tile<2, 1>, micro_tile<3, 1>, micro_tile<4, 1>,
     micro_tile<5, 1>, micro_tile<6, 1>},
    {nullptr, micro_tile<1, 2>, micro_tile<2, 2>, micro_tile<3, 2>, micro_tile<4, 2>,
     micro_tile<5, 2>, micro_tile<6, 2>},
    {nullptr, micro_tile<1, 3>, micro_tile<2, 3>, micro_tile<3, 3>, micro_tile<4, 3>,
     micro_tile<5, 3>, micro_tile<6, 3>}};
constexpr TileFn kFmaTiles[kFmaMR + 1] = {
    nullptr,            micro_tile_fma<1>,  micro_tile_fma<2>, micro_tile_fma<3>,
    micro_tile_fma<4>,  micro_tile_fma<5>,  micro_tile_fma<6>, micro_tile_fma<7>,
    micro_tile_fma<8>,  micro_tile_fma<9>,  micro_tile_fma<10>, micro_tile_fma<11>,
    micro_tile_fma<12>};

// A's rows [0, mc) x k pairs [0, pairs) (bf16 pair words, row r's pair p at a + r * rs + p * ps)
// widened to f32 for the FMA tiles: per tile of kFmaMR rows (R in the last, ragged one), starting
// at out + t0 * 2 * pairs, pair p of the tile's row r at [p * 2R + 2r] (+1 for the odd k). Once
// per block of rows, shared by all of its panels. A pair's R words, gathered side by side, widen
// to its 2R floats in order (a word's low bf16 is the even k), so the work is a transpose when
// each row's pairs are contiguous (ps == 2: 16 rows x 16 pairs per register transpose) and a
// copy when each pair's rows are (a packed transposed A, rs == 2). A scatter per row's 8 pairs
// took ~1 cycle a value: ~3 % of the prefill linears and ~6 % of a training step.
void widen_a(const uint16_t* a, int64_t rs, int64_t ps, int64_t mc, int64_t pairs, float* out) {
  static_assert(kFmaMR <= 16, "a tile's rows are one transposed register");
  const Transpose16& transpose = transpose16();
  for (int64_t t0 = 0; t0 < mc; t0 += kFmaMR) {
    const int R = int(std::min<int64_t>(kFmaMR, mc - t0));
    const uint16_t* rows = a + t0 * rs;
    float* tile = out + t0 * 2 * pairs;
    // Stores pair p's words (row r in lane r) as its 2R floats.
    const __mmask16 first = tail_mask(std::min(16, 2 * R));
    const __mmask16 second = tail_mask(std::max(0, 2 * R - 16));
    auto store_pair = [&](int64_t p, __m512i words) {
      float* dst = tile + p * 2 * R;
      const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(words));
      _mm512_mask_storeu_epi32(dst, first, _mm512_slli_epi32(lo, 16));
      if (second) {
        const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(words, 1));
        _mm512_mask_storeu_epi32(dst + 16, second, _mm512_slli_epi32(hi, 16));
      }
    };
    if (ps == 2) {
      for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
        const int64_t n = std::min<int64_t>(16, pairs - p0);
        __m512i r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = i < R ? _mm512_maskz_loadu_epi32(tail_mask(n), rows + i * rs + 2 * p0)
                       : _mm512_setzero_si512();
        transpose(r);
        for (int64_t p = 0; p < n; ++p) store_pair(p0 + p, r[p]);
      }
    } else {
      KILN_CHECK(rs == 2, "widen_a: rows ", rs, " and pairs ", ps, " elements apart");
      for (int64_t p = 0; p < pairs; ++p)
        store_pair(p, _mm512_maskz_loadu_epi32(tail_mask(R), rows + p * ps));
    }
  }
}

struct Problem {
  const uint16_t* a;
  int64_t lda;
  bool trans_a;
  const uint16_t* b;
  int64_t ldb;
  bool trans_b;
  int64_t M, N, K;
  float beta;
  void* c;
  bool c_bf16;
  // B already packed for the whole K (a linear layer's weights, BA16a64b2a): 64-column panel j
  // starts at b_packed + j * b_panel_stride, k pair p at + 128 * p. b and ldb are then unused.
  const uint16_t* b_packed = nullptr;
  int64_t b_panel_stride = 0;
  const float* res = nullptr;  // f32 [M, N] added to the product (may be c itself)
  // SwiGLU (with b_packed, N % 64 == 0): the packed B is [gate | up], 2N columns, and C [M, N] =
  // SiLU(A gate^T) * (A up^T). Each row tile runs on a gate panel, then on the up panel N columns
  // further, whose store applies SiLU(gate) * up: K is one block.
  bool swiglu = false;
  // The qkv epilogue (with b_packed, head_dim 64, 128 or 256): each row tile runs on a head's
  // panels into an f32 tile on the stack, which qkv->apply takes row by row; c is unused. K is
  // one block.
  const QkvEpilogue* qkv = nullptr;
  // The register tiles (kDpbf16Tiles or kFmaTiles, whose A is widened to f32 first).
  const TileFn* tiles = kDpbf16Tiles;
  int mr = kMR;  // the tiles' rows
  bool wide_a = false;
};

// Rows of A per block for `rows` rows: kMC; or, over packed weights or for the FMA tiles, the
// fewest blocks of at most kBalancedMaxMC rows, balanced and whole tiles where possible.
int64_t row_block(const Problem& P, int64_t rows) {
  if (!P.wide_a && !P.b_packed) return std::min(kMC, rows);
  const int64_t blocks = (rows + kBalancedMaxMC - 1) / kBalancedMaxMC;
  return std::min({kBalancedMaxMC, rows, round_up((rows + blocks - 1) / blocks, P.mr)});
}

// Untransposed A with even K: a row's k pairs are 32-bit words in place, no packing needed.
bool reads_a_in_place(const Problem& P) { return !P.trans_a && P.K % 2 == 0; }

// Rows of the register tile at row ir of a block of mc rows: P.mr, except that a block which would
// end in a vdpbf16ps tile of one or two rows (8 accumulators or fewer, too few chains to cover the
// instruction's latency) ends in two tiles of three or four: 128 rows as 20 x 6 + 4 + 4, not
// 21 x 6 + 2; an attention item's 32 as 4 x 6 + 4 + 4. Same tile count, same bits (a row's sums
// do not depend on its tile). Prefills alternated in one process, five runs of 300-400: the old
// split took 1.005-1.008 of the new one's median time at P = 128, 1.003 at P = 512
// (docs/benchmarks.md, forty-second session).
inline int64_t tile_rows(const Problem& P, int64_t ir, int64_t mc) {
  const int64_t left = mc - ir;
  if (P.mr == kMR && left > kMR && left < kMR + 3) return (left + 1) / 2;
  return std::min<int64_t>(P.mr, left);
}

// The qkv epilogue's tiles for rows [ic, ic + mc) and the head whose first column is col: per row
// tile, the head's panels into a [rows][d] f32 tile, then each row through qkv->apply.
// Prefetching as gemm_part's tiles do (next_panel: the next head's first panel, or null).
constexpr int64_t kMaxHeadPanels = 4;  // head_dim <= 256
void qkv_tiles(const Problem& P, int64_t ic, int64_t mc, int64_t col, TileA a_block,
               const uint16_t* bpanel, int64_t pairs, const char* next_panel,
               int64_t panel_lines, int64_t slice) {
  const int64_t d = P.qkv->d, head = col / d;
  alignas(64) float tile[kMaxMR * kMaxHeadPanels * kNR];
  for (int64_t ir = 0, tile_index = 0, rows = 0; ir < mc; ir += rows, ++tile_index) {
    rows = tile_rows(P, ir, mc);
    const TileA a_tile = a_block.rows_from(ir);
    for (int64_t part = 0; part < d / kNR; ++part) {
      TileOut out{tile + part * kNR, nullptr, d, kNR, Store::kSet, 0.f};
      out.first_on_panel = ir == 0;
      if (next_panel) {  // each panel fetches its share of the same panel of the next head
        const int64_t first = tile_index * slice;
        out.prefetch = next_panel + (part * P.b_panel_stride * 2) + first * 64;
        out.prefetch_lines = std::clamp<int64_t>(panel_lines - first, 0, slice);
      }
      P.tiles[rows](pairs, a_tile, bpanel + part * P.b_panel_stride, out);
    }
    P.qkv->apply_rows(ic + ir, rows, head, tile);
  }
}

// C[m0, m1) x [n0, n1) on the calling thread. A packed B's panels are fetched ahead up to column
// prefetch_end, or to the end of each block of kNC columns if that is further.
void gemm_part(const Problem& P, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
               int64_t prefetch_end = 0) {
  const bool in_place = reads_a_in_place(P);
  // K in blocks of kKC, each block's B packed once and reused from L2, except where a block would
  // buy nothing: a bf16 C (written once), the SwiGLU and qkv epilogues, and B already packed on
  // the vdpbf16ps tiles, where an f32 C (the prefill's LinearResidual at K = 2048 and 3072) was
  // written after the first block only to be read back and added to after each later one. In
  // one block: 128-token prefills 0.980-0.988 of the time in three runs of 40 alternated pairs,
  // 512 tokens 0.988 and 1.000 (docs/benchmarks.md, thirty-eighth session). The FMA tiles keep
  // the blocks: a whole K of their widened A (4 bytes a value) is unmeasured.
  const bool one_block = P.c_bf16 || P.swiglu || P.qkv || (P.b_packed && !P.wide_a);
  const int64_t kc_max = one_block ? P.K : std::min(P.K, kKC);
  const int64_t pairs_max = (kc_max + 1) / 2;
  const size_t elt = P.c_bf16 ? 2 : 4;
  const PairInterleave& il = pair_interleave();
  const int64_t mc_block = row_block(P, m1 - m0);
  auto* bp = P.b_packed
                 ? nullptr
                 : static_cast<uint16_t*>(thread_scratch(
                       kScratchB, size_t(pairs_max * round_up(std::min(kNC, n1 - n0), kNR) * 4)));
  // A residual that is C itself (f32) is the accumulate mode; a separate one is read per tile.
  const bool res_in_place = P.res && P.res == P.c;
  auto* ap = in_place ? nullptr
                      : static_cast<uint16_t*>(thread_scratch(
                            kScratchA, size_t(pairs_max * mc_block * 4)));
  auto* wide_a = P.wide_a ? static_cast<float*>(thread_scratch(
                                kScratchWideA, size_t(pairs_max * mc_block * 8)))
                          : nullptr;
  for (int64_t jc = n0; jc < n1; jc += kNC) {
    const int64_t nc = std::min(kNC, n1 - jc);
    for (int64_t pc = 0; pc < P.K; pc += kc_max) {
      const int64_t kc = std::min(kc_max, P.K - pc), pairs = (kc + 1) / 2;
      Store mode = Store::kAdd;
      if (pc == 0) {
        mode = P.c_bf16 ? (P.M * P.N * 2 > kStreamBytes ? Store::kStreamBf16 : Store::kSetBf16)
               : res_in_place  ? Store::kAdd
               : P.beta == 0.f ? Store::kSet
               : P.beta == 1.f ? Store::kAdd
                               : Store::kScaleAdd;
      }
      if (!P.b_packed) pack_b(P.b, P.ldb, P.trans_b, pc, kc, jc, nc, bp);
      for (int64_t ic = m0; ic < m1; ic += mc_block) {
        const int64_t mc = std::min(mc_block, m1 - ic);
        // Where row r's k pair p is: in place in A, or in the packed block.
        const uint16_t* a_block = ap;
        PackedA layout{P.lda, 2};
        if (in_place)
          a_block = P.a + ic * P.lda + pc;
        else
          layout = pack_a(P.a, P.lda, P.trans_a, ic, mc, pc, kc, ap, il);
        TileA a_tiles{reinterpret_cast<const char*>(a_block), layout.row_stride,
                      layout.pair_stride, 2};
        if (wide_a) {
          widen_a(a_block, layout.row_stride, layout.pair_stride, mc, pairs, wide_a);
          a_tiles = {reinterpret_cast<const char*>(wide_a), 2 * pairs, 0, 4};
        }
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const uint16_t* bpanel =
              P.b_packed ? P.b_packed + ((jc + jr) / kNR) * P.b_panel_stride + pc * kNR
                         : bp + (jr / kNR) * pairs * 2 * kNR;
          const int64_t cols = std::min(kNR, nc - jr);
          // A linear's packed weights come from memory the first time a panel is used (the
          // first block of rows), and one tile would read the whole panel faster than a core
          // streams: so while this panel's tiles run, each fetches its share of the next panel
          // into L2. +3-7 % at M = 32-128 (interleaved A/B, docs/notes/cpu-gemm.md). Later
          // blocks of rows find the panels in L3 at best; prefetching in them too was 3-6 %
          // faster at M = 512 on Emerald Rapids (on Zen 5, where the first block's prefetch
          // alone was level at M = 512, this is unmeasured).
          // Still, the first row tile on a panel (TileOut::first_on_panel) ran 40-60 % longer
          // than the others, and a call's first one 3-5x (its panel is not prefetched): timed
          // per tile with rdtsc in 128-token prefills. It requests its own B lines 16 k pairs
          // ahead into L1, which took 128-token prefills to 0.989-0.992 of the time (four runs
          // of 400 alternated pairs; 8 and 32 pairs ahead, 0.998 and 0.994) and 512-token ones
          // to 0.997. Not on B packed per block here (training), which is in L2 already.
          const char* next_panel = nullptr;
          const int64_t panel_lines = pairs * 2 * kNR * 2 / 64;
          const int64_t tile_count = (mc + P.mr - 1) / P.mr;
          const int64_t slice = (panel_lines + tile_count - 1) / tile_count;
          const int64_t step = P.qkv ? P.qkv->d : kNR;  // columns per step: a qkv head
          if (P.b_packed && jc + jr + step < std::max(jc + nc, prefetch_end))
            next_panel = reinterpret_cast<const char*>(bpanel + (step / kNR) * P.b_panel_stride);
          // SwiGLU: the up panel's offset from the gate panel, and the gate tile's f32 values.
          const int64_t up_offset = P.swiglu ? (P.N / kNR) * P.b_panel_stride : 0;
          alignas(64) float gate_tile[kMaxMR * kNR];
          if (P.qkv) {
            qkv_tiles(P, ic, mc, jc + jr, a_tiles, bpanel, pairs, next_panel, panel_lines, slice);
            jr += step - kNR;  // the head's other panels are done too
            continue;
          }
          for (int64_t ir = 0, tile_index = 0, rows = 0; ir < mc; ir += rows, ++tile_index) {
            rows = tile_rows(P, ir, mc);
            const int64_t at = (ic + ir) * P.N + jc + jr;
            TileOut out{static_cast<char*>(P.c) + at * elt,
                        pc == 0 && P.res && !res_in_place ? P.res + at : nullptr,
                        P.N,
                        cols,
                        mode,
                        P.beta};
            out.first_on_panel = P.b_packed && ir == 0;
            if (next_panel) {
              const int64_t first = tile_index * slice;
              out.prefetch = next_panel + first * 64;
              out.prefetch_lines = std::clamp<int64_t>(panel_lines - first, 0, slice);
            }
            const TileA a_tile = a_tiles.rows_from(ir);
            if (P.swiglu) {
              TileOut gate_out{gate_tile, nullptr, kNR, kNR, Store::kSet, 0.f, out.prefetch,
                               out.prefetch_lines};
              gate_out.first_on_panel = out.first_on_panel;
              P.tiles[rows](pairs, a_tile, bpanel, gate_out);
              out.gate = gate_tile;
              if (out.prefetch) out.prefetch += up_offset * 2;  // the next up panel (bytes)
            }
            // A last panel of at most 48 columns runs on the narrow vdpbf16ps tiles.
            const TileFn tile = P.tiles == kDpbf16Tiles && !P.swiglu && cols <= 3 * 16
                                    ? kDpbf16NarrowTiles[(cols + 15) / 16 - 1][rows]
                                    : P.tiles[rows];
            tile(pairs, a_tile, bpanel + up_offset, out);
          }
        }
      }
    }
  }
  _mm_sfence();  // non-temporal stores are visible to other threads after this
}

}  // namespace

namespace {

// Runs P on all threads: C's columns are split when A is read in place (each thread packs only its
// own B columns), its rows when A is packed (each thread packs only its own A rows); a side too
// narrow to split is not.
void run(Problem P) {
  if (bf16_gemm_arithmetic() == Bf16GemmArithmetic::kF32Fma) {
    P.tiles = kFmaTiles;
    P.mr = kFmaMR;
    P.wide_a = true;
  }
  const int threads = num_threads();
  // Inside another loop's share (the attention's items) the loops below would run serially,
  // the stolen tiles last to first.
  const bool nested =
      kiln::detail::in_team_job() || (omp_in_parallel() && !kiln::detail::current_team());
  if (threads <= 1 || nested || P.M * P.N * P.K < (int64_t(1) << 21)) {
    gemm_part(P, 0, P.M, 0, P.N);
    return;
  }
  bool split_n = reads_a_in_place(P) ? P.N >= threads * kNR : P.M < threads * P.mr;
  if (split_n && P.N < threads * kNR) split_n = false;
  const int64_t extent = split_n ? P.N : P.M;
  const int64_t step = split_n ? (P.qkv ? P.qkv->d : kNR) : P.mr;  // qkv: whole heads
  const int64_t chunk = round_up((extent + threads - 1) / threads, step);
  if (split_n && P.b_packed) {
    // A linear's GEMM: each thread's share of columns is cut into work items (one block of rows
    // x the panels or qkv heads of ~16 MFLOP), listed in the order gemm_part walks them, and a
    // thread that finishes its share takes items from the back of the other's. On this VM one
    // core often runs a few percent slower than the other, which a static split leaves the
    // faster one waiting for at the end of every call; the results are the same bits either
    // way. Items of one panel (3 MFLOP for a K = 256 lm_head) cost more in set-up than they
    // balance. Measured in docs/benchmarks.md (thirtieth session).
    constexpr double kItemFlop = 16e6;
    // The last items of each share are cut into halves of their rows, so that the two threads'
    // ends meet within half an item: a 128-token prefill's GEMM calls had one thread waiting
    // 4.1-4.5 % of their time for the other, 2.1-2.7 % with the last two items halved, and the
    // prefill took ~1 % less (0.985-0.992 with one to four halved, alternated in one process; level
    // at 512 tokens). A half reads its panels a second time, from cache. Not on the FMA tiles,
    // whose item is a whole block (unmeasured there).
    constexpr size_t kHalvedItems = 2;
    struct WorkItem {
      int64_t m0, m1, n0, n1, prefetch_end;
    };
    thread_local std::vector<WorkItem> item_list;  // the caller's: the lambda must not name it
    std::vector<WorkItem>& items = item_list;
    items.clear();
    const int64_t mc_block = row_block(P, P.M);
    for (int t = 0; t < threads; ++t) {
      const size_t share_begin = items.size();
      const int64_t lo = std::min(extent, t * chunk), hi = std::min(extent, lo + chunk);
      for (int64_t jc = lo; jc < hi; jc += kNC) {
        const int64_t jc_end = std::min(hi, jc + kNC);
        for (int64_t ic = 0; ic < P.M; ic += mc_block) {
          const int64_t rows = std::min(P.M, ic + mc_block) - ic;
          const double step_flop = 2.0 * double(rows) * double(step) * double(P.K);
          // The FMA tiles widen a block of A once per gemm_part call: one item per block.
          const int64_t width = P.wide_a ? kNC
                                         : step * std::max<int64_t>(1, int64_t(kItemFlop / step_flop));
          for (int64_t jr = jc; jr < jc_end; jr += width)
            items.push_back({ic, ic + rows, jr, std::min(jc_end, jr + width), jc_end});
        }
      }
      // Every share ends on the last block of rows, so all shares halve alike and keep equal
      // counts, which parallel_for_stealing's shares of the item list follow.
      const size_t halved = std::min(kHalvedItems, items.size() - share_begin);
      const int64_t last_rows = P.M - (P.M - 1) / mc_block * mc_block;
      if (P.wide_a || halved == 0 || last_rows < 4 * P.mr) continue;
      WorkItem tail[kHalvedItems];
      std::copy(items.end() - std::ptrdiff_t(halved), items.end(), tail);
      items.resize(items.size() - halved);
      for (const WorkItem& w : std::span(tail, halved)) {
        const int64_t mid = w.m0 + round_up((w.m1 - w.m0) / 2, P.mr);
        items.push_back({w.m0, mid, w.n0, w.n1, w.prefetch_end});
        items.push_back({mid, w.m1, w.n0, w.n1, w.prefetch_end});
      }
    }
    parallel_for_stealing(int64_t(items.size()), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const WorkItem& w = items[size_t(i)];
        gemm_part(P, w.m0, w.m1, w.n0, w.n1, w.prefetch_end);
      }
    });
    return;
  }
  parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = std::min(extent, t * chunk), hi = std::min(extent, lo + chunk);
      if (lo >= hi) continue;
      if (split_n)
        gemm_part(P, 0, P.M, lo, hi);
      else
        gemm_part(P, lo, hi, 0, P.N);
    }
  });
}

}  // namespace

bool gemm_bf16(const uint16_t* a, bool trans_a, const uint16_t* b, bool trans_b, int64_t M,
               int64_t N, int64_t K, float beta, void* c, bool c_bf16) {
  if (K == 0 || (c_bf16 && (beta != 0.f || K > kMaxBf16K))) return false;
  // Packing a transposed B costs more when few rows of A share each packed panel. With per-pair
  // gathers oneDNN ran the forward of every Qwen3-0.6B linear 1.4-1.7x faster at M = 128; with
  // the register transposes this kernel is ahead there too (bench/bench_gemm.cpp: lm_head
  // 560 -> 624-636 GFLOP/s, gate_up 603-618 -> 685-708), and smaller M was not measured.
  if (trans_b && M < kMinRowsForPackedTransB) return false;
  run(Problem{a, trans_a ? M : K, trans_a, b, trans_b ? K : N, trans_b, M, N, K, beta, c, c_bf16});
  return true;
}

bool gemm_bf16_packed(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N,
                      void* y, bool y_bf16, const float* residual, int64_t panel_stride) {
  if (Kp == 0 || Kp % 2 || (y_bf16 && Kp > kMaxBf16K)) return false;
  Problem P{xb, Kp, false, nullptr, 0, false, M, N, Kp, 0.f, y, y_bf16};
  P.b_packed = w;
  P.b_panel_stride = panel_stride > 0 ? panel_stride : Kp * kNR;
  P.res = residual;
  run(P);
  return true;
}

bool gemm_bf16_packed_swiglu(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w,
                             int64_t inter, void* y, bool y_bf16) {
  if (Kp == 0 || Kp % 2 || Kp > kMaxBf16K || inter % kNR) return false;
  Problem P{xb, Kp, false, nullptr, 0, false, M, inter, Kp, 0.f, y, y_bf16};
  P.b_packed = w;
  P.b_panel_stride = Kp * kNR;
  P.swiglu = true;
  run(P);
  return true;
}

bool gemm_bf16_packed_qkv(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w,
                          const QkvEpilogue& e) {
  // A head is whole panels, and never straddles a block of kNC columns.
  if (Kp == 0 || Kp % 2 || Kp > kMaxBf16K || e.d % kNR || e.d > kMaxHeadPanels * kNR ||
      kNC % e.d)
    return false;
  Problem P{xb, Kp, false, nullptr, 0, false, M, (e.hq + 2 * e.hkv) * e.d, Kp, 0.f, nullptr, false};
  P.b_packed = w;
  P.b_panel_stride = Kp * kNR;
  P.qkv = &e;
  run(P);
  return true;
}

#else

bool gemm_bf16(const uint16_t*, bool, const uint16_t*, bool, int64_t, int64_t, int64_t, float,
               void*, bool) {
  return false;
}

bool gemm_bf16_packed(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, void*, bool,
                      const float*, int64_t) {
  return false;
}

bool gemm_bf16_packed_swiglu(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, void*,
                             bool) {
  return false;
}

bool gemm_bf16_packed_qkv(const uint16_t*, int64_t, int64_t, const uint16_t*,
                          const QkvEpilogue&) {
  return false;
}

#endif

}  // namespace kiln::cpu::detail
