// Rotary embeddings (rotate_half convention) and the fused attention prologue
// qk_norm_rope_cache. The fused kernel calls the same per-row helpers as the unfused kernels
// (rms_norm_row, rope_row, store_row), or at head_dim 64 and 128 their operations in the same
// order on a head held in registers, so both paths give identical bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/norm.h"
#include "kiln/backends/cpu/rope.h"

namespace kiln::cpu {

namespace detail {

void rope_row(float* x, const float* cs, int64_t d, bool inverse) {
  const int64_t half = d / 2;
  const float* c = cs;
  const float* s = cs + half;
  float* x1 = x;
  float* x2 = x + half;
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  for (; i + kLanes <= half; i += kLanes) {
    const VecF a = vload(x1 + i), b = vload(x2 + i), vc = vload(c + i), vs = vload(s + i);
    const VecF ac = vmul(a, vc), bc = vmul(b, vc), as = vmul(a, vs), bs = vmul(b, vs);
    if (!inverse) {
      vstore(x1 + i, vsub(ac, bs));
      vstore(x2 + i, vadd(bc, as));
    } else {
      vstore(x1 + i, vadd(ac, bs));
      vstore(x2 + i, vsub(bc, as));
    }
  }
#endif
  for (; i < half; ++i) {
    float a = x1[i], b = x2[i];
    const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
    if (!inverse) {
      x1[i] = ac - bs;
      x2[i] = bc + as;
    } else {
      x1[i] = ac + bs;
      x2[i] = bc - as;
    }
  }
}

void check_rope_args(const char* op, const Tensor& x, const Tensor& positions,
                     const Tensor& cos_sin) {
  KILN_CHECK(x.ndim() == 4 && x.dtype() == DType::f32, op, ": x must be f32 [B, T, H, D], got ",
             shape_str(x.shape()));
  check_rope_tables(op, x.dim(0), x.dim(1), x.dim(3), positions, cos_sin);
}

void check_rope_tables(const char* op, int64_t b, int64_t t, int64_t d, const Tensor& positions,
                       const Tensor& cos_sin) {
  KILN_CHECK(positions.dtype() == DType::i32 && positions.ndim() == 2 && positions.dim(0) == b &&
                 positions.dim(1) == t,
             op, ": positions must be i32 [B, T], got ", shape_str(positions.shape()));
  KILN_CHECK(cos_sin.dtype() == DType::f32 && cos_sin.ndim() == 2 && cos_sin.dim(1) == d &&
                 d % 2 == 0,
             op, ": cos_sin must be f32 [P, D] with even D, got ", shape_str(cos_sin.shape()));
  const int32_t* p = positions.data<int32_t>();
  for (int64_t i = 0; i < positions.numel(); ++i)
    KILN_CHECK(p[i] >= 0 && p[i] < cos_sin.dim(0), op, ": position ", p[i], " outside table of ",
               cos_sin.dim(0));
}

void rope_apply(Tensor& x, const Tensor& positions, const Tensor& cos_sin, bool inverse) {
  const int64_t bt = x.dim(0) * x.dim(1), heads = x.dim(2), d = x.dim(3);
  const int32_t* pos = positions.data<int32_t>();
  const float* table = cos_sin.data<float>();
  float* px = x.data<float>();
  parallel_for(
      bt,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* cs = table + int64_t(pos[r]) * d;
          for (int64_t h = 0; h < heads; ++h) rope_row(px + (r * heads + h) * d, cs, d, inverse);
        }
      },
      std::max<int64_t>(1, 8192 / std::max<int64_t>(heads * d, 1)));
}

}  // namespace detail

void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin) {
  detail::check_rope_args("rope", x, positions, cos_sin);
  detail::rope_apply(x, positions, cos_sin, /*inverse=*/false);
}

void rope_backward(Tensor& dy, const Tensor& positions, const Tensor& cos_sin) {
  detail::check_rope_args("rope_backward", dy, positions, cos_sin);
  detail::rope_apply(dy, positions, cos_sin, /*inverse=*/true);
}

void qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                        const Tensor& positions, const Tensor& cos_sin, int64_t slot_offset,
                        Tensor& q_out, Tensor& k_cache, Tensor& v_cache) {
  KILN_CHECK(qkv.dtype() == DType::f32 && qkv.ndim() == 2,
             "qk_norm_rope_cache: qkv must be f32 [B*T, (Hq + 2*Hkv) * D], got ",
             shape_str(qkv.shape()));
  const auto e = detail::QkvEpilogue::make("qk_norm_rope_cache", qkv.dim(0), qkv.dim(1), q_norm,
                                           k_norm, eps, positions, cos_sin, slot_offset, q_out,
                                           k_cache, v_cache);
  const int64_t heads = e.hq + 2 * e.hkv, row = heads * e.d;
  const float* src = qkv.data<float>();
  constexpr int64_t kRowsAhead = 3;  // of 16 KiB at Qwen3-0.6B; 2-4 measured alike
  parallel_for(qkv.dim(0), [&](int64_t r0, int64_t r1) {
    std::vector<float> buf(static_cast<size_t>(e.d));
    for (int64_t r = r0; r < r1; ++r) {
      const float* in = src + r * row;
      if (r + kRowsAhead < r1) detail::prefetch_bytes(in + kRowsAhead * row, row * 4);
      for (int64_t h = 0; h < heads; ++h) {
        std::copy(in + h * e.d, in + (h + 1) * e.d, buf.data());
        e.apply_rows(r, 1, h, buf.data());
      }
    }
  });
}

namespace detail {

QkvEpilogue QkvEpilogue::make(const char* op, int64_t rows, int64_t cols, const Tensor& q_norm,
                              const Tensor& k_norm, float eps, const Tensor& positions,
                              const Tensor& cos_sin, int64_t slot_offset, Tensor& q_out,
                              Tensor& k_cache, Tensor& v_cache) {
  // q as attention() takes it: f32 [B, T, Hq, D], or grouped, bf16 [B, Hkv, T, G, D].
  const bool grouped = q_out.ndim() == 5 && q_out.dtype() == DType::bf16;
  KILN_CHECK(grouped || (q_out.ndim() == 4 && q_out.dtype() == DType::f32), op,
             ": q_out must be f32 [B, T, Hq, D] or bf16 [B, Hkv, T, G, D], got ",
             dtype_name(q_out.dtype()), " ", shape_str(q_out.shape()));
  const int64_t b = q_out.dim(0), t = q_out.dim(grouped ? 2 : 1), d = q_out.dim(-1),
                hq = grouped ? q_out.dim(1) * q_out.dim(3) : q_out.dim(2);
  check_rope_tables(op, b, t, d, positions, cos_sin);
  KILN_CHECK(k_cache.ndim() == 4 && k_cache.shape() == v_cache.shape() && k_cache.dim(0) == b &&
                 k_cache.dim(3) == d && k_cache.dtype() == v_cache.dtype() &&
                 is_act(k_cache.dtype()),
             op, ": caches must be act [B, L, Hkv, D], got ", shape_str(k_cache.shape()), " and ",
             shape_str(v_cache.shape()));
  const int64_t l = k_cache.dim(1), hkv = k_cache.dim(2);
  KILN_CHECK(!grouped || (q_out.dim(1) == hkv && attention_takes_grouped_q(t, hq, hkv, d,
                                                                           k_cache.dtype())),
             op, ": a grouped q_out ", shape_str(q_out.shape()), " is not what attention takes for ",
             hkv, " kv heads in a ", dtype_name(k_cache.dtype()), " cache");
  KILN_CHECK(rows == b * t && cols == (hq + 2 * hkv) * d, op, ": the qkv projection must be [",
             b * t, ", ", (hq + 2 * hkv) * d, "], got [", rows, ", ", cols, "]");
  KILN_CHECK(q_norm.defined() == k_norm.defined(), op,
             ": q_norm and k_norm must both be given or both absent");
  KILN_CHECK(!q_norm.defined() || (q_norm.numel() == d && k_norm.numel() == d), op,
             ": q_norm/k_norm must be [", d, "]");
  KILN_CHECK(slot_offset >= 0 && slot_offset + t <= l, op, ": slots [", slot_offset, ", ",
             slot_offset + t, ") outside cache length ", l);
  QkvEpilogue e;
  e.hq = hq;
  e.hkv = hkv;
  e.d = d;
  e.norm = q_norm.defined();
  if (e.norm) {
    e.norm_w = weight_f32(q_norm);
    const auto kw = weight_f32(k_norm);
    e.norm_w.insert(e.norm_w.end(), kw.begin(), kw.end());
  }
  e.eps = eps;
  e.positions = positions.data<int32_t>();
  e.cos_sin = cos_sin.data<float>();
  e.t = t;
  e.l = l;
  e.slot_offset = slot_offset;
  e.q = q_out.raw();
  e.q_grouped = grouped;
  e.q_scale = attention_scale(d);
  e.k_cache = k_cache.raw();
  e.v_cache = v_cache.raw();
  e.cache_dtype = k_cache.dtype();
  return e;
}

namespace {

#ifdef KILN_SIMD_VEC
// QkvEpilogue::apply_rows for a head_dim D known at compile time, with the row helpers'
// operations in their order (dot_f32's two accumulators, rms_inv, rms_norm_row, rope_row), so the
// bits are theirs. A head is loaded into registers and stored once: through the helpers, each
// loading and storing the row, a head took 46 ns, in registers 28 (one thread, in cache). And
// every row's norm factor is taken before any row is scaled, so that the rows' chains of sum of
// squares, horizontal sum and square root (each step waiting on the last) overlap: with the qkv
// GEMM's tiles of 6 rows, a prefill of 512 tokens took 1.9 % less time, of 128 tokens 0.3-1.1 %
// (docs/benchmarks.md, thirty-seventh session).
template <int64_t D>
void apply_rows_in_registers(const QkvEpilogue& e, int64_t m0, int64_t rows, int64_t head,
                             const float* x) {
  static_assert(D % (2 * kLanes) == 0);
  constexpr int V = int(D / kLanes), H = V / 2;
  auto store = [](const VecF (&v)[V], void* base, DType t, int64_t offset) {
    if (t == DType::f32)
      for (int i = 0; i < V; ++i) vstore(static_cast<float*>(base) + offset + i * kLanes, v[i]);
    else
      for (int i = 0; i < V; ++i) vstore(static_cast<bf16_t*>(base) + offset + i * kLanes, v[i]);
  };
  auto slot = [&](int64_t m) { return (m / e.t * e.l + e.slot_offset + m % e.t) * e.hkv * D; };
  const bool is_q = head < e.hq, is_v = head >= e.hq + e.hkv;
  constexpr int64_t kMaxRows = 16;
  float scale[kMaxRows];
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int64_t n = std::min(kMaxRows, rows - r0);
    if (e.norm && !is_v)
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + (r0 + r) * D;
        VecF acc0 = vzero(), acc1 = vzero();
        for (int i = 0; i < V; i += 2) {
          const VecF a = vload(xr + i * kLanes), b = vload(xr + (i + 1) * kLanes);
          acc0 = vfmadd(a, a, acc0);
          acc1 = vfmadd(b, b, acc1);
        }
        scale[r] = 1.f / std::sqrt(vreduce_add(vadd(acc0, acc1)) / float(D) + e.eps);
      }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t m = m0 + r0 + r;
      const float* xr = x + (r0 + r) * D;
      VecF v[V];
      for (int i = 0; i < V; ++i) v[i] = vload(xr + i * kLanes);
      if (is_v) {  // as projected
        store(v, e.v_cache, e.cache_dtype, slot(m) + (head - e.hq - e.hkv) * D);
        continue;
      }
      if (e.norm) {
        const VecF vr = vset1(scale[r]);
        const float* w = e.norm_w.data() + (is_q ? 0 : D);
        for (int i = 0; i < V; ++i) v[i] = vmul(vmul(v[i], vr), vload(w + i * kLanes));
      }
      const float* cs = e.cos_sin + int64_t(e.positions[m]) * D;
      for (int i = 0; i < H; ++i) {
        const VecF a = v[i], b = v[i + H], c = vload(cs + i * kLanes),
                   s = vload(cs + D / 2 + i * kLanes);
        const VecF ac = vmul(a, c), bc = vmul(b, c), as = vmul(a, s), bs = vmul(b, s);
        v[i] = vsub(ac, bs);
        v[i + H] = vadd(bc, as);
      }
      if (is_q && e.q_grouped) {  // scaled and rounded as the attention kernel would
        const VecF vs = vset1(e.q_scale);
        for (int i = 0; i < V; ++i) v[i] = vmul(v[i], vs);
        store(v, e.q, DType::bf16, e.q_offset(m, head));
      } else if (is_q)
        store(v, e.q, DType::f32, e.q_offset(m, head));
      else
        store(v, e.k_cache, e.cache_dtype, slot(m) + (head - e.hq) * D);
    }
  }
}
#endif

}  // namespace

void QkvEpilogue::apply_rows(int64_t m0, int64_t rows, int64_t head, float* x) const {
#ifdef KILN_SIMD_VEC
  if (d == 128) return apply_rows_in_registers<128>(*this, m0, rows, head, x);
  if (d == 64) return apply_rows_in_registers<64>(*this, m0, rows, head, x);
#endif
  for (int64_t r = 0; r < rows; ++r, x += d) {
    const int64_t m = m0 + r;
    const int64_t slot = (m / t * l + slot_offset + m % t) * hkv * d;
    if (head >= hq + hkv) {  // v: as projected
      store_row(x, d, v_cache, cache_dtype, slot + (head - hq - hkv) * d);
      continue;
    }
    const bool is_q = head < hq;
    if (norm) rms_norm_row(x, norm_w.data() + (is_q ? 0 : d), d, eps, false, x);
    rope_row(x, cos_sin + int64_t(positions[m]) * d, d, false);
    if (is_q && q_grouped) {
      for (int64_t i = 0; i < d; ++i) x[i] *= q_scale;
      store_row(x, d, q, DType::bf16, q_offset(m, head));
    } else if (is_q)
      std::copy(x, x + d, static_cast<float*>(q) + q_offset(m, head));
    else
      store_row(x, d, k_cache, cache_dtype, slot + (head - hq) * d);
  }
}

}  // namespace detail

}  // namespace kiln::cpu
