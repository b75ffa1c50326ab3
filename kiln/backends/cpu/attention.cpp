// Attention over a static KV cache with grouped-query heads, causal by slot, masked by kv_mask.
//
// Four paths compute the same thing (online softmax in f32, a query with no visible slot gives 0):
//  - decode (T * group <= 8, D % 16 == 0, AVX-512 or AVX2 + FMA): work items are (batch row,
//    slots), all kv heads of them (see decode_chunk); the cache is split along L too
//    (flash-decoding, per-chunk (max, sum, acc) partials merged at the end) only where batch rows
//    leave threads idle. This path is memory bound: it reads each K/V byte once, the q heads of a
//    group sharing the read. Scores are computed per block of 16 slots (AVX2: 8), the
//    online softmax updated once per superblock of 16 (AVX2: 32), whose K and V are read ahead.
//    With a bf16 cache on CPUs whose bf16 GEMM takes vdpbf16ps, q and p are rounded to bf16 once
//    and the scores and p V run on vdpbf16ps, as the GEMM prefill below rounds them
//    (dpbf16_decode); elsewhere in f32.
//  - prefill (AVX-512 or AVX2 + FMA): work items are (batch, kv head, block of queries); the rows
//    of an item are all (query, q head of the group) pairs, so a group's q heads share each K/V
//    block. Scores are computed transposed (S^T [keys, rows] = K Q^T with Q^T prepared once per
//    item), which makes the per-row softmax reductions vertical vector ops. Memory is O(block),
//    never O(T * L).
//  - prefill through GEMMs (bf16 cache, T >= 32, AVX512_BF16): per batch row, K and V are packed
//    once as kiln's bf16 GEMM's B panels; a work item (kv head, block of 16 queries) computes
//    S = Q K^T and O = P V with that GEMM (the G q heads of a group are rows of one matrix) and the
//    masked softmax between them in f32. Q and P are rounded once to bf16 for the GEMMs, as K and
//    V are stored (see below for why that is the bf16 contract); several times faster than the
//    f32 kernel above at the lengths that matter (docs/notes/cpu-attention.md); keys past a
//    block's last query are skipped, so the causal waste is the diagonal block only.
//  - scalar: any D and any ISA; one query row at a time.
// Only slots [first visible, min(last visible + 1, slot_offset + T)) are read, so a decode step
// against a partly filled cache streams only the filled part.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"

namespace kiln::cpu {

namespace {

using detail::widen;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Dims {
  int64_t b, t, hq, hkv, d, l, g;  // g: q heads per kv head
  int64_t slot_offset;
  float scale;
};

// Visible slot range of each batch row: [lo, hi) bounds every slot with kv_mask == 1.
struct VisRange {
  int64_t lo = 0, hi = 0;
};

std::vector<VisRange> visible_ranges(const Tensor& kv_mask) {
  const int64_t b = kv_mask.dim(0), l = kv_mask.dim(1);
  const int32_t* m = kv_mask.data<int32_t>();
  std::vector<VisRange> out(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    int64_t lo = 0, hi = l;
    while (lo < l && m[i * l + lo] == 0) ++lo;
    while (hi > lo && m[i * l + hi - 1] == 0) --hi;
    out[size_t(i)] = {lo, hi};
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Portable path (any D, any ISA; the only one below AVX-512): one (b, t, h) row at a time, online
// softmax over its visible slots in blocks of 64, so exp and the rescaling of the accumulator are
// paid per block, not per slot. The loops over D are `omp simd` (reductions included), which the
// compiler vectorises for the build's ISA; their order of summation is not the serial one, which
// f32-class tolerances allow. Measured on AVX2 in docs/notes/cpu-attention.md.
template <typename KT>
void attention_scalar(const Dims& a, const float* q, const KT* k, const KT* v, const int32_t* mask,
                      const std::vector<VisRange>& vis, Tensor& out) {
  constexpr int64_t kBlock = 64;
  const int64_t rows = a.b * a.t * a.hq, d = a.d;
  // Causal rows grow in cost with t: the threads share them by work stealing.
  parallel_for_stealing(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> acc(static_cast<size_t>(d));
    float s[kBlock + 4];
    int64_t slot[kBlock];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % a.hq, bt = r / a.hq, ti = bt % a.t, bi = bt / a.t;
      const int64_t kvh = h / a.g;
      const float* qr = q + r * d;
      float* ac = acc.data();
      std::fill(acc.begin(), acc.end(), 0.f);
      float m = kNegInf, lsum = 0.f;
      const int64_t hi = std::min(vis[size_t(bi)].hi, a.slot_offset + ti + 1);
      for (int64_t j = vis[size_t(bi)].lo; j < hi;) {
        // The next block of visible slots.
        int64_t n = 0;
        for (; j < hi && n < kBlock; ++j)
          if (mask[bi * a.l + j]) slot[n++] = j;
        if (n == 0) continue;
        // K or V rows of this head for block slots first..first+3 (a short last group repeats
        // its last slot).
        auto rows_of = [&](const KT* base, int64_t first, const KT* (&group)[4]) {
          for (int u = 0; u < 4; ++u)
            group[u] = base + ((bi * a.l + slot[std::min(first + u, n - 1)]) * a.hkv + kvh) * d;
        };
        // Scores four slots at a time: four independent sums, where one would wait on its own
        // FMA latency at every step.
        const KT* kr[4];
        int64_t e = 0;
        for (; e < n; e += 4) {
          rows_of(k, e, kr);
          float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
          for (int64_t i = 0; i < d; ++i) {
            s0 += qr[i] * widen(kr[0][i]);
            s1 += qr[i] * widen(kr[1][i]);
            s2 += qr[i] * widen(kr[2][i]);
            s3 += qr[i] * widen(kr[3][i]);
          }
          s[e] = s0 * a.scale;  // s has room past n: the repeated last slot lands there
          s[e + 1] = s1 * a.scale;
          s[e + 2] = s2 * a.scale;
          s[e + 3] = s3 * a.scale;
        }
        float bmax = kNegInf;
        for (e = 0; e < n; ++e) bmax = std::max(bmax, s[e]);
        const float m_new = std::max(m, bmax);
        const float alpha = m == kNegInf ? 0.f : std::exp(m - m_new);
        float psum = 0.f;
        for (e = 0; e < n; ++e) {
          s[e] = std::exp(s[e] - m_new);
          psum += s[e];
        }
        for (e = n; e < n + 4; ++e) s[e] = 0.f;  // padding slots of the last group: p = 0
        lsum = lsum * alpha + psum;
        m = m_new;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) ac[i] *= alpha;
        // acc += p V, four slots per pass over acc.
        const KT* vr[4];
        for (e = 0; e < n; e += 4) {
          rows_of(v, e, vr);
          const float p0 = s[e], p1 = s[e + 1], p2 = s[e + 2], p3 = s[e + 3];
#pragma omp simd
          for (int64_t i = 0; i < d; ++i)
            ac[i] += p0 * widen(vr[0][i]) + p1 * widen(vr[1][i]) + p2 * widen(vr[2][i]) +
                     p3 * widen(vr[3][i]);
        }
      }
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;  // no visible slot: 0
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) ac[i] *= inv;
      detail::store_row(ac, d, out.raw(), out.dtype(), r * d);
    }
  });
}

#ifdef KILN_SIMD_VEC
// The vector paths: 16 lanes with AVX-512, 8 with AVX2 + FMA. The work split, the merge of slot
// chunks, the prefill's blocking and the register tiles are shared; the kernels that differ by
// more than the lane count are per ISA.

// n floats of v's storage, from a 64-byte boundary, so that the register tiles' vector loads never
// straddle two cache lines. From malloc's 16-byte alignment the AVX2 prefill tiles ran 10-35 %
// slower (64 x 64 x 128 blocks on one Zen 3 core), the whole prefill attention ~10 % (T = 128-512,
// one thread, same-process A/B).
float* grow(std::vector<float>& v, size_t n) {
  constexpr size_t kLine = 64, kPad = kLine / sizeof(float);
  if (v.size() < n + kPad) v.resize(n + kPad);
  const auto misalign = reinterpret_cast<uintptr_t>(v.data()) % kLine;
  return v.data() + (misalign ? (kLine - misalign) / sizeof(float) : 0);
}

// A decode work item: every kv head of batch row b over slots [j_begin, j_end).
struct DecodeChunk {
  int64_t b, j_begin, j_end;
  bool whole;  // covers every visible slot: normalises and writes `out` itself, no merge
};

// The query rows of one decode work item, as the score kernels read them.
struct DecodeQuery {
  int64_t rg = 0;            // rows (T * G <= 8)
  const float* rows[8] = {};  // f32 q rows, in the pair layout where pair_layout() says so
  const bf16_t* rows_bf16[8] = {};  // or, where the scores take vdpbf16ps, scaled bf16 q rows
};

constexpr int64_t kRowsMax = 64;  // prefill: rows (query, q head) per work item
constexpr int64_t kKeyBlock = 64;  // prefill: keys per online-softmax update

using detail::VecF, detail::kLanes, detail::vload, detail::vset1, detail::vzero, detail::vstore,
    detail::vmul, detail::vfmadd, detail::vadd, detail::vsub, detail::vmax, detail::vexp,
    detail::vreduce_max, detail::vreduce_add, detail::vselect_bits;

// Slots per decode superblock: its K and V spans are read ahead (decode_chunk), then scored in
// blocks of kLanes slots, with one online-softmax update and one pass of p V. AVX-512: one block
// of 16 slots. Against 64 (four blocks, until the thirty-second session) on the Zen 5: the
// model-like row (BM_AttentionDecodeLayers, binaries alternated) read 1.09-1.52x more of a
// plain read's speed at L = 512 and 1.02-1.31x at 2048, 32 in between; in the model at P = 512
// the decode attention took 2.1-2.4 against 2.5-3.3 ms a step (7 of 7 pairs). The shorter the
// compute between two span reads, the less the core's memory stream stands still. With K and V
// already in cache (not a model's case) the extra updates cost 5-30 %. AVX2: four blocks of 8
// (32 kept more of that read in cache than 64 on the Zen 3, 68-75 % of a plain read against
// 59-66 %; 8 not measured).
constexpr int64_t kSuperSlots = kLanes == 16 ? 16 : 4 * kLanes;

// The register tiles both ISAs use, in the build's vector (simd.h: 16 or 8 lanes). The
// `#pragma GCC unroll`s keep the accumulator arrays in registers: without them GCC 12 left AVX2's
// pv_tile accumulators on the stack, a store and reload per FMA (perf annotate).
//
// A vector loaded once and used by several FMAs goes through in_register: left alone, GCC 12
// folds the load into every FMA that uses it (vfmadd231ps mem), so the AVX2 tiles issued 12-15
// loads per 8-12 FMAs and were bound by Zen 3's two vector loads a cycle, not by its FMAs; held
// in a register, the AVX2 prefill attention ran 20-35 % faster (T = 128-512, same-process A/B).
// The AVX-512 tiles keep the compiler's choice (not measured: no AVX-512 CPU at hand).
#ifdef __AVX512F__
inline VecF in_register(VecF v) { return v; }
#else
inline VecF in_register(VecF v) {
  asm("" : "+x"(v));  // an opaque copy: the compiler can no longer re-read it from memory
  return v;
}
#endif

// Decode: acc_r[0, kLanes * NV) = acc_r * alpha_r + sum_jj p_r[jj] * v_jj for one or two rows.
template <int NV, bool kTwo, typename KT>
inline void decode_pv(const KT* vp, int64_t slot_stride, int64_t nb, uint64_t bits, const float* p0,
                      const float* p1, float alpha0, float alpha1, float* acc0, float* acc1) {
  VecF a0[NV], a1[NV];
  const VecF al0 = vset1(alpha0), al1 = vset1(alpha1);
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    a0[i] = vmul(vload(acc0 + kLanes * i), al0);
    if (kTwo) a1[i] = vmul(vload(acc1 + kLanes * i), al1);
  }
  for (int64_t jj = 0; jj < nb; ++jj) {
    // Masked slots are skipped, not multiplied by 0: an unused cache slot may hold anything.
    if (!(bits >> jj & 1u)) continue;
    const KT* row = vp + jj * slot_stride;
    const VecF b0 = vset1(p0[jj]);
    const VecF b1 = kTwo ? vset1(p1[jj]) : b0;
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) {
      const VecF vv = vload(row + kLanes * i);
      a0[i] = vfmadd(b0, vv, a0[i]);
      if (kTwo) a1[i] = vfmadd(b1, vv, a1[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    vstore(acc0 + kLanes * i, a0[i]);
    if (kTwo) vstore(acc1 + kLanes * i, a1[i]);
  }
}

// Prefill: st[k][kLanes * i] = sum_x qt[x][kLanes * i] * kf[k][x] for NK keys and NR row vectors.
template <int NR, int NK>
inline void qk_tile(const float* qt, int64_t ldq, const float* kf, int64_t d, float* st,
                    int64_t ldst) {
  VecF acc[NK][NR];
#pragma GCC unroll 16
  for (int k = 0; k < NK; ++k)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[k][i] = vzero();
  // Unrolled by 4, as the AVX2 GEMM's tile (linear_bf16_portable.cpp): with pv_tile's, AVX2
  // prefill attention at T = 128-256 ran 5-19 % faster (AVX-512 not measured).
#pragma GCC unroll 4
  for (int64_t x = 0; x < d; ++x) {
    VecF qv[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) qv[i] = in_register(vload(qt + x * ldq + kLanes * i));
#pragma GCC unroll 16
    for (int k = 0; k < NK; ++k) {
      const VecF kb = vset1(kf[k * d + x]);
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[k][i] = vfmadd(qv[i], kb, acc[k][i]);
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < NK; ++k)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) vstore(st + k * ldst + kLanes * i, acc[k][i]);
}

// Prefill: o[r][0, kLanes NV) = o[r] * alpha[r] + sum_j pt[j][r] * vf[j] for NRW rows.
template <int NRW, int NV>
inline void pv_tile(const float* pt, int64_t ldp, int64_t nk, const float* vf, int64_t d, float* o,
                    const float* alpha) {
  VecF acc[NRW][NV];
#pragma GCC unroll 16
  for (int r = 0; r < NRW; ++r) {
    const VecF al = vset1(alpha[r]);
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) acc[r][i] = vmul(vload(o + r * d + kLanes * i), al);
  }
#pragma GCC unroll 4  // as qk_tile's
  for (int64_t j = 0; j < nk; ++j) {
    VecF pb[NRW];
#pragma GCC unroll 16
    for (int r = 0; r < NRW; ++r) pb[r] = vset1(pt[j * ldp + r]);
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) {
      const VecF vv = in_register(vload(vf + j * d + kLanes * i));
#pragma GCC unroll 16
      for (int r = 0; r < NRW; ++r) acc[r][i] = vfmadd(pb[r], vv, acc[r][i]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < NRW; ++r)
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) vstore(o + r * d + kLanes * i, acc[r][i]);
}
#endif

#ifdef __AVX512F__

// ------------------------------------------------------------------------------------------------
// Decode path.

// Lane partials of the scores of RG query rows against one K row: part[r][jj] is a vector whose
// lanes sum to q_r . k (unscaled). Two accumulators per row halve the FMA dependency chain.
template <int RG>
inline void decode_partials(const float* const* qrows, const float* kp, int64_t d, __m512* part,
                            int64_t jj) {
  __m512 acc[RG][2];
  for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    const __m512 k0 = _mm512_loadu_ps(kp + i), k1 = _mm512_loadu_ps(kp + i + 16);
    for (int r = 0; r < RG; ++r) {
      acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i), k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i + 16), k1, acc[r][1]);
    }
  }
  if (i < d) {
    const __m512 k0 = _mm512_loadu_ps(kp + i);
    for (int r = 0; r < RG; ++r) acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i), k0, acc[r][0]);
  }
  for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_add_ps(acc[r][0], acc[r][1]);
}

template <int RG>
inline void decode_partials(const float* const* qrows, const bf16_t* kp, int64_t d, __m512* part,
                            int64_t jj) {
  __m512 acc[RG][2];
  for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    const __m512 k0 = detail::load_bf16x16(kp + i);
    const __m512 k1 = detail::load_bf16x16(kp + i + 16);
    for (int r = 0; r < RG; ++r) {
      acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i), k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i + 16), k1, acc[r][1]);
    }
  }
  if (i < d) {
    const __m512 k0 = detail::load_bf16x16(kp + i);
    for (int r = 0; r < RG; ++r) acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i), k0, acc[r][0]);
  }
  for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_add_ps(acc[r][0], acc[r][1]);
}

// The pair layout (AVX-512, bf16 cache, D % 32 == 0). 32 bf16 values loaded as one vector are
// 16 u32 lanes, lane l holding value 2l in its low half and value 2l + 1 in its high half; a shift
// (even values) and a mask (odd ones) widen them exactly to f32 with no lane shuffle. So q and the
// p V accumulators are kept with each 32 values as [16 even-indexed | 16 odd-indexed], and a K or V
// row is used as stored: 1 load and 2 single-cycle ops per 32 values, where widening by vpmovzxwd
// costs a port-5 shuffle per 16 (and vdpbf16ps, on q split into bf16 hi and lo halves, issues at
// half the f32 FMA rate on Intel's Sapphire and Emerald Rapids). Where vdpbf16ps is the faster,
// the decode takes it instead, on a bf16 q (dpbf16_decode).
template <typename KT>
constexpr bool pair_layout(int64_t d) {
  return std::is_same_v<KT, bf16_t> && d % 32 == 0;
}

inline __m512 bf16_even_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
inline __m512 bf16_odd_f32(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
}

// x (D = 32n values) into the pair layout, and back (in place).
void to_pair_layout(const float* x, int64_t d, float* out) {
  for (int64_t c = 0; c < d; c += 32)
    for (int64_t l = 0; l < 16; ++l) {
      out[c + l] = x[c + 2 * l];
      out[c + 16 + l] = x[c + 2 * l + 1];
    }
}
void from_pair_layout(float* x, int64_t d) {
  for (int64_t c = 0; c < d; c += 32) {
    float t[32];
    std::copy(x + c, x + c + 32, t);
    for (int64_t l = 0; l < 16; ++l) {
      x[c + 2 * l] = t[l];
      x[c + 2 * l + 1] = t[16 + l];
    }
  }
}

// decode_partials for q rows in the pair layout against a bf16 K row.
template <int RG>
inline void decode_partials_pairs(const float* const* qrows, const bf16_t* kp, int64_t d,
                                  __m512* part, int64_t jj) {
  __m512 acc[RG][2];
  for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 32) {
    const __m512i w = _mm512_loadu_si512(kp + i);
    const __m512 ke = bf16_even_f32(w), ko = bf16_odd_f32(w);
    for (int r = 0; r < RG; ++r) {
      acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i), ke, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(qrows[r] + i + 16), ko, acc[r][1]);
    }
  }
  for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_add_ps(acc[r][0], acc[r][1]);
}

// part[r * 16 + jj] for the 16 slots of a block (K rows at k0 + jj * slot_stride): zero where the
// slot's bit in `visible` is clear, else the sum of the two accumulators per row that
// dot(K row, acc) leaves.
template <int RG, typename Dot>
inline void block_partials(const bf16_t* k0, int64_t slot_stride, uint32_t visible, __m512* part,
                           Dot&& dot) {
  for (int jj = 0; jj < 16; ++jj) {
    if (!(visible >> jj & 1u)) {
      for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_setzero_ps();
      continue;
    }
    __m512 acc[RG][2];
    for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    dot(k0 + jj * slot_stride, acc);
    for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_add_ps(acc[r][0], acc[r][1]);
  }
}

// The same for the 16 slots of a block at once, D = 32 * ND, with q held in registers across the
// slots (RG * ND <= 8): no per-slot call, no q reloads. Slots whose bit in `visible` is clear get
// zero partials.
template <int RG, int ND>
inline void decode_block_partials_pairs(const float* const* qrows, const bf16_t* k0,
                                        int64_t slot_stride, uint32_t visible, __m512* part) {
  __m512 qe[RG][ND], qo[RG][ND];
  for (int r = 0; r < RG; ++r)
    for (int n = 0; n < ND; ++n) {
      qe[r][n] = _mm512_loadu_ps(qrows[r] + 32 * n);
      qo[r][n] = _mm512_loadu_ps(qrows[r] + 32 * n + 16);
    }
  block_partials<RG>(k0, slot_stride, visible, part, [&](const bf16_t* kp, __m512 (&acc)[RG][2]) {
    for (int n = 0; n < ND; ++n) {
      const __m512i w = _mm512_loadu_si512(kp + 32 * n);
      const __m512 ke = bf16_even_f32(w), ko = bf16_odd_f32(w);
      for (int r = 0; r < RG; ++r) {
        acc[r][0] = _mm512_fmadd_ps(qe[r][n], ke, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(qo[r][n], ko, acc[r][1]);
      }
    }
  });
}

// The p V accumulators of one row (or two, kTwo) as N vectors each, scaled by the softmax's
// alpha as they are loaded, and stored back.
template <int N, bool kTwo>
inline void load_pv_acc(const float* acc0, const float* acc1, float alpha0, float alpha1,
                        __m512 (&a0)[N], __m512 (&a1)[N]) {
  const __m512 al0 = _mm512_set1_ps(alpha0), al1 = _mm512_set1_ps(alpha1);
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) {
    a0[i] = _mm512_mul_ps(_mm512_loadu_ps(acc0 + 16 * i), al0);
    if (kTwo) a1[i] = _mm512_mul_ps(_mm512_loadu_ps(acc1 + 16 * i), al1);
  }
}
template <int N, bool kTwo>
inline void store_pv_acc(const __m512 (&a0)[N], const __m512 (&a1)[N], float* acc0, float* acc1) {
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) {
    _mm512_storeu_ps(acc0 + 16 * i, a0[i]);
    if (kTwo) _mm512_storeu_ps(acc1 + 16 * i, a1[i]);
  }
}

// decode_pv for accumulators in the pair layout and a bf16 V: 32 * NC columns.
template <int NC, bool kTwo>
inline void decode_pv_pairs(const bf16_t* vp, int64_t slot_stride, int64_t nb, uint64_t bits,
                            const float* p0, const float* p1, float alpha0, float alpha1,
                            float* acc0, float* acc1) {
  __m512 a0[2 * NC], a1[2 * NC];
  load_pv_acc<2 * NC, kTwo>(acc0, acc1, alpha0, alpha1, a0, a1);
  for (int64_t jj = 0; jj < nb; ++jj) {
    // Masked slots are skipped, not multiplied by 0: an unused cache slot may hold anything.
    if (!(bits >> jj & 1u)) continue;
    const bf16_t* row = vp + jj * slot_stride;
    const __m512 b0 = _mm512_set1_ps(p0[jj]);
    const __m512 b1 = kTwo ? _mm512_set1_ps(p1[jj]) : b0;
#pragma GCC unroll 8
    for (int n = 0; n < NC; ++n) {
      const __m512i w = _mm512_loadu_si512(row + 32 * n);
      const __m512 ve = bf16_even_f32(w), vo = bf16_odd_f32(w);
      a0[2 * n] = _mm512_fmadd_ps(b0, ve, a0[2 * n]);
      a0[2 * n + 1] = _mm512_fmadd_ps(b0, vo, a0[2 * n + 1]);
      if (kTwo) {
        a1[2 * n] = _mm512_fmadd_ps(b1, ve, a1[2 * n]);
        a1[2 * n + 1] = _mm512_fmadd_ps(b1, vo, a1[2 * n + 1]);
      }
    }
  }
  store_pv_acc<2 * NC, kTwo>(a0, a1, acc0, acc1);
}

#ifdef __AVX512BF16__
// Decode on vdpbf16ps (bf16 cache, D % 32 == 0): q pre-scaled and rounded to bf16 once, p rounded
// to bf16 once, as the GEMM prefill path does (the precision of the tensors around the op).
// Scores: a K row's 32 values are 16 bf16 pairs, one vdpbf16ps against q's pairs per 32 values.
template <int RG, int ND>
inline void decode_block_partials_dp(const bf16_t* const* qrows, const bf16_t* k0,
                                     int64_t slot_stride, uint32_t visible, __m512* part) {
  __m512bh qv[RG][ND];
  for (int r = 0; r < RG; ++r)
    for (int n = 0; n < ND; ++n) qv[r][n] = (__m512bh)_mm512_loadu_si512(qrows[r] + 32 * n);
  block_partials<RG>(k0, slot_stride, visible, part, [&](const bf16_t* kp, __m512 (&acc)[RG][2]) {
    for (int n = 0; n < ND; ++n) {
      const __m512bh w = (__m512bh)_mm512_loadu_si512(kp + 32 * n);
      for (int r = 0; r < RG; ++r) acc[r][n & 1] = _mm512_dpbf16_ps(acc[r][n & 1], w, qv[r][n]);
    }
  });
}

// The same for one slot, q read from L1 (shapes without a register form).
template <int RG>
inline void decode_partials_dp(const bf16_t* const* qrows, const bf16_t* kp, int64_t d,
                               __m512* part, int64_t jj) {
  __m512 acc[RG][2];
  for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 32) {
    const __m512bh w = (__m512bh)_mm512_loadu_si512(kp + i);
    for (int r = 0; r < RG; ++r)
      acc[r][(i / 32) & 1] = _mm512_dpbf16_ps(acc[r][(i / 32) & 1], w,
                                              (__m512bh)_mm512_loadu_si512(qrows[r] + i));
  }
  for (int r = 0; r < RG; ++r) part[r * 16 + jj] = _mm512_add_ps(acc[r][0], acc[r][1]);
}

// p V: slots taken in pairs, their V rows interleaved value by value (vpunpck{l,h}wd), so that one
// vdpbf16ps against the pair (p_j, p_j+1) adds both slots. The accumulators of 32 columns c are
// [lo | hi]: lo lane 4b + i holds column 8b + i, hi lane 4b + i column 8b + 4 + i.
template <int NC, bool kTwo>
inline void decode_pv_dp(const bf16_t* vp, int64_t slot_stride, int64_t nb, uint64_t bits,
                         const uint32_t* pp0, const uint32_t* pp1, float alpha0, float alpha1,
                         float* acc0, float* acc1) {
  __m512 a0[2 * NC], a1[2 * NC];
  load_pv_acc<2 * NC, kTwo>(acc0, acc1, alpha0, alpha1, a0, a1);
  for (int64_t j = 0; j < nb; j += 2) {
    // Masked slots are never loaded (an unused cache slot may hold anything): zeros instead.
    const unsigned both = unsigned(bits >> j) & 3u;
    if (!both) continue;
    const bf16_t* r0 = vp + j * slot_stride;
    const bf16_t* r1 = r0 + slot_stride;
    const __m512bh b0 = (__m512bh)_mm512_set1_epi32(int(pp0[j / 2]));
    const __m512bh b1 = kTwo ? (__m512bh)_mm512_set1_epi32(int(pp1[j / 2])) : b0;
#pragma GCC unroll 8
    for (int n = 0; n < NC; ++n) {
      const __m512i wa = both & 1u ? _mm512_loadu_si512(r0 + 32 * n) : _mm512_setzero_si512();
      const __m512i wb = both & 2u ? _mm512_loadu_si512(r1 + 32 * n) : _mm512_setzero_si512();
      const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(wa, wb);
      const __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(wa, wb);
      a0[2 * n] = _mm512_dpbf16_ps(a0[2 * n], lo, b0);
      a0[2 * n + 1] = _mm512_dpbf16_ps(a0[2 * n + 1], hi, b0);
      if (kTwo) {
        a1[2 * n] = _mm512_dpbf16_ps(a1[2 * n], lo, b1);
        a1[2 * n + 1] = _mm512_dpbf16_ps(a1[2 * n + 1], hi, b1);
      }
    }
  }
  store_pv_acc<2 * NC, kTwo>(a0, a1, acc0, acc1);
}

// decode_pv_dp over D = 32n columns in chunks of up to 128, for one row or two.
void decode_pv_dp_chunks(const bf16_t* vp, int64_t slot_stride, int64_t nb, uint64_t bits,
                         int64_t d, const uint32_t* pp0, const uint32_t* pp1, float alpha0,
                         float alpha1, float* acc0, float* acc1) {
  for (int64_t d0 = 0; d0 < d; d0 += 128) {
    float* c1 = acc1 ? acc1 + d0 : nullptr;
    switch (std::min<int64_t>(4, (d - d0) / 32) * 2 + (acc1 ? 1 : 0)) {
#define KILN_PVD_CASE(n)                                                                      \
  case 2 * n:                                                                                 \
    decode_pv_dp<n, false>(vp + d0, slot_stride, nb, bits, pp0, pp0, alpha0, alpha0, acc0 + d0, \
                           acc0 + d0);                                                        \
    break;                                                                                    \
  case 2 * n + 1:                                                                             \
    decode_pv_dp<n, true>(vp + d0, slot_stride, nb, bits, pp0, pp1, alpha0, alpha1, acc0 + d0, \
                          c1);                                                                \
    break;
      KILN_PVD_CASE(1) KILN_PVD_CASE(2) KILN_PVD_CASE(3) KILN_PVD_CASE(4)
#undef KILN_PVD_CASE
    }
  }
}

// The accumulators of decode_pv_dp (each 32 columns [lo | hi]) back into column order, in place.
void from_unpack_layout(float* x, int64_t d) {
  for (int64_t c = 0; c < d; c += 32) {
    float t[32];
    std::copy(x + c, x + c + 32, t);
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t i = 0; i < 4; ++i) {
        x[c + 8 * b + i] = t[4 * b + i];
        x[c + 8 * b + 4 + i] = t[16 + 4 * b + i];
      }
  }
}
#endif  // __AVX512BF16__

// Lane i of the result = op over the lanes of v[i], for 16 vectors (a transposing reduction
// tree: 45 shuffles and ops instead of 16 separate horizontal reductions, whose latency chains
// a row-by-row loop waits on).
template <typename Op>
inline __m512 hreduce16(const __m512* v, Op op) {
  __m512 w[8], u[4];
  // u[i] must hold partials of v[i], v[i+4], v[i+8], v[i+12] in its four 128-bit blocks.
  for (int i = 0; i < 4; ++i) {
    const __m512 a = v[i], b = v[i + 4], c = v[i + 8], e = v[i + 12];
    w[2 * i] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    w[2 * i + 1] = op(_mm512_shuffle_f32x4(c, e, _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_f32x4(c, e, _MM_SHUFFLE(3, 2, 3, 2)));
    u[i] = op(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Within each block: [op u0, op u1, op u2, op u3] -> block k lane i = v[4k + i].
  const __m512 a = op(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
  const __m512 b = op(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
  return op(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
            _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
inline __m512 hsum16(const __m512* v) {
  return hreduce16(v, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
}
inline __m512 hmax16(const __m512* v) {
  return hreduce16(v, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
}

template <int NV, typename KT>
inline void decode_pv_dispatch_rows(const KT* vp, int64_t slot_stride, int64_t nb, uint64_t bits,
                                    const float* p0,
                                    const float* p1, float alpha0, float alpha1, float* acc0,
                                    float* acc1) {
  if (p1)
    decode_pv<NV, true>(vp, slot_stride, nb, bits, p0, p1, alpha0, alpha1, acc0, acc1);
  else
    decode_pv<NV, false>(vp, slot_stride, nb, bits, p0, p0, alpha0, alpha0, acc0, acc0);
}

template <typename KT>
void decode_pv_chunks(const KT* vp, int64_t slot_stride, int64_t nb, uint64_t bits, int64_t d,
                      const float* p0,
                      const float* p1, float alpha0, float alpha1, float* acc0, float* acc1) {
  if constexpr (std::is_same_v<KT, bf16_t>) {
    if (pair_layout<KT>(d)) {
      for (int64_t d0 = 0; d0 < d; d0 += 128) {
        float* c1 = acc1 ? acc1 + d0 : nullptr;
        switch (std::min<int64_t>(4, (d - d0) / 32) * 2 + (acc1 ? 1 : 0)) {
#define KILN_PVP_CASE(n)                                                                     \
  case 2 * n:                                                                                \
    decode_pv_pairs<n, false>(vp + d0, slot_stride, nb, bits, p0, p0, alpha0, alpha0,        \
                              acc0 + d0, acc0 + d0);                                         \
    break;                                                                                   \
  case 2 * n + 1:                                                                            \
    decode_pv_pairs<n, true>(vp + d0, slot_stride, nb, bits, p0, p1, alpha0, alpha1,         \
                             acc0 + d0, c1);                                                 \
    break;
          KILN_PVP_CASE(1) KILN_PVP_CASE(2) KILN_PVP_CASE(3) KILN_PVP_CASE(4)
#undef KILN_PVP_CASE
        }
      }
      return;
    }
  }
  for (int64_t d0 = 0; d0 < d; d0 += 128) {
    const int64_t nv = std::min<int64_t>(8, (d - d0) / 16);
    float* c1 = acc1 ? acc1 + d0 : nullptr;
    switch (nv) {
#define KILN_PV_CASE(n)                                                                     \
  case n:                                                                                   \
    decode_pv_dispatch_rows<n>(vp + d0, slot_stride, nb, bits, p0, p1, alpha0, alpha1, acc0 + d0, \
                               c1);                                                         \
    break;
      KILN_PV_CASE(1) KILN_PV_CASE(2) KILN_PV_CASE(3) KILN_PV_CASE(4)
      KILN_PV_CASE(5) KILN_PV_CASE(6) KILN_PV_CASE(7) KILN_PV_CASE(8)
#undef KILN_PV_CASE
    }
  }
}

// A block's partials with q held in registers: vdpbf16ps on the scaled bf16 q where the decode
// takes it (dpbf16_decode, which implies the pair layout's shapes), else f32 FMAs on the pairs.
template <int RG, int ND>
inline void block_partials_in_registers(const DecodeQuery& qr, const bf16_t* kb,
                                        int64_t slot_stride, uint32_t bits, __m512* part) {
#ifdef __AVX512BF16__
  if (qr.rows_bf16[0])
    return decode_block_partials_dp<RG, ND>(qr.rows_bf16, kb, slot_stride, bits, part);
#endif
  decode_block_partials_pairs<RG, ND>(qr.rows, kb, slot_stride, bits, part);
}

// Scores q_i . k_j of the rows against the 16 slots of one block (unscaled, or scaled where q comes
// as scaled bf16; K rows at kb + jj * slot_stride; slots whose bit in `bits` is clear get 0) into
// s[i * kSuperSlots + jj]. The K block
// is streamed once: lane partials per (row, slot), then one transposing reduction per row gives the
// row's 16 scores as one vector.
template <typename KT>
void score_block(const DecodeQuery& qr, int64_t d, const KT* kb, int64_t slot_stride,
                 uint32_t bits, float* s) {
  const int64_t rg = qr.rg;
  __m512 part[8 * 16];  // lane partials [row][slot]
  bool scored = false;
  if constexpr (std::is_same_v<KT, bf16_t>) {
    // The common shapes (D = 64 or 128, up to 4 rows per kv head) keep q in registers.
    switch (pair_layout<KT>(d) ? rg * 1000 + d : 0) {
#define KILN_BLOCK_CASE(r, dd)                                                        \
  case r * 1000 + dd:                                                                 \
    block_partials_in_registers<r, dd / 32>(qr, kb, slot_stride, bits, part);         \
    scored = true;                                                                    \
    break;
      KILN_BLOCK_CASE(1, 64) KILN_BLOCK_CASE(2, 64) KILN_BLOCK_CASE(3, 64)
      KILN_BLOCK_CASE(4, 64) KILN_BLOCK_CASE(1, 128) KILN_BLOCK_CASE(2, 128)
#undef KILN_BLOCK_CASE
      default: break;
    }
  }
  // One slot's partials for RG rows: from the bf16 q or the pair layout's q where they apply.
  const bool pairs = pair_layout<KT>(d);
  auto slot_partials = [&]<int RG>(const KT* kp, int64_t jj) {
    if constexpr (std::is_same_v<KT, bf16_t>) {
#ifdef __AVX512BF16__
      if (qr.rows_bf16[0]) return decode_partials_dp<RG>(qr.rows_bf16, kp, d, part, jj);
#endif
      if (pairs) return decode_partials_pairs<RG>(qr.rows, kp, d, part, jj);
    }
    decode_partials<RG>(qr.rows, kp, d, part, jj);
  };
  for (int64_t jj = 0; jj < 16 && !scored; ++jj) {
    if (!(bits >> jj & 1u)) {
      for (int64_t i = 0; i < rg; ++i) part[i * 16 + jj] = _mm512_setzero_ps();
      continue;
    }
    const KT* kp = kb + jj * slot_stride;
    switch (rg) {
#define KILN_SC_CASE(n)                                 \
  case n:                                               \
    slot_partials.template operator()<n>(kp, jj);       \
    break;
      KILN_SC_CASE(1) KILN_SC_CASE(2) KILN_SC_CASE(3) KILN_SC_CASE(4)
      KILN_SC_CASE(5) KILN_SC_CASE(6) KILN_SC_CASE(7) KILN_SC_CASE(8)
#undef KILN_SC_CASE
    }
  }
  for (int64_t i = 0; i < rg; ++i) _mm512_store_ps(s + i * kSuperSlots, hsum16(part + i * 16));
}

// ------------------------------------------------------------------------------------------------
// Prefill kernels.

template <int NR>
void qk_block(const float* qt, int64_t ldq, const float* kf, int64_t nk_pad, int64_t d, float* st,
              int64_t ldst) {
  constexpr int NK = NR <= 2 ? 8 : 4;
  for (int64_t k = 0; k < nk_pad; k += NK) qk_tile<NR, NK>(qt, ldq, kf + k * d, d, st + k * ldst, ldst);
}

template <int NV>
void pv_rows(const float* pt, int64_t ldp, int64_t nk, const float* vf, int64_t d, float* o,
             const float* alpha, int64_t r_begin, int64_t r_end) {
  int64_t r = r_begin;
  for (; r + 3 <= r_end; r += 3) pv_tile<3, NV>(pt + r, ldp, nk, vf, d, o + r * d, alpha + r);
  if (r_end - r == 2) pv_tile<2, NV>(pt + r, ldp, nk, vf, d, o + r * d, alpha + r);
  if (r_end - r == 1) pv_tile<1, NV>(pt + r, ldp, nk, vf, d, o + r * d, alpha + r);
}

// Online softmax over the keys of a block for columns (rows) [c0, ld) of st [keys, ld], 16 rows per
// vector: the reductions over keys are vertical. st becomes p; m, lsum and alpha are per row.
void softmax_update(float* st, int64_t ld, int64_t nk_pad, int64_t c0, float* m, float* lsum,
                    float* alpha) {
  for (int64_t c = c0; c < ld; c += 16) {
    __m512 mb = _mm512_set1_ps(kNegInf);
    for (int64_t j = 0; j < nk_pad; ++j) mb = _mm512_max_ps(mb, _mm512_loadu_ps(st + j * ld + c));
    const __m512 m_old = _mm512_loadu_ps(m + c);
    const __m512 m_new = _mm512_max_ps(m_old, mb);
    // Rows with nothing visible yet keep a finite reference 0 (their p and alpha are 0).
    const __mmask16 none = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ);
    const __m512 m_use = _mm512_mask_mov_ps(m_new, none, _mm512_setzero_ps());
    const __m512 al = detail::exp512_masked_inf(_mm512_sub_ps(m_old, m_use));
    __m512 ps = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk_pad; ++j) {
      const __m512 p = detail::exp512_masked_inf(_mm512_sub_ps(_mm512_loadu_ps(st + j * ld + c), m_use));
      _mm512_storeu_ps(st + j * ld + c, p);
      ps = _mm512_add_ps(ps, p);
    }
    _mm512_storeu_ps(lsum + c, _mm512_fmadd_ps(_mm512_loadu_ps(lsum + c), al, ps));
    _mm512_storeu_ps(m + c, m_new);
    _mm512_storeu_ps(alpha + c, al);
  }
}

// st[k][c] = sum_x qt[x][c] * kf[k][x] for nk_pad keys and 16 * n16 columns.
void qk_rows(const float* qt, int64_t ldq, const float* kf, int64_t nk_pad, int64_t d, float* st,
             int64_t ldst, int64_t n16) {
  switch (n16) {
    case 1: qk_block<1>(qt, ldq, kf, nk_pad, d, st, ldst); break;
    case 2: qk_block<2>(qt, ldq, kf, nk_pad, d, st, ldst); break;
    case 3: qk_block<3>(qt, ldq, kf, nk_pad, d, st, ldst); break;
    default: qk_block<4>(qt, ldq, kf, nk_pad, d, st, ldst); break;
  }
}

// o[r] = o[r] * alpha[r] + sum_j pt[j][r] * vf[j] for rows [r_begin, r_end), over D in chunks of
// 128 columns.
void pv_update(const float* pt, int64_t ldp, int64_t nk_pad, const float* vf, int64_t d, float* o,
               const float* alpha, int64_t r_begin, int64_t r_end) {
  for (int64_t d0 = 0; d0 < d; d0 += 128) {
    switch (std::min<int64_t>(8, (d - d0) / 16)) {
#define KILN_PVR_CASE(n)                                                    \
  case n:                                                                   \
    pv_rows<n>(pt, ldp, nk_pad, vf + d0, d, o + d0, alpha, r_begin, r_end); \
    break;
      KILN_PVR_CASE(1) KILN_PVR_CASE(2) KILN_PVR_CASE(3) KILN_PVR_CASE(4)
      KILN_PVR_CASE(5) KILN_PVR_CASE(6) KILN_PVR_CASE(7) KILN_PVR_CASE(8)
#undef KILN_PVR_CASE
    }
  }
}

#elif defined(KILN_SIMD_VEC)

// The AVX2 + FMA forms (no AVX-512): 8-lane vectors and 16 registers, so blocks of 8 slots in
// decode and smaller register tiles in prefill; the structure is the one above, the measurements
// are in docs/notes/cpu-attention.md.

// ------------------------------------------------------------------------------------------------
// Decode kernels.

// Scores q_r . k_jj (unscaled) of RG query rows against the 8 slots of a block (K rows at kb + jj *
// slot_stride; slots whose bit in `bits` is clear get 0) into s[r * kSuperSlots + jj]: each K row
// is read once for all the rows, lane partials per (row, slot) reduced by one transposing sum.
template <int RG, typename KT>
void score_block8(const float* const* qrows, int64_t d, const KT* kb, int64_t slot_stride,
                  uint32_t bits, float* s) {
  // Accumulators per row: enough independent FMA chains to cover the FMA latency (with two rows,
  // two per row left the loop latency bound: perf annotate), within 16 registers.
  constexpr int NA = RG <= 2 ? 4 : RG <= 4 ? 2 : 1;
  __m256 part[RG][8];
  for (int jj = 0; jj < 8; ++jj) {
    if (!(bits >> jj & 1u)) {
      for (int r = 0; r < RG; ++r) part[r][jj] = _mm256_setzero_ps();
      continue;
    }
    const KT* kp = kb + jj * slot_stride;
    __m256 acc[RG][NA];
#pragma GCC unroll 8
    for (int r = 0; r < RG; ++r)
#pragma GCC unroll 4
      for (int u = 0; u < NA; ++u) acc[r][u] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 * NA <= d; i += 8 * NA)
#pragma GCC unroll 4
      for (int u = 0; u < NA; ++u) {
        const __m256 kv = vload(kp + i + 8 * u);
#pragma GCC unroll 8
        for (int r = 0; r < RG; ++r)
          acc[r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(qrows[r] + i + 8 * u), kv, acc[r][u]);
      }
    for (; i < d; i += 8) {  // d % 8 == 0
      const __m256 kv = vload(kp + i);
#pragma GCC unroll 8
      for (int r = 0; r < RG; ++r)
        acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qrows[r] + i), kv, acc[r][0]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < RG; ++r) {
      __m256 sum = acc[r][0];
#pragma GCC unroll 4
      for (int u = 1; u < NA; ++u) sum = _mm256_add_ps(sum, acc[r][u]);
      part[r][jj] = sum;
    }
  }
  for (int r = 0; r < RG; ++r) _mm256_storeu_ps(s + r * kSuperSlots, detail::hsum8x8(part[r]));
}

template <typename KT>
void score_block(const DecodeQuery& qr, int64_t d, const KT* kb, int64_t slot_stride,
                 uint32_t bits, float* s) {
  switch (qr.rg) {
#define KILN_SC_CASE(n) \
  case n:               \
    score_block8<n>(qr.rows, d, kb, slot_stride, bits, s); \
    break;
    KILN_SC_CASE(1) KILN_SC_CASE(2) KILN_SC_CASE(3) KILN_SC_CASE(4)
    KILN_SC_CASE(5) KILN_SC_CASE(6) KILN_SC_CASE(7) KILN_SC_CASE(8)
#undef KILN_SC_CASE
  }
}

// decode_pv over D in chunks of 48 columns (two rows' accumulators in 12 registers).
template <typename KT>
void decode_pv_chunks(const KT* vp, int64_t slot_stride, int64_t nb, uint64_t bits, int64_t d,
                      const float* p0, const float* p1, float alpha0, float alpha1, float* acc0,
                      float* acc1) {
  for (int64_t d0 = 0; d0 < d; d0 += 48) {
    const int64_t nv = std::min<int64_t>(6, (d - d0) / 8);
    switch (nv * 2 + (p1 ? 1 : 0)) {
#define KILN_PV_CASE(n)                                                                        \
  case 2 * n:                                                                                  \
    decode_pv<n, false>(vp + d0, slot_stride, nb, bits, p0, p0, alpha0, alpha0, acc0 + d0,     \
                        acc0 + d0);                                                            \
    break;                                                                                     \
  case 2 * n + 1:                                                                              \
    decode_pv<n, true>(vp + d0, slot_stride, nb, bits, p0, p1, alpha0, alpha1, acc0 + d0,      \
                       acc1 + d0);                                                             \
    break;
      KILN_PV_CASE(1) KILN_PV_CASE(2) KILN_PV_CASE(3) KILN_PV_CASE(4) KILN_PV_CASE(5)
      KILN_PV_CASE(6)
#undef KILN_PV_CASE
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Prefill kernels.

// st[k][c] = sum_x qt[x][c] * kf[k][x] for nk_pad (a multiple of 8) keys and 16 * n16 columns;
// tiles of 6 keys (12 accumulators) were 3-4 % faster than tiles of 4.
void qk_rows(const float* qt, int64_t ldq, const float* kf, int64_t nk_pad, int64_t d, float* st,
             int64_t ldst, int64_t n16) {
  for (int64_t c = 0; c < 16 * n16; c += 16) {
    int64_t k = 0;
    for (; k + 6 <= nk_pad; k += 6)
      qk_tile<2, 6>(qt + c, ldq, kf + k * d, d, st + k * ldst + c, ldst);
    for (; k + 4 <= nk_pad; k += 4)
      qk_tile<2, 4>(qt + c, ldq, kf + k * d, d, st + k * ldst + c, ldst);
    if (k < nk_pad) qk_tile<2, 2>(qt + c, ldq, kf + k * d, d, st + k * ldst + c, ldst);
  }
}

// o[r] = o[r] * alpha[r] + sum_j pt[j][r] * vf[j] for rows [r_begin, r_end), over D in chunks of
// 32 columns (d % 16 == 0).
void pv_update(const float* pt, int64_t ldp, int64_t nk_pad, const float* vf, int64_t d, float* o,
               const float* alpha, int64_t r_begin, int64_t r_end) {
  for (int64_t d0 = 0; d0 < d; d0 += 32) {
    const bool full = d - d0 >= 32;
    int64_t r = r_begin;
    for (; r + 3 <= r_end; r += 3) {
      if (full)
        pv_tile<3, 4>(pt + r, ldp, nk_pad, vf + d0, d, o + r * d + d0, alpha + r);
      else
        pv_tile<3, 2>(pt + r, ldp, nk_pad, vf + d0, d, o + r * d + d0, alpha + r);
    }
    for (; r < r_end; ++r) {
      if (full)
        pv_tile<1, 4>(pt + r, ldp, nk_pad, vf + d0, d, o + r * d + d0, alpha + r);
      else
        pv_tile<1, 2>(pt + r, ldp, nk_pad, vf + d0, d, o + r * d + d0, alpha + r);
    }
  }
}

// Online softmax over the keys of a block for columns (rows) [c0, ld) of st [keys, ld], 8 rows per
// vector. st becomes p; m, lsum and alpha are per row.
void softmax_update(float* st, int64_t ld, int64_t nk_pad, int64_t c0, float* m, float* lsum,
                    float* alpha) {
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  for (int64_t c = c0; c < ld; c += 8) {
    __m256 mb = neg_inf;
    for (int64_t j = 0; j < nk_pad; ++j) mb = _mm256_max_ps(mb, _mm256_loadu_ps(st + j * ld + c));
    const __m256 m_old = _mm256_loadu_ps(m + c);
    const __m256 m_new = _mm256_max_ps(m_old, mb);
    // Rows with nothing visible yet keep a finite reference 0 (their p and alpha are 0).
    const __m256 m_use = _mm256_andnot_ps(_mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ), m_new);
    const __m256 al = detail::exp256(_mm256_sub_ps(m_old, m_use));
    __m256 ps = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk_pad; ++j) {
      const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(st + j * ld + c), m_use);
      const __m256 p = detail::exp256(x);
      _mm256_storeu_ps(st + j * ld + c, p);
      ps = _mm256_add_ps(ps, p);
    }
    _mm256_storeu_ps(lsum + c, _mm256_fmadd_ps(_mm256_loadu_ps(lsum + c), al, ps));
    _mm256_storeu_ps(m + c, m_new);
    _mm256_storeu_ps(alpha + c, al);
  }
}

#endif

#ifdef KILN_SIMD_VEC
// How decode_chunk reads a superblock's K and V spans ahead of its walk: whole lines on AMD's
// family 19h (Zen 3, Zen 4), one word a line elsewhere (simd.h: touch_lines_pair).
bool span_reads_whole_lines() {
#if defined(__x86_64__)
  static const bool whole = __builtin_cpu_is("amdfam19h");
  return whole;
#else
  return false;
#endif
}

// Whether decode_chunk scores and sums on vdpbf16ps: a bf16 cache with D % 32 == 0, where kiln's
// bf16 GEMM takes vdpbf16ps too (bf16_gemm_arithmetic: the CPUs that run it at least as fast as
// f32 FMAs). q is then scaled and rounded to bf16 once and p rounded to bf16 once, as the GEMM
// prefill path rounds them (and as Transformers' bf16 attention holds them): K and V are used as
// stored, with no widening, and one vdpbf16ps does the work of two f32 FMAs. On a Zen 4 that took a
// cold call at 544 slots to 0.94 of the time of the pair layout's f32 FMAs (warm 0.90), and decode
// steps at P = 512 to 0.992-0.995 (docs/notes/cpu-attention.md, decode item 26).
template <typename KT>
bool dpbf16_decode(int64_t d) {
#ifdef __AVX512BF16__
  return std::is_same_v<KT, bf16_t> && d % 32 == 0 &&
         detail::bf16_gemm_arithmetic() == detail::Bf16GemmArithmetic::kDpbf16;
#else
  (void)d;
  return false;
#endif
}

// One chunk: for each kv head, the rg = T * G query rows of the head (row i is
// r = t * Hq + g * G + q head of the group). Writes unnormalised partials pm[r], pl[r],
// pacc[r * D], or, for a whole chunk, the normalised rows of `out`. Scores come per block of
// kLanes slots (score_block, per ISA), the online softmax is updated once per superblock. The heads
// are walked inside each superblock, whose K and V spans (a slot's rows of all heads are
// contiguous) are first read front to back into L2 (touch_bytes_pair or touch_lines_pair: K and
// V line by line in turn): without the read ahead the walk (D values of every Hkv * D slot row)
// leaves the hardware prefetcher idle and ran at 31-41 % of a plain read of its bytes on the
// Zen 3; one head per item was 12-15 % slower there, and on the Zen 5 (bench_attention's
// model-like row) 48-52 against 46 us per layer at L = 192, 395 against 331-339 at 2048.
// Software prefetch, of the next block's rows or of the next or current superblock's span,
// changed nothing measurable on the Zen 3; reading the next superblock while computing this one
// was slower than reading this one first (docs/notes/cpu-attention.md).
template <typename KT>
void decode_chunk(const Dims& a, const float* q, const KT* k, const KT* v, const int32_t* mask,
                  const DecodeChunk& c, float* pm, float* pl, float* pacc, Tensor& out) {
  const int64_t rows = a.t * a.hq, rg = a.t * a.g;  // rg <= 8 on this path
  const float* qb = q + c.b * rows * a.d;
  auto row_of = [&](int64_t g, int64_t i) { return (i / a.g) * a.hq + g * a.g + i % a.g; };
  thread_local std::vector<DecodeQuery> queries;
  thread_local std::vector<float> qpair_buf;
  thread_local std::vector<bf16_t> qbf16_buf;
  if (queries.size() < size_t(a.hkv)) queries.resize(size_t(a.hkv));
  const bool dp = dpbf16_decode<KT>(a.d);  // scaled bf16 q, bf16 p, vdpbf16ps
#ifdef __AVX512F__
  const bool pairs = !dp && pair_layout<KT>(a.d);  // q and pacc in the pair layout
#else
  const bool pairs = false;
#endif
  if (pairs && qpair_buf.size() < size_t(a.hkv * rg * a.d)) qpair_buf.resize(size_t(a.hkv * rg * a.d));
  if (dp && qbf16_buf.size() < size_t(a.hkv * rg * a.d)) qbf16_buf.resize(size_t(a.hkv * rg * a.d));
  for (int64_t g = 0; g < a.hkv; ++g) {
    DecodeQuery& qr = queries[size_t(g)];
    qr.rg = rg;
    for (int64_t i = 0; i < rg; ++i) {
      const int64_t r = row_of(g, i);
      qr.rows[i] = qb + r * a.d;
      qr.rows_bf16[i] = nullptr;
      pm[r] = kNegInf;
      pl[r] = 0.f;
      std::fill(pacc + r * a.d, pacc + (r + 1) * a.d, 0.f);
#ifdef __AVX512F__
      if (dp) {
        bf16_t* qh = qbf16_buf.data() + (g * rg + i) * a.d;
        const __m512 scale = _mm512_set1_ps(a.scale);
        for (int64_t e = 0; e < a.d; e += 16)
          detail::store_bf16x16(qh + e, _mm512_mul_ps(_mm512_loadu_ps(qr.rows[i] + e), scale));
        qr.rows_bf16[i] = qh;
      }
      if (!pairs) continue;
      float* qp = qpair_buf.data() + (g * rg + i) * a.d;
      to_pair_layout(qr.rows[i], a.d, qp);
      qr.rows[i] = qp;
#endif
    }
  }
  const bool whole_lines = span_reads_whole_lines();
  alignas(64) bf16_t p_bf16[8 * kSuperSlots];  // where dp: p rounded to bf16, [row][slot]
  alignas(64) float s[8 * kSuperSlots];  // scores, then p, of the superblock: [row][slot]
  float alpha[8];
  constexpr uint32_t kBlockBits = (1u << kLanes) - 1u;
  const int64_t slot_stride = a.hkv * a.d;
  for (int64_t j0 = c.j_begin; j0 < c.j_end; j0 += kSuperSlots) {
    const int64_t ns = std::min<int64_t>(kSuperSlots, c.j_end - j0), nsub = (ns + kLanes - 1) / kLanes;
    uint64_t base = 0;  // visible (unmasked) slots of the superblock
    for (int64_t jj = 0; jj < ns; ++jj)
      if (mask[c.b * a.l + j0 + jj]) base |= uint64_t(1) << jj;
    const int64_t span = (c.b * a.l + j0) * slot_stride;
    const int64_t span_bytes = ns * slot_stride * int64_t(sizeof(KT));
    if (whole_lines)
      detail::touch_lines_pair(k + span, v + span, span_bytes);
    else
      detail::touch_bytes_pair(k + span, v + span, span_bytes);
    for (int64_t g = 0; g < a.hkv; ++g) {
      const DecodeQuery& qr = queries[size_t(g)];
      const int64_t first = (c.b * a.l + j0) * slot_stride + g * a.d;  // head g's row of slot j0
      for (int64_t sb = 0; sb < nsub; ++sb)
        score_block(qr, a.d, k + first + kLanes * sb * slot_stride, slot_stride,
                    uint32_t(base >> (kLanes * sb)) & kBlockBits, s + kLanes * sb);
      // One online-softmax update per row over the superblock; s becomes p.
      for (int64_t i = 0; i < rg; ++i) {
        // Causal: slots j <= slot_offset + t.
        const int64_t r = row_of(g, i), lim = a.slot_offset + i / a.g - j0;  // last visible - j0
        float* sp = s + i * kSuperSlots;
        VecF sv[kSuperSlots / kLanes];
        uint32_t vis[kSuperSlots / kLanes];
        VecF mx = vset1(kNegInf);
        for (int64_t sb = 0; sb < nsub; ++sb) {
          vis[sb] = uint32_t(base >> (kLanes * sb)) & kBlockBits;
          const int64_t last = lim - kLanes * sb;
          if (last < kLanes - 1) vis[sb] &= last < 0 ? 0u : (2u << last) - 1u;
          const VecF scores = dp ? vload(sp + kLanes * sb)  // q came scaled
                                 : vmul(vload(sp + kLanes * sb), vset1(a.scale));
          sv[sb] = vselect_bits(vis[sb], scores, vset1(kNegInf));
          mx = vmax(mx, sv[sb]);
        }
        const float m_new = std::max(pm[r], vreduce_max(mx));
        if (m_new == kNegInf) {
          for (int64_t sb = 0; sb < nsub; ++sb) vstore(sp + kLanes * sb, vzero());
          alpha[i] = 1.f;
          continue;
        }
        alpha[i] = pm[r] == kNegInf ? 0.f : std::exp(pm[r] - m_new);
        VecF sum = vzero();
        for (int64_t sb = 0; sb < nsub; ++sb) {
          // Hidden slots (-inf) get exactly 0.
          VecF p = vselect_bits(
              vis[sb], vexp(vsub(sv[sb], vset1(m_new))), vzero());
#ifdef __AVX512F__
          if (dp) {  // p V takes p in bf16; the sum is of the rounded values (weights sum to 1)
            bf16_t* pr = p_bf16 + i * kSuperSlots + kLanes * sb;
            const __m256i pb = detail::cvt_f32_bf16x16(p);
            _mm256_store_si256(reinterpret_cast<__m256i*>(pr), pb);
            p = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(pb), 16));
          }
#endif
          vstore(sp + kLanes * sb, p);
          sum = vadd(sum, p);
        }
        pl[r] = pl[r] * alpha[i] + vreduce_add(sum);
        pm[r] = m_new;
      }
      // acc += p V (V rows streamed once per D chunk, from L1), rows in pairs.
      for (int64_t i = 0; i < rg; i += 2) {
        const bool two = i + 1 < rg;
#ifdef __AVX512BF16__
        if constexpr (std::is_same_v<KT, bf16_t>) {
          if (dp) {
            const auto* pp = reinterpret_cast<const uint32_t*>(p_bf16);  // (p_j, p_j+1) pairs
            decode_pv_dp_chunks(v + first, slot_stride, ns, base, a.d, pp + i * kSuperSlots / 2,
                                two ? pp + (i + 1) * kSuperSlots / 2 : nullptr, alpha[i],
                                two ? alpha[i + 1] : 1.f, pacc + row_of(g, i) * a.d,
                                two ? pacc + row_of(g, i + 1) * a.d : nullptr);
            continue;
          }
        }
#endif
        decode_pv_chunks(v + first, slot_stride, ns, base, a.d, s + i * kSuperSlots,
                         two ? s + (i + 1) * kSuperSlots : nullptr, alpha[i],
                         two ? alpha[i + 1] : 1.f, pacc + row_of(g, i) * a.d,
                         two ? pacc + row_of(g, i + 1) * a.d : nullptr);
      }
    }
  }
#ifdef __AVX512F__
#ifdef __AVX512BF16__
  if (dp)
    for (int64_t r = 0; r < rows; ++r) from_unpack_layout(pacc + r * a.d, a.d);
#endif
  if (pairs)
    for (int64_t r = 0; r < rows; ++r) from_pair_layout(pacc + r * a.d, a.d);
#endif
  if (!c.whole) return;
  for (int64_t g = 0; g < a.hkv; ++g)
    for (int64_t i = 0; i < rg; ++i) {
      const int64_t r = row_of(g, i);
      float* acc = pacc + r * a.d;
      const float inv = pl[r] > 0.f ? 1.f / pl[r] : 0.f;  // no visible slot: 0
      for (int64_t e = 0; e < a.d; ++e) acc[e] *= inv;
      detail::store_row(acc, a.d, out.raw(), out.dtype(), (c.b * rows + r) * a.d);
    }
}

template <typename KT>
void attention_decode(const Dims& a, const float* q, const KT* k, const KT* v, const int32_t* mask,
                      const std::vector<VisRange>& vis, Tensor& out) {
  const int64_t threads = num_threads();
  // Items: (batch row, slots), each for all kv heads (see decode_chunk). Whole rows first (an
  // item then writes its rows itself, no merge); the slots are split (flash-decoding, merged
  // below) only where batch rows leave threads idle. The threads share the items by work
  // stealing, each starting on its own contiguous run: on the Zen 5 VM one core was often 15-25 %
  // slower than the other, which a static split left idle at the end (a quarter of the
  // attention's time in OpenMP's barrier at 512 slots).
  const int64_t per_batch = std::max<int64_t>(1, (2 * threads + a.b - 1) / a.b);
  // Chunk (b, s) is chunks[first[b] + s].
  std::vector<DecodeChunk> chunks;
  std::vector<int64_t> first(size_t(a.b)), slot_chunks(size_t(a.b));
  bool merge = false;
  for (int64_t b = 0; b < a.b; ++b) {
    first[size_t(b)] = int64_t(chunks.size());
    const int64_t lo = vis[size_t(b)].lo;
    const int64_t hi = std::max(lo, std::min(vis[size_t(b)].hi, a.slot_offset + a.t));
    // Slot chunks of >= 64 slots: shorter ones cost more in merging than they save. One row's
    // items, where they outnumber the threads, come in whole rounds of them: 3 chunks on 2
    // threads (161-192 visible slots) kept one thread idle for a third of the call.
    int64_t n = std::clamp<int64_t>(per_batch, 1, std::max<int64_t>(1, (hi - lo + 63) / 64));
    if (a.b == 1 && n > threads) n = n / threads * threads;
    const int64_t len = std::max<int64_t>(16, ((hi - lo + n - 1) / n + 15) / 16 * 16);
    slot_chunks[size_t(b)] = n;
    merge = merge || n > 1;
    for (int64_t i = 0; i < n; ++i) {
      // Empty trailing chunks (hi - lo not a multiple of len) keep the (b, s) indexing.
      const int64_t j0 = std::min(hi, lo + i * len), j1 = std::min(hi, lo + (i + 1) * len);
      chunks.push_back({b, j0, j1, n == 1});
    }
  }
  const int64_t rows = a.t * a.hq, nchunks = int64_t(chunks.size());
  // Partials live on the calling thread and are reused across calls: fresh pages cost ~10 us each.
  thread_local std::vector<float> part_buf;
  float* part = grow(part_buf, size_t(nchunks * rows * (a.d + 2)));
  float* pm = part;
  float* pl = part + nchunks * rows;
  float* pacc = part + 2 * nchunks * rows;
  parallel_for_stealing(nchunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      decode_chunk(a, q, k, v, mask, chunks[size_t(c)], pm + c * rows, pl + c * rows,
                   pacc + c * rows * a.d, out);
  });
  if (!merge) return;
  // Merge the slot chunks of each row of the batch rows whose slots were split.
  parallel_for(a.b * rows, [&](int64_t i0, int64_t i1) {
    std::vector<float> res(static_cast<size_t>(a.d));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / rows, r = i % rows, n = slot_chunks[size_t(b)];
      if (n == 1) continue;  // written by its chunk
      const int64_t c_begin = first[size_t(b)];
      float m = kNegInf;
      for (int64_t c = c_begin; c < c_begin + n; ++c) m = std::max(m, pm[c * rows + r]);
      std::fill(res.begin(), res.end(), 0.f);
      float lsum = 0.f;
      if (m != kNegInf) {
        for (int64_t c = c_begin; c < c_begin + n; ++c) {
          if (pm[c * rows + r] == kNegInf) continue;
          const float w = std::exp(pm[c * rows + r] - m);
          lsum += w * pl[c * rows + r];
          detail::axpy_f32(w, pacc + (c * rows + r) * a.d, res.data(), a.d);
        }
      }
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
      for (float& x : res) x *= inv;
      detail::store_row(res.data(), a.d, out.raw(), out.dtype(), (b * rows + r) * a.d);
    }
  });
}

// ------------------------------------------------------------------------------------------------
// Prefill path.

struct PrefillScratch {
  std::vector<float> qt, kf, vf, st, o, m, l, alpha, zero;
};

template <typename KT>
void prefill_item(const Dims& a, const float* q, const KT* k, const KT* v, const int32_t* mask,
                  const VisRange& vis, int64_t b, int64_t g, int64_t t0, int64_t tn, Tensor& out) {
  thread_local PrefillScratch sc;
  const int64_t rows = tn * a.g, rpad = (rows + 15) / 16 * 16, d = a.d;
  float* qt = grow(sc.qt, size_t(d * rpad));
  float* kf = grow(sc.kf, size_t(kKeyBlock * d));
  float* vf = grow(sc.vf, size_t(kKeyBlock * d));
  float* st = grow(sc.st, size_t(kKeyBlock * rpad));
  float* o = grow(sc.o, size_t(rpad * d));
  float* m = grow(sc.m, size_t(rpad));
  float* lsum = grow(sc.l, size_t(rpad));
  float* alpha = grow(sc.alpha, size_t(rpad));
  // Q^T [D, rpad], pre-scaled; row r = (t0 + r / G, head g * G + r % G). Built in 8 x 8 blocks
  // transposed in registers: a store per element was ~12 % of the AVX2 prefill attention (perf).
  float* zero = grow(sc.zero, size_t(d));
  std::fill(zero, zero + d, 0.f);
  for (int64_t r0 = 0; r0 < rpad; r0 += 8) {
    const float* src[8];
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t r = r0 + i;
      src[i] = r < rows ? q + (((b * a.t + t0 + r / a.g) * a.hq) + g * a.g + r % a.g) * d : zero;
    }
    for (int64_t x = 0; x < d; x += 8) {  // d % 16 == 0 on this path
      detail::transpose8x8(src, a.scale, qt + x * rpad + r0, rpad);
      for (const float*& p : src) p += 8;
    }
  }
  std::fill(m, m + rpad, kNegInf);
  std::fill(lsum, lsum + rpad, 0.f);
  std::fill(o, o + rpad * d, 0.f);
  const int64_t hi = std::min(vis.hi, a.slot_offset + t0 + tn);
  for (int64_t j0 = vis.lo; j0 < hi; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, hi - j0), nk_pad = (nk + 7) / 8 * 8;
    for (int64_t j = 0; j < nk_pad; ++j) {
      if (j < nk && mask[b * a.l + j0 + j]) {
        const int64_t off = ((b * a.l + j0 + j) * a.hkv + g) * d;
        detail::load_row(k, std::is_same_v<KT, float> ? DType::f32 : DType::bf16, off, d, kf + j * d);
        detail::load_row(v, std::is_same_v<KT, float> ? DType::f32 : DType::bf16, off, d, vf + j * d);
      } else {
        std::fill(kf + j * d, kf + (j + 1) * d, 0.f);
        std::fill(vf + j * d, vf + (j + 1) * d, 0.f);
      }
    }
    // Rows whose query precedes the whole block are untouched by it.
    const int64_t t_min = std::max<int64_t>(0, j0 - a.slot_offset - t0);
    const int64_t rv0 = std::min(rows, t_min * a.g) / 16, nr = rpad / 16 - rv0;
    if (nr <= 0) continue;
    const int64_t c0 = rv0 * 16;
    qk_rows(qt + c0, rpad, kf, nk_pad, d, st + c0, rpad, nr);
    // Mask: padded keys, kv_mask zeros, and causal (row r sees slot j iff j <= offset + t0 + r/G).
    for (int64_t j = 0; j < nk_pad; ++j) {
      float* sj = st + j * rpad;
      int64_t cut;  // rows [c0, cut) are masked for key j
      if (j >= nk || !mask[b * a.l + j0 + j])
        cut = rpad;
      else
        cut = std::clamp<int64_t>((j0 + j - a.slot_offset - t0) * a.g, c0, rpad);
      for (int64_t r = c0; r < cut; ++r) sj[r] = kNegInf;
    }
    softmax_update(st, rpad, nk_pad, c0, m, lsum, alpha);
    pv_update(st, rpad, nk_pad, vf, d, o, alpha, c0, rows);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = lsum[r] > 0.f ? 1.f / lsum[r] : 0.f;
    float* orow = o + r * d;
    for (int64_t x = 0; x < d; ++x) orow[x] *= inv;
    const int64_t dst = ((b * a.t + t0 + r / a.g) * a.hq + g * a.g + r % a.g) * d;
    detail::store_row(orow, d, out.raw(), out.dtype(), dst);
  }
}

template <typename KT>
void attention_prefill(const Dims& a, const float* q, const KT* k, const KT* v,
                       const int32_t* mask, const std::vector<VisRange>& vis, Tensor& out) {
  const int64_t tq = std::max<int64_t>(1, kRowsMax / a.g);
  const int64_t qblocks = (a.t + tq - 1) / tq;
  const int64_t items = a.b * a.hkv * qblocks;
  detail::parallel_items_cyclic(items, [&](int64_t i) {
    const int64_t qb = i % qblocks, bg = i / qblocks, g = bg % a.hkv, b = bg / a.hkv;
    const int64_t t0 = qb * tq;
    prefill_item(a, q, k, v, mask, vis[size_t(b)], b, g, t0, std::min(tq, a.t - t0), out);
  });
}
#endif  // KILN_SIMD_VEC

// ------------------------------------------------------------------------------------------------
// Prefill through bf16 GEMMs (AVX512_BF16 builds).
//
// K and V are bf16 in the cache; Q (pre-scaled) and P = exp(S - max) are rounded once to bf16 for
// S = Q K^T and O = P V, which accumulate in f32, and the softmax between them runs in f32. That is
// the precision of the tensors a bf16 model stores around attention (Transformers' bf16 attention
// also takes bf16 Q and P, and rounds S and O to bf16 as well), and the error it adds is of the
// order of the output's own bf16 rounding: tests/ops/attention_test.cpp bounds it element by
// element. O is divided by the sum of the rounded P, so each row's weights still sum to 1.
// (Until the seventeenth session Q and P were split into bf16 hi/lo halves to stay f32-class, for
// twice the FLOPs: a third of this path's time; docs/notes/cpu-attention.md.)
//
// The GEMMs are kiln's own (gemm_bf16_packed) on K and V packed once per batch row as its B
// panels, and one work item (kv head, block of queries) runs S, the softmax and O on one thread:
// two parallel regions per batch row. (oneDNN's batched matmuls over the kv heads, each a region
// of its own with three more for the softmax and the splits, spent ~30 % of a 128-token prefill's
// attention waiting in OpenMP barriers.)
#ifdef __AVX512BF16__

// Queries per block (x G rows per kv head). On the f32 FMA tiles (12 rows) a block of 12 queries
// is whole tiles for any G: at G = 2, 24 rows against 16 queries' 12 + 12 + 8, which ran the
// Emerald Rapids VM's T = 512 prefill attention 1-9 % faster (6 was slower again). On vdpbf16ps
// (Zen 5) 16 was the best of 8-64 measured.
constexpr int64_t kGemmQueryBlockMax = 16;
int64_t gemm_query_block() {
  return detail::bf16_gemm_arithmetic() == detail::Bf16GemmArithmetic::kF32Fma ? 12 : 16;
}
constexpr int64_t kGemmMinT = 32;         // below this the f32 kernel's setup is cheaper
constexpr int64_t kPanel = detail::kBlockN;  // columns of a packed B panel

// Scratch slots of detail::thread_scratch (0-2 belong to linear and gemm, 9-10 to gemm_bf16).
enum GemmScratch { kScratchK = 3, kScratchV, kScratchQ, kScratchS, kScratchP, kScratchO };

inline __mmask16 lanes_below(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
}

// The softmax of one query row, in two passes so that an item's rows share each transposing
// reduction (hreduce16): scores s over n keys, of which keys [0, causal) with km != 0 are
// visible (km is null when every slot is). softmax_max_lanes gives lanes whose max is the row's
// maximum; softmax_exp_lanes writes p = bf16(exp(s - m)) for visible keys and 0 elsewhere, and
// gives lanes whose sum is the sum of the rounded p (0 when no key is visible: m = -inf). p is
// rounded by vcvtneps2bf16, which flushes a denormal (a weight under 2^-126 beside the row
// maximum's 1) to 0; the sum is of the stored values, so the weights still sum to 1.
inline __mmask16 visible_keys(const int32_t* km, int64_t causal, int64_t j) {
  const __mmask16 tail = lanes_below(causal - j);
  if (!km) return tail;
  return _mm512_mask_cmpneq_epi32_mask(tail, _mm512_maskz_loadu_epi32(tail, km + j),
                                       _mm512_setzero_si512());
}

// Where no slot is masked (km null) both passes take a row's whole vectors of visible keys
// unmasked, and only its last part through visible_keys, whose scalar mask arithmetic and mask
// moves every vector had paid: the attention took 0.975 of the time at T = 512 and 0.991 at
// T = 128 (bench_attention_ab, 400 and 3000 rounds; same bits).
__m512 softmax_max_lanes(const float* s, const int32_t* km, int64_t causal) {
  __m512 vmax = _mm512_set1_ps(kNegInf);
  int64_t j = 0;
  if (!km)
    for (; j + 16 <= causal; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  for (; j < causal; j += 16) {
    const __mmask16 vis = visible_keys(km, causal, j);
    vmax = _mm512_mask_max_ps(vmax, vis, vmax, _mm512_maskz_loadu_ps(vis, s + j));
  }
  return vmax;
}

__m512 softmax_exp_lanes(const float* s, const int32_t* km, int64_t causal, int64_t n, float m,
                         bf16_t* p) {
  int64_t j = 0;
  __m512 vsum = _mm512_setzero_ps();
  if (m != kNegInf) {
    const __m512 vm = _mm512_set1_ps(m);
    auto add_rounded = [&vsum](__m256i h) {  // the sum of what is stored
      const __m512i widened = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
      vsum = _mm512_add_ps(vsum, _mm512_castsi512_ps(widened));
    };
    if (!km)
      for (; j + 16 <= causal; j += 16) {
        const __m512 e = detail::exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), h);
        add_rounded(h);
      }
    for (; j < causal; j += 16) {
      const __mmask16 vis = visible_keys(km, causal, j);
      const __m512 e = _mm512_maskz_mov_ps(
          vis, detail::exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(vis, s + j), vm)));
      const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e));
      _mm256_mask_storeu_epi16(p + j, lanes_below(causal - j), h);
      add_rounded(h);
    }
    j = causal;
  }
  std::fill(p + j, p + n, bf16_t(0));
  return vsum;
}

// q is f32 [B, T, Hq, D], or null where q_grouped holds it as the kernel's operand already
// (bf16 [B, Hkv, T, G, D], scaled: attention() documents it).
void attention_prefill_gemm(const Dims& a, const float* q, const bf16_t* q_grouped,
                            const bf16_t* k, const bf16_t* v, const int32_t* mask,
                            const std::vector<VisRange>& vis, Tensor& out) {
  const int64_t H = a.hkv, G = a.g, D = a.d;
  const int64_t query_block = gemm_query_block();
  const int64_t blocks = (a.t + query_block - 1) / query_block;
  for (int64_t b = 0; b < a.b; ++b) {
    const int64_t lo = vis[size_t(b)].lo;
    const int64_t hi = std::max(lo, std::min(vis[size_t(b)].hi, a.slot_offset + a.t));
    const int64_t lfull = hi - lo;
    const int32_t* km = mask + b * a.l + lo;
    // The softmax reads the mask only where a slot in [lo, hi) is masked (left padding).
    const int32_t* km_holes = std::all_of(km, km + lfull, [](int32_t x) { return x != 0; }) ? nullptr : km;
    // This row's visible slots [lo, hi) of each kv head, packed as the two GEMMs' B panels.
    const int64_t k_panel = D * kPanel;
    const int64_t k_head = (std::max<int64_t>(lfull, 1) + kPanel - 1) / kPanel * k_panel;
    const int64_t v_pairs = (std::max<int64_t>(lfull, 1) + 1) / 2;
    const int64_t v_panel = v_pairs * 2 * kPanel;
    const int64_t v_head = detail::round_up(D, kPanel) / kPanel * v_panel;
    auto* kp = static_cast<bf16_t*>(detail::thread_scratch(kScratchK, size_t(H * k_head) * 2));
    auto* vp = static_cast<bf16_t*>(detail::thread_scratch(kScratchV, size_t(H * v_head) * 2));
    // This row's q, pre-scaled and rounded to bf16, as each kv head's GEMM rows: [H][T][G][D], so
    // an item's rows (t, g) are one contiguous matrix. Converted here from f32 q, unless the qkv
    // epilogue wrote it so (q_grouped).
    bf16_t* const q_converted =
        q_grouped ? nullptr
                  : static_cast<bf16_t*>(detail::thread_scratch(kScratchQ, size_t(a.t * a.hq * D) * 2));
    const bf16_t* const qb = q_grouped ? q_grouped + b * a.t * a.hq * D : q_converted;
    // One pass per kv head prepares its items' operands: q converted, K and V packed. A thread
    // prepares the heads whose items it starts on (parallel_for_stealing below begins each thread
    // on its own contiguous run, as this split does), so it reads its own writes. Its q rows come
    // t by t, the thread's heads side by side (G * D * 4 bytes a head; the items' own strided
    // reads of f32 q, 1 KiB every 8 KiB, had waited on memory). Against whole q rows per thread
    // in a separate pass: ~6-10 % faster at T = 128, ~5 % slower at T = 512 with q cold, where a
    // thread reading half of every row restarts the prefetcher at each page
    // (docs/notes/cpu-attention.md). A masked slot's value is zeroed in the panels (P is 0 there,
    // and 0 x NaN from a never-written slot would still be NaN); its key's scores are never read.
    const int64_t slot_stride = H * D;
    parallel_for(H, [&, T = a.t, hq = a.hq, scale = a.scale](int64_t h0, int64_t h1) {
      const __m512 vscale = _mm512_set1_ps(scale);
      const int64_t run = G * D;  // one head's q values of one query
      bf16_t* const qdst = q_converted;  // locals: the stores below may alias a captured reference
      for (int64_t t = 0; t < (qdst ? T : 0); ++t) {
        const float* src = q + ((b * T + t) * hq + h0 * G) * D;
        for (int64_t h = h0; h < h1; ++h, src += run) {
          bf16_t* dst = qdst + (h * T + t) * run;
          for (int64_t c = 0; c < run; c += 16)
            detail::store_bf16x16(dst + c, _mm512_mul_ps(_mm512_loadu_ps(src + c), vscale));
        }
      }
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t first = (b * a.l + lo) * slot_stride + h * D;
        auto* kh = reinterpret_cast<uint16_t*>(kp + h * k_head);
        auto* vh = reinterpret_cast<uint16_t*>(vp + h * v_head);
        for (int64_t j = 0; j * kPanel < lfull; ++j)
          detail::pack_b_panels(reinterpret_cast<const uint16_t*>(k + first + j * kPanel * slot_stride),
                                slot_stride, true, D, std::min(kPanel, lfull - j * kPanel),
                                kh + j * k_panel);
        detail::pack_b_panels(reinterpret_cast<const uint16_t*>(v + first), slot_stride, false,
                              lfull, D, vh);
        for (int64_t s = 0; s < lfull; ++s) {
          if (km[s] != 0) continue;
          for (int64_t j = 0; j * kPanel < D; ++j) {
            uint16_t* pair = vh + j * v_panel + (s / 2) * 2 * kPanel;
            for (int64_t c = 0; c < kPanel; ++c) pair[2 * c + s % 2] = 0;
          }
        }
      }
    });
    bf16_t* out_bf16 = out.dtype() == DType::bf16 ? static_cast<bf16_t*>(out.raw()) : nullptr;
    float* out_f32 = out_bf16 ? nullptr : static_cast<float*>(out.raw());
    // Items (kv head h, query block): a head's blocks are adjacent, latest (most keys) first, so
    // each thread's share of heads costs the same and a thief takes the cheapest items.
    parallel_for_stealing(H * blocks, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t h = item / blocks, t0 = (blocks - 1 - item % blocks) * query_block;
        // Rows i = (t, g) of this kv head.
        const int64_t tb = std::min(query_block, a.t - t0), M = tb * G;
        const int64_t lk = std::clamp<int64_t>(a.slot_offset + t0 + tb - lo, 0, lfull);  // keys
        const int64_t lkp = detail::round_up(std::max<int64_t>(lk, 1), 2);
        auto row_of = [&](int64_t i) {  // out offset of row i
          return ((b * a.t + t0 + i / G) * a.hq + h * G + i % G) * D;
        };
        if (lk == 0) {  // no visible key: zeros, as the other kernels write
          std::vector<float> zeros(static_cast<size_t>(D), 0.f);
          for (int64_t i = 0; i < M; ++i)
            detail::store_row(zeros.data(), D, out.raw(), out.dtype(), row_of(i));
          continue;
        }
        auto* sc = static_cast<float*>(detail::thread_scratch(kScratchS, size_t(M * lk) * 4));
        auto* ps = static_cast<bf16_t*>(detail::thread_scratch(kScratchP, size_t(M * lkp) * 2));
        auto* os = static_cast<float*>(detail::thread_scratch(kScratchO, size_t(M * D) * 4));
        const bf16_t* qs = qb + (h * a.t + t0) * G * D;
        // S [M, lk] = Q [M, D] x K^T
        bool ran = detail::gemm_bf16_packed(reinterpret_cast<const uint16_t*>(qs), M, D,
                                            reinterpret_cast<const uint16_t*>(kp + h * k_head),
                                            lk, sc, false, nullptr);
        // P = softmax(S) per row, rows 16 at a time through each reduction.
        auto causal = [&](int64_t i) {  // row i's keys [0, causal) are before its query
          return std::clamp<int64_t>(a.slot_offset + t0 + i / G - lo + 1, 0, lk);
        };
        alignas(64) float sums[kGemmQueryBlockMax * kRowsMax];
        for (int64_t r0 = 0; r0 < M; r0 += 16) {
          __m512 lanes[16];
          for (int64_t r = 0; r < 16; ++r)
            lanes[r] = r0 + r < M ? softmax_max_lanes(sc + (r0 + r) * lk, km_holes, causal(r0 + r))
                                  : _mm512_set1_ps(kNegInf);
          alignas(64) float row_max[16];
          _mm512_store_ps(row_max, hmax16(lanes));
          for (int64_t r = 0; r < 16; ++r)
            lanes[r] = r0 + r < M ? softmax_exp_lanes(sc + (r0 + r) * lk, km_holes, causal(r0 + r),
                                                      lkp, row_max[r], ps + (r0 + r) * lkp)
                                  : _mm512_setzero_ps();
          _mm512_store_ps(sums + r0, hsum16(lanes));
        }
        // O [M, D] = P [M, lkp] x V [lkp, D]
        ran = ran && detail::gemm_bf16_packed(reinterpret_cast<const uint16_t*>(ps), M, lkp,
                                              reinterpret_cast<const uint16_t*>(vp + h * v_head),
                                              D, os, false, nullptr, v_panel);
        // An invariant (even K, AVX512_BF16 compiled in), checked where checks are on.
        KILN_DCHECK(ran, "attention: the bf16 GEMM did not run (D = ", D, ", keys ", lkp, ")");
        (void)ran;
        // O / sum, scaled as it is stored (D % 16 == 0 on this path). The output pointers and D
        // are locals, so the stores (which may alias any captured reference) do not make the
        // compiler reload them for every 16 values.
        bf16_t* const ob = out_bf16;
        float* const of = out_f32;
        const int64_t d = D;
        for (int64_t i = 0; i < M; ++i) {
          const __m512 inv = _mm512_set1_ps(sums[i] > 0.f ? 1.f / sums[i] : 0.f);
          const float* orow = os + i * d;
          const int64_t at = row_of(i);  // once a row: the lambda's divide would not be hoisted
          if (ob)
            for (int64_t c = 0; c < d; c += 16)
              detail::store_bf16x16(ob + at + c, _mm512_mul_ps(_mm512_loadu_ps(orow + c), inv));
          else
            for (int64_t c = 0; c < d; c += 16)
              _mm512_storeu_ps(of + at + c, _mm512_mul_ps(_mm512_loadu_ps(orow + c), inv));
        }
      }
    });
  }
}
#endif  // __AVX512BF16__

// Whether a prefill over a bf16 cache runs on kiln's bf16 GEMM (attention_prefill_gemm). Decode's
// few rows (T * G <= 8) never do.
bool runs_on_gemm(const Dims& a) {
#ifdef __AVX512BF16__
  return a.d % 16 == 0 && a.g <= kRowsMax && a.t >= kGemmMinT;
#else
  (void)a;
  return false;
#endif
}

template <typename KT>
void attention_typed(const Dims& a, const float* q, const KT* k, const KT* v, const int32_t* mask,
                     const std::vector<VisRange>& vis, Tensor& out) {
#ifdef KILN_SIMD_VEC
  if (a.d % 16 == 0 && a.t * a.g <= 8) return attention_decode(a, q, k, v, mask, vis, out);
#endif
#ifdef __AVX512BF16__
  if constexpr (std::is_same_v<KT, bf16_t>) {
    if (runs_on_gemm(a)) return attention_prefill_gemm(a, q, nullptr, k, v, mask, vis, out);
  }
#endif
#ifdef KILN_SIMD_VEC
  if (a.d % 16 == 0 && a.g <= kRowsMax) return attention_prefill(a, q, k, v, mask, vis, out);
#endif
  attention_scalar(a, q, k, v, mask, vis, out);
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_mask,
               int64_t slot_offset, Tensor& out) {
  // q: f32 [B, T, Hq, D], or grouped: bf16 [B, Hkv, T, G, D] (kernels.h).
  const bool grouped = q.ndim() == 5 && q.dtype() == DType::bf16;
  KILN_CHECK(grouped || (q.ndim() == 4 && q.dtype() == DType::f32),
             "attention: q must be f32 [B, T, Hq, D] or bf16 [B, Hkv, T, G, D], got ",
             dtype_name(q.dtype()), " ", shape_str(q.shape()));
  KILN_CHECK(k.ndim() == 4 && k.shape() == v.shape() && k.dtype() == v.dtype() &&
                 detail::is_act(k.dtype()),
             "attention: k, v must be act [B, L, Hkv, D] of one dtype, got ", shape_str(k.shape()),
             " and ", shape_str(v.shape()));
  Dims a;
  a.b = q.dim(0);
  a.t = q.dim(grouped ? 2 : 1);
  a.hq = grouped ? q.dim(1) * q.dim(3) : q.dim(2);
  a.d = q.dim(-1);
  a.l = k.dim(1);
  a.hkv = k.dim(2);
  KILN_CHECK(k.dim(0) == a.b && k.dim(3) == a.d && a.hkv > 0 && a.hq % a.hkv == 0 &&
                 (!grouped || q.dim(1) == a.hkv),
             "attention: q ", shape_str(q.shape()), " vs k ", shape_str(k.shape()));
  KILN_CHECK(kv_mask.dtype() == DType::i32 && kv_mask.shape() == Shape({a.b, a.l}),
             "attention: kv_mask must be i32 [", a.b, ", ", a.l, "], got ", shape_str(kv_mask.shape()));
  const Shape out_shape{a.b, a.t, a.hq, a.d};
  KILN_CHECK(out.shape() == out_shape && detail::is_act(out.dtype()),
             "attention: out must be act ", shape_str(out_shape), ", got ", shape_str(out.shape()));
  KILN_CHECK(slot_offset >= 0 && slot_offset + a.t <= a.l, "attention: slots [", slot_offset, ", ",
             slot_offset + a.t, ") outside cache length ", a.l);
  a.g = a.hq / a.hkv;
  a.slot_offset = slot_offset;
  a.scale = attention_scale(a.d);
  KILN_CHECK(!grouped || (k.dtype() == DType::bf16 && runs_on_gemm(a)),
             "attention: a grouped q is for the bf16 GEMM prefill kernel, which does not take T = ",
             a.t, ", G = ", a.g, ", D = ", a.d, " over a ", dtype_name(k.dtype()), " cache");
  if (q.numel() == 0) return;
  const std::vector<VisRange> vis = visible_ranges(kv_mask);
  const int32_t* mask = kv_mask.data<int32_t>();
#ifdef __AVX512BF16__
  if (grouped)
    return attention_prefill_gemm(a, nullptr, q.data<bf16_t>(), k.data<bf16_t>(), v.data<bf16_t>(),
                                  mask, vis, out);
#endif
  if (k.dtype() == DType::bf16)
    attention_typed(a, q.data<float>(), k.data<bf16_t>(), v.data<bf16_t>(), mask, vis, out);
  else
    attention_typed(a, q.data<float>(), k.data<float>(), v.data<float>(), mask, vis, out);
}

bool attention_takes_grouped_q(int64_t t, int64_t hq, int64_t hkv, int64_t d, DType cache) {
  if (cache != DType::bf16 || hkv <= 0 || hq % hkv != 0) return false;
  Dims a{};
  a.t = t;
  a.hq = hq;
  a.hkv = hkv;
  a.d = d;
  a.g = hq / hkv;
  return runs_on_gemm(a);
}

}  // namespace kiln::cpu
