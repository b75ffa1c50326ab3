// Internal SIMD helpers for the CPU kernels (not part of the kernel contract).
//
// Vector code is guarded by __AVX512F__, its 8-lane forms by __AVX2__ && __FMA__ (the build uses
// -march=native); every helper has a scalar twin so the kernels build and give the same results
// (within f32 rounding) on any x86-64 or ARM.
// Activation rows are f32 or bf16; load_row/store_row convert so kernels can do all arithmetic in
// f32, as the contract requires.
//
// Example:
//   float buf[128];
//   kiln::cpu::detail::load_row(x.raw(), x.dtype(), row * 128, 128, buf);
//   kiln::cpu::detail::store_row(buf, 128, y.raw(), y.dtype(), row * 128);
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

#if defined(__AVX512F__) || defined(__AVX2__)
// GCC 12 reports its own _mm512_undefined_*() placeholders as "(maybe) uninitialized" once they are
// inlined into OpenMP-outlined loops or some callers; the pragma covers the intrinsics header's
// lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace kiln::cpu::detail {

inline bool is_act(DType t) { return t == DType::f32 || t == DType::bf16; }

// One element of an act tensor (f32 or bf16) as f32, and back (bf16 rounded to nearest even).
inline float widen(float x) { return x; }
inline float widen(bf16_t x) { return bf16_to_f32(x); }
inline void narrow(float x, float* y) { *y = x; }
inline void narrow(float x, bf16_t* y) { *y = f32_to_bf16(x); }

#ifdef __AVX512F__
// 16 bf16 -> 16 f32 (exact: bf16 is the top half of an f32).
inline __m512 load_bf16x16(const bf16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load_bf16x16_masked(const bf16_t* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// 16 f32 -> 16 bf16, round to nearest even (same as f32_to_bf16, NaN kept as a NaN), in integer
// steps. (The maskz forms with every lane set: GCC 12 warns that the plain forms' undefined
// pass-through operand may be used uninitialised.)
inline __m256i round_f32_bf16x16(__m512 v) {
  const __mmask16 all = 0xffff;
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
  return _mm512_maskz_cvtepi32_epi16(all, _mm512_maskz_srli_epi32(all, rounded, 16));
}
// The same rounding; with AVX512_BF16 by vcvtneps2bf16, which rounds alike but flushes denormal
// inputs to zero, so lanes holding a denormal take the integer steps (every kernel rounds as
// f32_to_bf16 and PyTorch do, on every CPU). The integer steps alone cost prefill attention ~5 %.
inline __m256i cvt_f32_bf16x16(__m512 v) {
#ifdef __AVX512BF16__
  if (_mm512_fpclass_ps_mask(v, 0x20) == 0) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#endif
  return round_f32_bf16x16(v);
}
inline void store_bf16x16(bf16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), cvt_f32_bf16x16(v));
}
inline void store_bf16x16_masked(bf16_t* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, cvt_f32_bf16x16(v));
}
inline __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }

// exp(x) for f32 lanes: 2^n * p(r) with r = x - n ln2, |r| <= ln2/2, degree-6 polynomial
// (max relative error ~2 ulp). scalef handles the exponent range: large x -> inf, -inf -> 0.
inline __m512 exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.3888889e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3333333e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1666667e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
// exp of lanes that may be -inf (masked scores): exact 0 there.
inline __m512 exp512_masked_inf(__m512 x) {
  __mmask16 finite = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
  return _mm512_maskz_mov_ps(finite, exp512(x));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// The 8-lane forms of the helpers above, for CPUs with AVX2 + FMA and no AVX-512 (the kernels
// that have both use the 16-lane ones).
inline __m256 load_bf16x8(const bf16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// 8 f32 rounded to nearest even at bf16 precision (same as f32_to_bf16, NaN kept as a NaN): the
// bf16 is the top half of each lane, the bottom half is garbage.
inline __m256i round_bits_bf16x8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet_nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet_nan, nan);
}
// v rounded to bf16 and widened back: what store_bf16x8 then load_bf16x8 give.
inline __m256 round_bf16x8(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(round_bits_bf16x8(v), _mm256_set1_epi32(int32_t(0xffff0000u))));
}
// 8 f32 -> 8 bf16, round to nearest even (same as f32_to_bf16, NaN kept as a NaN).
inline void store_bf16x8(bf16_t* p, __m256 v) {
  const __m256i half = _mm256_srli_epi32(round_bits_bf16x8(v), 16);  // <= 0xffff: packus is exact
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(half, half), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
// exp(x), the same polynomial as exp512. Without scalef, 2^n is built in the exponent field, so x
// is clamped to [-87.3, 88.3] (n in [-126, 127]); below -87.3 (where exp is a denormal) the result
// is 0, as it is for -inf (masked scores).
inline __m256 exp256(__m256 x) {
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.3888889e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333333e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666667e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256i pow2n = _mm256_slli_epi32(biased, 23);
  return _mm256_and_ps(in_range, _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n)));
}
inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float hsum256(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}
// Lane i of the result = sum of the lanes of v[i], for 8 vectors.
inline __m256 hsum8x8(const __m256* v) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
// out[i * ldo + j] = in[j][i] * scale for i, j < 8: an 8 x 8 block transposed in registers.
inline void transpose8x8(const float* const* in, float scale, float* out, int64_t ldo) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 r[8], t[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_mul_ps(_mm256_loadu_ps(in[j]), sc);
  for (int j = 0; j < 8; j += 2) {  // t[j], t[j+1]: rows j, j+1 interleaved
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // r: groups of four rows, one column per 128-bit half
    r[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
    r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
    r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
    r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
// Lanes whose bit in the low 8 bits of `bits` is set are all ones.
inline __m256 lanes_of_bits8(uint32_t bits) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(bits)), sel), sel));
}
#endif

// The build's float vector, for kernels written once for both ISAs: 16 lanes with AVX-512, 8 with
// AVX2 + FMA. vload of bf16 widens exactly; vstore to bf16 rounds to nearest even.
#if defined(__AVX512F__)
#define KILN_SIMD_VEC 1
using VecF = __m512;
constexpr int64_t kLanes = 16;
inline VecF vload(const float* p) { return _mm512_loadu_ps(p); }
inline VecF vload(const bf16_t* p) { return load_bf16x16(p); }
inline VecF vset1(float x) { return _mm512_set1_ps(x); }
inline VecF vzero() { return _mm512_setzero_ps(); }
inline void vstore(float* p, VecF v) { _mm512_storeu_ps(p, v); }
inline void vstore(bf16_t* p, VecF v) { store_bf16x16(p, v); }
inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline VecF vsub(VecF a, VecF b) { return _mm512_sub_ps(a, b); }
inline VecF vmul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
inline VecF vdiv(VecF a, VecF b) { return _mm512_div_ps(a, b); }
inline VecF vfmadd(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline VecF vmax(VecF a, VecF b) { return _mm512_max_ps(a, b); }
inline float vreduce_max(VecF v) { return _mm512_reduce_max_ps(v); }
inline float vreduce_add(VecF v) { return _mm512_reduce_add_ps(v); }
inline VecF vexp(VecF x) { return exp512(x); }
// Lane i: a where bit i of `bits` is set, else b.
inline VecF vselect_bits(uint32_t bits, VecF a, VecF b) { return _mm512_mask_mov_ps(b, __mmask16(bits), a); }
inline VecF vround_bf16(VecF v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(cvt_f32_bf16x16(v)), 16));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define KILN_SIMD_VEC 1
using VecF = __m256;
constexpr int64_t kLanes = 8;
inline VecF vload(const float* p) { return _mm256_loadu_ps(p); }
inline VecF vload(const bf16_t* p) { return load_bf16x8(p); }
inline VecF vset1(float x) { return _mm256_set1_ps(x); }
inline VecF vzero() { return _mm256_setzero_ps(); }
inline void vstore(float* p, VecF v) { _mm256_storeu_ps(p, v); }
inline void vstore(bf16_t* p, VecF v) { store_bf16x8(p, v); }
inline VecF vadd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline VecF vsub(VecF a, VecF b) { return _mm256_sub_ps(a, b); }
inline VecF vmul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
inline VecF vdiv(VecF a, VecF b) { return _mm256_div_ps(a, b); }
inline VecF vfmadd(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline VecF vmax(VecF a, VecF b) { return _mm256_max_ps(a, b); }
inline float vreduce_max(VecF v) { return hmax256(v); }
inline float vreduce_add(VecF v) { return hsum256(v); }
inline VecF vexp(VecF x) { return exp256(x); }
inline VecF vselect_bits(uint32_t bits, VecF a, VecF b) { return _mm256_blendv_ps(b, a, lanes_of_bits8(bits)); }
inline VecF vround_bf16(VecF v) { return round_bf16x8(v); }
#endif

#ifdef KILN_SIMD_VEC
// SiLU(g) = g / (1 + exp(-g)), the one vector form: silu_mul and the SwiGLU GEMM epilogue give
// the same bits.
inline VecF vsilu(VecF g) { return vdiv(g, vadd(vset1(1.f), vexp(vsub(vzero(), g)))); }
#endif

// Asks for [p, p + bytes) in L1 ahead of use. The wide-row kernels (q/k-norm + RoPE, SwiGLU) call
// it on a row a few rows ahead: in a model their input comes cold after a GEMM's weight stream, and
// the hardware prefetcher alone streamed it at 23-35 GB/s (bench/bench_ops.cpp, cold rows).
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
}

// For a loop reading forward 256 bytes a step: once per 4 KiB page (at the step that starts one),
// fetches the line kPageKickAhead bytes further on. On the Zen 5 VM the hardware's stream
// prefetcher starts again at every 4 KiB page, huge pages or not, and a core that computes
// between its loads (the decode GEMV) kept too few misses in flight to cover each restart. With
// one prefetch per page the prefetcher has met each page before the loop reaches it: on two
// cores the GEMV's loop went from 36-47 to 54-69 GB/s (16-64 KiB ahead alike), a plain read from
// 42-52 (one stream or two) to 55-74 (32 or 64 KiB ahead; 49-56 at 8 KiB). bench_read_loops;
// docs/benchmarks.md, thirty-fourth session. Not in the decode attention's span reads
// (touch_bytes_pair): short spans with compute between them, which it made 10-50 % slower.
constexpr int64_t kPageKickAhead = 32 << 10;
inline void kick_page_ahead(const void* step) {
  if ((reinterpret_cast<uintptr_t>(step) & 4095) < 256)
    __builtin_prefetch(static_cast<const char*>(step) + kPageKickAhead, 0, 3);
}

// Reads one word of every 64-byte line of [p, p + bytes), front to back, so that a span a kernel
// is about to walk in an order the hardware prefetcher does not follow arrives in the caches at
// streaming speed. Loads, not prefetch instructions: on the Zen 3 prefetcht0/t1 of the same span
// changed nothing measurable where this read made the AVX2 decode attention 1.6-2x faster
// (docs/notes/cpu-attention.md).
inline void touch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  uint64_t sink = 0;
  for (int64_t o = 0; o < bytes; o += 64) {
    uint64_t word;
    std::memcpy(&word, c + o, sizeof word);
    sink ^= word;
  }
  asm volatile("" : : "r"(sink));  // keeps the loads
}

// touch_bytes for two spans of equal length, a line of one then the same line of the other: two
// streams in flight at once. The decode attention's K and V spans read this way ran 5-10 % nearer
// a plain read's speed on the Zen 5 than the same spans read one after the other
// (docs/notes/cpu-attention.md, decode item 15); cutting them into more streams was slower.
inline void touch_bytes_pair(const void* p, const void* q, int64_t bytes) {
  const char* a = static_cast<const char*>(p);
  const char* b = static_cast<const char*>(q);
  uint64_t sink = 0;
  for (int64_t o = 0; o < bytes; o += 64) {
    uint64_t wa, wb;
    std::memcpy(&wa, a + o, sizeof wa);
    std::memcpy(&wb, b + o, sizeof wb);
    sink ^= wa ^ wb;
  }
  asm volatile("" : : "r"(sink));  // keeps the loads
}

// touch_bytes_pair with each line loaded whole and XORed in: no lane shuffles, where the
// compiler's vectorised form of the loop above gathers one word of each line with vpermt2q. On a
// Zen 4 the decode attention with it took 0.92 of the time cold at 512 slots and 0.96 at 160
// (bench_attention_ab --cold), level warm; on the Zen 5 1.046 cold (docs/notes/cpu-attention.md,
// decode items 24 and 25). The decode attention picks between the two per CPU.
inline void touch_lines_pair(const void* p, const void* q, int64_t bytes) {
#if defined(__AVX512F__)
  const char* a = static_cast<const char*>(p);
  const char* b = static_cast<const char*>(q);
  __m512i sa = _mm512_setzero_si512(), sb = sa;
  int64_t o = 0;
  for (; o + 64 <= bytes; o += 64) {
    sa = _mm512_xor_si512(sa, _mm512_loadu_si512(a + o));
    sb = _mm512_xor_si512(sb, _mm512_loadu_si512(b + o));
  }
  sa = _mm512_xor_si512(sa, sb);
  asm volatile("" : : "v"(sa));  // keeps the loads
  if (o < bytes) touch_bytes_pair(a + o, b + o, bytes - o);
#else
  touch_bytes_pair(p, q, bytes);
#endif
}

// Converts n values of src (f32|bf16) starting at element `offset` into f32 dst.
inline void load_row(const void* src, DType t, int64_t offset, int64_t n, float* dst) {
  if (t == DType::f32) {
    const float* s = static_cast<const float*>(src) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
    return;
  }
  KILN_DCHECK(t == DType::bf16, "load_row: dtype ", dtype_name(t));
  const bf16_t* s = static_cast<const bf16_t*>(src) + offset;
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load_bf16x16(s + i));
#elif defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(s + i));
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

// Stores n f32 values into dst (f32|bf16) at element `offset`, rounding to nearest even for bf16.
inline void store_row(const float* src, int64_t n, void* dst, DType t, int64_t offset) {
  if (t == DType::f32) {
    float* d = static_cast<float*>(dst) + offset;
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
    return;
  }
  KILN_DCHECK(t == DType::bf16, "store_row: dtype ", dtype_name(t));
  bf16_t* d = static_cast<bf16_t*>(dst) + offset;
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) store_bf16x16(d + i, _mm512_loadu_ps(src + i));
#endif
  for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

inline float round_to(DType t, float v) { return t == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

// Sum of a[i] * b[i], f32 accumulation in the build's vector lanes (16 or 8).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#ifdef KILN_SIMD_VEC
  VecF acc0 = vzero(), acc1 = vzero();
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = vfmadd(vload(a + i), vload(b + i), acc0);
    acc1 = vfmadd(vload(a + i + kLanes), vload(b + i + kLanes), acc1);
  }
  for (; i + kLanes <= n; i += kLanes) acc0 = vfmadd(vload(a + i), vload(b + i), acc0);
  s = vreduce_add(vadd(acc0, acc1));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[i] += a * x[i].
inline void axpy_f32(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  __m512 va = _mm512_set1_ps(a);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

// Spreads `items` work items over the threads cyclically (thread t runs t, t + nt, ...), which
// balances items of rising cost (causal attention blocks) better than contiguous chunks.
template <typename Fn>
void parallel_items_cyclic(int64_t items, Fn&& fn) {
  int64_t nt = num_threads();
  if (nt > items) nt = items;
  parallel_for(nt, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t i = t; i < items; i += nt) fn(i);
  });
}

}  // namespace kiln::cpu::detail
