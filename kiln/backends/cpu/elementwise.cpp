// Element-wise kernels: embedding lookup, residual add, SwiGLU and its parts, column split, KV-cache
// write. All are memory bound: one pass, vectorised, rows split over the OpenMP pool.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/simd.h"

namespace kiln::cpu {

using detail::is_act, detail::narrow, detail::widen;

namespace {

// Smallest number of rows worth handing to a thread (below ~16K elements the fork costs more).
int64_t min_rows(int64_t row_elems) {
  int64_t r = 16384 / (row_elems > 0 ? row_elems : 1);
  return r > 1 ? r : 1;
}

inline float silu_scalar(float g) { return g / (1.f + std::exp(-g)); }

#ifdef KILN_SIMD_VEC
using detail::VecF, detail::kLanes, detail::vload, detail::vstore, detail::vzero, detail::vadd,
    detail::vmul, detail::vsilu;
#endif

// y[i] = op(a[i], b[i]) for i < n (b[i] = 0 without b), each of a, b, y f32 or bf16: widened in
// registers, computed in f32, stored rounded.
template <typename TA, typename TB, typename TY, typename VecOp, typename ScalarOp>
void binary_span(const TA* a, const TB* b, int64_t n, TY* y, VecOp vop, ScalarOp sop) {
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  // Four vectors a step, interleaved: SiLU's exp is a chain of ~20 dependent operations, which one
  // vector a step left exposed. With the inputs widened here rather than in a pass of their own,
  // AVX2 silu_mul of a bf16 512 x 6144 gate_up on one Zen 3 core took 1.7-1.9 ms, not 2.3-2.8
  // (bench_ops).
  constexpr int kStep = 4;
  for (; i + kStep * kLanes <= n; i += kStep * kLanes) {
    VecF r[kStep];
#pragma GCC unroll 4
    for (int u = 0; u < kStep; ++u)
      r[u] = vop(vload(a + i + u * kLanes), b ? vload(b + i + u * kLanes) : vzero());
#pragma GCC unroll 4
    for (int u = 0; u < kStep; ++u) vstore(y + i + u * kLanes, r[u]);
  }
  for (; i + kLanes <= n; i += kLanes)
    vstore(y + i, vop(vload(a + i), b ? vload(b + i) : vzero()));
#else
  (void)vop;
#endif
  for (; i < n; ++i) narrow(sop(widen(a[i]), b ? widen(b[i]) : 0.f), y + i);
}

// Calls f with t's data as float* or bf16_t* (t is act).
template <typename T, typename F>
decltype(auto) with_act(T* t, F&& f) {
  using F32 = std::conditional_t<std::is_const_v<T>, const float*, float*>;
  using BF16 = std::conditional_t<std::is_const_v<T>, const bf16_t*, bf16_t*>;
  if (t->dtype() == DType::f32) return f(static_cast<F32>(t->raw()));
  return f(static_cast<BF16>(t->raw()));
}

// y[y_off + i] = op(a[a_off + i], b[b_off + i]) for i < n; b may be null (then b[i] = 0).
template <typename VecOp, typename ScalarOp>
void binary_row(const Tensor& a, int64_t a_off, const Tensor* b, int64_t b_off, Tensor& y,
                int64_t y_off, int64_t n, VecOp vop, ScalarOp sop) {
  with_act(&a, [&](auto* pa) {
    with_act(b ? b : &a, [&](auto* pb) {
      with_act(&y, [&](auto* py) {
        binary_span(pa + a_off, b ? pb + b_off : nullptr, n, py + y_off, vop, sop);
      });
    });
  });
}

#ifdef KILN_SIMD_VEC
#define KILN_VEC_OP(expr) [](VecF va, VecF vb) { (void)vb; return expr; }
#else
#define KILN_VEC_OP(expr) 0
#endif

// Runs a row-wise element-wise op over [rows, n].
template <typename RowFn>
void for_rows(int64_t rows, int64_t n, RowFn fn) {
  parallel_for(
      rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) fn(r);
      },
      min_rows(n));
}

}  // namespace

void embedding(const Tensor& ids, const Tensor& table, Tensor& y) {
  KILN_CHECK(ids.dtype() == DType::i32 && ids.ndim() == 1, "embedding: ids must be i32 [N]");
  KILN_CHECK(table.ndim() == 2 && is_act(table.dtype()), "embedding: table must be act [V, H]");
  const int64_t n = ids.dim(0), v = table.dim(0), h = table.dim(1);
  KILN_CHECK(y.dtype() == DType::f32 && y.shape() == Shape({n, h}), "embedding: y must be f32 [",
             n, ", ", h, "], got ", shape_str(y.shape()));
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(id[i] >= 0 && id[i] < v, "embedding: id ", id[i], " out of range [0, ", v, ")");
  float* out = y.data<float>();
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          detail::load_row(table.raw(), table.dtype(), int64_t(id[i]) * h, h, out + i * h);
      },
      min_rows(h));
}

void embedding_packed(const Tensor& ids, const PackedLinear& table, Tensor& y) {
  KILN_CHECK(ids.dtype() == DType::i32 && ids.ndim() == 1, "embedding: ids must be i32 [N]");
  const int64_t n = ids.dim(0), h = table.in_features();
  KILN_CHECK(y.dtype() == DType::f32 && y.shape() == Shape({n, h}), "embedding: y must be f32 [",
             n, ", ", h, "], got ", shape_str(y.shape()));
  table.read_rows(ids.data<int32_t>(), n, y.data<float>());
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  KILN_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && y.dtype() == DType::f32,
             "add: f32 only");
  const int64_t n = a.numel();
  KILN_CHECK(b.numel() == n && y.numel() == n, "add: element counts differ: ", n, ", ", b.numel(),
             ", ", y.numel());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  constexpr int64_t kChunk = 4096;
  parallel_for(
      (n + kChunk - 1) / kChunk,
      [&](int64_t c0, int64_t c1) {
        int64_t lo = c0 * kChunk, hi = std::min(n, c1 * kChunk);
        binary_span(pa + lo, pb + lo, hi - lo, y.data<float>() + lo, KILN_VEC_OP(vadd(va, vb)),
                    [](float x, float z) { return x + z; });
      },
      4);
}

void silu_mul(const Tensor& gate_up, Tensor& y) {
  KILN_CHECK(gate_up.ndim() == 2 && gate_up.dim(1) % 2 == 0 && is_act(gate_up.dtype()),
             "silu_mul: gate_up must be [M, 2I]");
  const int64_t m = gate_up.dim(0), inter = gate_up.dim(1) / 2;
  KILN_CHECK(is_act(y.dtype()) && y.shape() == Shape({m, inter}), "silu_mul: y must be act [", m,
             ", ", inter, "], got ", shape_str(y.shape()));
  const int64_t row_bytes = 2 * inter * int64_t(dtype_size(gate_up.dtype()));
  constexpr int64_t kRowsAhead = 2;  // of 24 KiB at Qwen3-0.6B (see simd.h: prefetch_bytes)
  for_rows(m, 2 * inter, [&](int64_t r) {
    if (r + kRowsAhead < m)
      detail::prefetch_bytes(static_cast<const char*>(gate_up.raw()) + (r + kRowsAhead) * row_bytes,
                             row_bytes);
    binary_row(gate_up, r * 2 * inter, &gate_up, r * 2 * inter + inter, y, r * inter, inter,
               KILN_VEC_OP(vmul(vsilu(va), vb)),
               [](float g, float u) { return silu_scalar(g) * u; });
  });
}

void silu(const Tensor& x, Tensor& y) {
  KILN_CHECK(is_act(x.dtype()) && is_act(y.dtype()) && x.numel() == y.numel(),
             "silu: x and y must be act with equal sizes");
  const int64_t n = x.numel();
  const int64_t cols = x.ndim() > 0 ? x.dim(-1) : 1, rows = cols > 0 ? n / cols : 0;
  for_rows(rows, cols, [&](int64_t r) {
    binary_row(x, r * cols, nullptr, 0, y, r * cols, cols, KILN_VEC_OP(vsilu(va)),
               [](float g, float) { return silu_scalar(g); });
  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& y) {
  KILN_CHECK(is_act(a.dtype()) && is_act(b.dtype()) && is_act(y.dtype()),
             "mul: act dtypes only");
  const int64_t n = a.numel();
  KILN_CHECK(b.numel() == n && y.numel() == n, "mul: element counts differ");
  const int64_t cols = a.ndim() > 0 ? a.dim(-1) : 1, rows = cols > 0 ? n / cols : 0;
  for_rows(rows, cols, [&](int64_t r) {
    binary_row(a, r * cols, &b, r * cols, y, r * cols, cols, KILN_VEC_OP(vmul(va, vb)),
               [](float p, float q) { return p * q; });
  });
}

void split_columns(const Tensor& x, int64_t col_begin, Tensor& y) {
  KILN_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.dim(0) == y.dim(0),
             "split_columns: x [M, C], y [M, W] expected, got ", shape_str(x.shape()), ", ",
             shape_str(y.shape()));
  KILN_CHECK(x.dtype() == DType::f32 && y.dtype() == DType::f32, "split_columns: f32 only");
  const int64_t m = x.dim(0), c = x.dim(1), w = y.dim(1);
  KILN_CHECK(col_begin >= 0 && col_begin + w <= c, "split_columns: columns [", col_begin, ", ",
             col_begin + w, ") outside [0, ", c, ")");
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  for_rows(m, w, [&](int64_t r) {
    std::copy(src + r * c + col_begin, src + r * c + col_begin + w, dst + r * w);
  });
}

void kv_cache_write(const Tensor& x, int64_t slot_offset, Tensor& cache) {
  KILN_CHECK(x.ndim() == 4 && cache.ndim() == 4 && x.dtype() == DType::f32 &&
                 is_act(cache.dtype()),
             "kv_cache_write: x f32 [B, T, Hkv, D], cache act [B, L, Hkv, D] expected");
  const int64_t b = x.dim(0), t = x.dim(1), l = cache.dim(1);
  const int64_t row = x.dim(2) * x.dim(3);
  KILN_CHECK(cache.dim(0) == b && cache.dim(2) == x.dim(2) && cache.dim(3) == x.dim(3),
             "kv_cache_write: shapes ", shape_str(x.shape()), " vs ", shape_str(cache.shape()));
  KILN_CHECK(slot_offset >= 0 && slot_offset + t <= l, "kv_cache_write: slots [", slot_offset, ", ",
             slot_offset + t, ") outside cache length ", l);
  const float* src = x.data<float>();
  for_rows(b * t, row, [&](int64_t r) {
    int64_t bi = r / t, ti = r % t;
    detail::store_row(src + r * row, row, cache.raw(), cache.dtype(),
                      (bi * l + slot_offset + ti) * row);
  });
}

}  // namespace kiln::cpu
