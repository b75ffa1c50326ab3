// Backward kernels for training: RMSNorm, SwiGLU, attention, embedding (rope_backward lives in
// rope.cpp beside rope). Gradients are f32. Reductions over rows (dw, dk/dv, dtable) are split so
// that each output element is owned by one work item and summed in a fixed order: results do not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/norm.h"

namespace kiln::cpu {

using detail::is_act;

void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx,
                       Tensor& dw) {
  KILN_CHECK(is_act(x.dtype()) && is_act(w.dtype()) && w.ndim() == 1 && x.ndim() >= 1 &&
                 x.dim(-1) == w.dim(0),
             "rms_norm_backward: x ", shape_str(x.shape()), ", w ", shape_str(w.shape()));
  KILN_CHECK(dy.dtype() == DType::f32 && dx.dtype() == DType::f32 && dw.dtype() == DType::f32 &&
                 dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == w.numel(),
             "rms_norm_backward: dy, dx, dw must be f32 of x's and w's sizes");
  const int64_t h = w.dim(0), rows = h > 0 ? x.numel() / h : 0;
  const std::vector<float> wf = detail::weight_f32(w);
  // Row blocks of fixed size own their dw partial, summed in block order afterwards.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<float> partial(static_cast<size_t>(blocks * h), 0.f);
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    std::vector<float> xr(static_cast<size_t>(h)), gw(static_cast<size_t>(h));
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* dwp = partial.data() + blk * h;
      for (int64_t r = blk * kBlock; r < std::min(rows, (blk + 1) * kBlock); ++r) {
        detail::load_row(x.raw(), x.dtype(), r * h, h, xr.data());
        const float inv = detail::rms_inv(xr.data(), h, eps);
        const float* g = pdy + r * h;
        for (int64_t i = 0; i < h; ++i) gw[size_t(i)] = g[i] * wf[size_t(i)];
        const float c = detail::dot_f32(gw.data(), xr.data(), h) * inv * inv * inv / float(h);
        for (int64_t i = 0; i < h; ++i) dwp[i] += g[i] * xr[size_t(i)] * inv;
        float* out = pdx + r * h;
        for (int64_t i = 0; i < h; ++i) out[i] = inv * gw[size_t(i)] - c * xr[size_t(i)];
      }
    }
  });
  float* pdw = dw.data<float>();
  parallel_for(h, [&](int64_t i0, int64_t i1) {
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t i = i0; i < i1; ++i) pdw[i] += partial[size_t(blk * h + i)];
  });
}

void silu_mul_backward(const Tensor& gate_up, const Tensor& dy, Tensor& dgate_up) {
  KILN_CHECK(gate_up.ndim() == 2 && gate_up.dim(1) % 2 == 0 && is_act(gate_up.dtype()),
             "silu_mul_backward: gate_up must be [M, 2I]");
  const int64_t m = gate_up.dim(0), inter = gate_up.dim(1) / 2;
  KILN_CHECK(dy.dtype() == DType::f32 && dy.shape() == Shape({m, inter}),
             "silu_mul_backward: dy must be f32 [", m, ", ", inter, "]");
  KILN_CHECK(dgate_up.dtype() == DType::f32 && dgate_up.shape() == gate_up.shape(),
             "silu_mul_backward: dgate_up must be f32 ", shape_str(gate_up.shape()));
  const float* pdy = dy.data<float>();
  float* out = dgate_up.data<float>();
  parallel_for(m, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(2 * inter));
    for (int64_t r = r0; r < r1; ++r) {
      detail::load_row(gate_up.raw(), gate_up.dtype(), r * 2 * inter, 2 * inter, row.data());
      const float* g = row.data();
      const float* u = g + inter;
      const float* d = pdy + r * inter;
      float* dg = out + r * 2 * inter;
      float* du = dg + inter;
      int64_t i = 0;
#ifdef __AVX512F__
      const __m512 one = _mm512_set1_ps(1.f);
      for (; i + 16 <= inter; i += 16) {
        const __m512 vg = _mm512_loadu_ps(g + i), vu = _mm512_loadu_ps(u + i);
        const __m512 vd = _mm512_loadu_ps(d + i);
        const __m512 s = _mm512_div_ps(
            one, _mm512_add_ps(one, detail::exp512(_mm512_sub_ps(_mm512_setzero_ps(), vg))));
        const __m512 silu = _mm512_mul_ps(vg, s);
        // d silu / dg = s * (1 + g * (1 - s))
        const __m512 ds = _mm512_mul_ps(s, _mm512_fmadd_ps(vg, _mm512_sub_ps(one, s), one));
        _mm512_storeu_ps(dg + i, _mm512_mul_ps(_mm512_mul_ps(vd, vu), ds));
        _mm512_storeu_ps(du + i, _mm512_mul_ps(vd, silu));
      }
#endif
      for (; i < inter; ++i) {
        const float s = 1.f / (1.f + std::exp(-g[i]));
        dg[i] = d[i] * u[i] * (s * (1.f + g[i] * (1.f - s)));
        du[i] = d[i] * (g[i] * s);
      }
    }
  });
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  KILN_CHECK(dbias.dtype() == DType::f32 && dbias.ndim() == 1, "bias_add_backward: dbias must be f32 [N]");
  const int64_t n = dbias.dim(0);
  KILN_CHECK(dy.dtype() == DType::f32 && n > 0 && dy.numel() % n == 0 && dy.dim(-1) == n,
             "bias_add_backward: dy ", shape_str(dy.shape()), " does not end in ", n);
  const int64_t rows = dy.numel() / n;
  const float* g = dy.data<float>();
  float* out = dbias.data<float>();
  // Threads own column ranges, so each column's sum has one fixed order (deterministic).
  parallel_for(n, [&](int64_t c0, int64_t c1) {
    std::vector<double> sum(size_t(c1 - c0), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) sum[size_t(c - c0)] += double(g[r * n + c]);
    for (int64_t c = c0; c < c1; ++c) out[c] += float(sum[size_t(c - c0)]);
  }, 64);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  KILN_CHECK(ids.dtype() == DType::i32 && ids.ndim() == 1, "embedding_backward: ids must be i32 [N]");
  KILN_CHECK(dtable.dtype() == DType::f32 && dtable.ndim() == 2,
             "embedding_backward: dtable must be f32 [V, H]");
  const int64_t n = ids.dim(0), v = dtable.dim(0), h = dtable.dim(1);
  KILN_CHECK(dy.dtype() == DType::f32 && dy.shape() == Shape({n, h}),
             "embedding_backward: dy must be f32 [", n, ", ", h, "]");
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(id[i] >= 0 && id[i] < v, "embedding_backward: id ", id[i], " out of range");
  const float* g = dy.data<float>();
  float* t = dtable.data<float>();
  // Each thread owns a range of columns, so repeated ids never race and rows add in input order.
  parallel_for(
      h,
      [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < n; ++i) {
          float* dst = t + int64_t(id[i]) * h;
          const float* src = g + i * h;
          for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
      },
      64);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_mask,
                        const Tensor& out, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  KILN_CHECK(q.ndim() == 4 && q.dtype() == DType::f32, "attention_backward: q must be f32 [B, T, Hq, D]");
  KILN_CHECK(k.ndim() == 4 && k.shape() == v.shape() && is_act(k.dtype()) && is_act(v.dtype()),
             "attention_backward: k, v must be act [B, L, Hkv, D]");
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t l = k.dim(1), hkv = k.dim(2);
  KILN_CHECK(k.dim(0) == b && k.dim(3) == d && hkv > 0 && hq % hkv == 0 && t <= l,
             "attention_backward: q ", shape_str(q.shape()), " vs k ", shape_str(k.shape()));
  KILN_CHECK(kv_mask.dtype() == DType::i32 && kv_mask.shape() == Shape({b, l}),
             "attention_backward: kv_mask must be i32 [B, L]");
  KILN_CHECK(out.shape() == q.shape() && dout.shape() == q.shape() && dout.dtype() == DType::f32,
             "attention_backward: out, dout must be ", shape_str(q.shape()), " (dout f32)");
  KILN_CHECK(dq.shape() == q.shape() && dq.dtype() == DType::f32 && dk.shape() == k.shape() &&
                 dk.dtype() == DType::f32 && dv.shape() == k.shape() && dv.dtype() == DType::f32,
             "attention_backward: dq, dk, dv must be f32 of q's and k's shapes");
  // D_i = dout_i . out_i is computed as sum_j p_ij (dout_i . v_j), which equals it exactly in real
  // arithmetic and does not inherit the rounding of a bf16 `out`; so `out` itself is not read.
  (void)out;
  const int64_t g = hq / hkv;
  const float scale = 1.f / std::sqrt(float(d));
  const int32_t* mask = kv_mask.data<int32_t>();
  const float* pq = q.data<float>();
  const float* pdo = dout.data<float>();
  float* pdq = dq.data<float>();
  float* pdk = dk.data<float>();
  float* pdv = dv.data<float>();
  // One work item per (batch, kv head) owns dk/dv of that head: no races, fixed summation order.
  detail::parallel_items_cyclic(b * hkv, [&](int64_t item) {
    const int64_t bi = item / hkv, kh = item % hkv;
    std::vector<float> kf(static_cast<size_t>(l * d)), vf(static_cast<size_t>(l * d)), p(static_cast<size_t>(l)), dp(static_cast<size_t>(l));
    std::vector<float> dkh(static_cast<size_t>(l * d), 0.f), dvh(static_cast<size_t>(l * d), 0.f);
    for (int64_t j = 0; j < l; ++j) {
      const int64_t off = ((bi * l + j) * hkv + kh) * d;
      detail::load_row(k.raw(), k.dtype(), off, d, kf.data() + j * d);
      detail::load_row(v.raw(), v.dtype(), off, d, vf.data() + j * d);
    }
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t gi = 0; gi < g; ++gi) {
        const int64_t row = (bi * t + ti) * hq + kh * g + gi;
        const float* qr = pq + row * d;
        const float* gr = pdo + row * d;
        float* dqr = pdq + row * d;
        std::fill(dqr, dqr + d, 0.f);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= ti; ++j) {
          if (!mask[bi * l + j]) continue;
          p[size_t(j)] = detail::dot_f32(qr, kf.data() + j * d, d) * scale;
          m = std::max(m, p[size_t(j)]);
        }
        if (m == -std::numeric_limits<float>::infinity()) continue;  // nothing visible: zeros
        float sum = 0.f;
        for (int64_t j = 0; j <= ti; ++j) {
          if (!mask[bi * l + j]) continue;
          p[size_t(j)] = std::exp(p[size_t(j)] - m);
          sum += p[size_t(j)];
        }
        float dsum = 0.f;
        for (int64_t j = 0; j <= ti; ++j) {
          if (!mask[bi * l + j]) continue;
          p[size_t(j)] /= sum;
          dp[size_t(j)] = detail::dot_f32(gr, vf.data() + j * d, d);
          dsum += p[size_t(j)] * dp[size_t(j)];
        }
        for (int64_t j = 0; j <= ti; ++j) {
          if (!mask[bi * l + j]) continue;
          const float ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * scale;
          detail::axpy_f32(ds, kf.data() + j * d, dqr, d);
          detail::axpy_f32(ds, qr, dkh.data() + j * d, d);
          detail::axpy_f32(p[size_t(j)], gr, dvh.data() + j * d, d);
        }
      }
    for (int64_t j = 0; j < l; ++j) {
      const int64_t off = ((bi * l + j) * hkv + kh) * d;
      std::copy(dkh.begin() + j * d, dkh.begin() + (j + 1) * d, pdk + off);
      std::copy(dvh.begin() + j * d, dvh.begin() + (j + 1) * d, pdv + off);
    }
  });
}

}  // namespace kiln::cpu
