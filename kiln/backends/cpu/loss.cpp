// Cross-entropy with the gradient fused in (one read of the logits for max, one for the sum of
// exponentials, one to write the gradient). Labels of -100 are ignored, as in Transformers.
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/simd.h"

namespace kiln::cpu {

namespace {

constexpr int32_t kIgnoreIndex = -100;

#ifdef KILN_SIMD_VEC
using detail::VecF, detail::kLanes, detail::vadd, detail::vexp, detail::vload, detail::vmax,
    detail::vmul, detail::vreduce_max, detail::vset1, detail::vstore, detail::vsub, detail::vzero;
#endif

float row_max(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  VecF vm = vset1(-INFINITY);
  for (; i + kLanes <= n; i += kLanes) vm = vmax(vm, vload(x + i));
  m = vreduce_max(vm);
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// sum exp(x - m), accumulated in f32 lanes and combined in double; when `out` is set (it may be x)
// the exponentials are also stored there.
double row_sum_exp(const float* x, int64_t n, float m, float* out = nullptr) {
  double s = 0.0;
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  const VecF vm = vset1(m);
  VecF acc0 = vzero(), acc1 = vzero();
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const VecF e0 = vexp(vsub(vload(x + i), vm));
    const VecF e1 = vexp(vsub(vload(x + i + kLanes), vm));
    if (out) {
      vstore(out + i, e0);
      vstore(out + i + kLanes, e1);
    }
    acc0 = vadd(acc0, e0);
    acc1 = vadd(acc1, e1);
  }
  for (; i + kLanes <= n; i += kLanes) {
    const VecF e0 = vexp(vsub(vload(x + i), vm));
    if (out) vstore(out + i, e0);
    acc0 = vadd(acc0, e0);
  }
  float lanes[kLanes];
  vstore(lanes, vadd(acc0, acc1));
  for (float f : lanes) s += f;
#endif
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - m);
    if (out) out[i] = e;
    s += e;
  }
  return s;
}

// Widens a bf16 row into f32 and returns its maximum (one pass).
float widen_row_max(const bf16_t* x, int64_t n, float* out) {
  float m = -INFINITY;
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  VecF vm = vset1(-INFINITY);
  for (; i + kLanes <= n; i += kLanes) {
    const VecF v = vload(x + i);
    vstore(out + i, v);
    vm = vmax(vm, v);
  }
  m = vreduce_max(vm);
#endif
  for (; i < n; ++i) {
    out[i] = bf16_to_f32(x[i]);
    m = std::max(m, out[i]);
  }
  return m;
}

// out[i] = bf16(x[i] * f). The gradient rows are far larger than the caches and read next by
// another kernel, so aligned full vectors are stored non-temporally (no read of the old line).
void scale_to_bf16(const float* x, int64_t n, float f, bf16_t* out) {
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 vf = _mm512_set1_ps(f);
  for (; i + 16 <= n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i)
    out[i] = f32_to_bf16(x[i] * f);
  for (; i + 16 <= n; i += 16)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i),
                        detail::cvt_f32_bf16x16(_mm512_mul_ps(_mm512_loadu_ps(x + i), vf)));
  _mm_sfence();
#elif defined(KILN_SIMD_VEC)
  const VecF vf = vset1(f);
  for (; i + kLanes <= n; i += kLanes) vstore(out + i, vmul(vload(x + i), vf));
#endif
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i] * f);
}

// out[i] = (exp(x[i] - m) * inv) * scale; out may alias x.
void write_softmax(const float* x, int64_t n, float m, float inv, float scale, float* out) {
  int64_t i = 0;
  const float f = inv * scale;
#ifdef KILN_SIMD_VEC
  const VecF vm = vset1(m), vf = vset1(f);
  for (; i + kLanes <= n; i += kLanes) vstore(out + i, vmul(vexp(vsub(vload(x + i), vm)), vf));
#endif
  for (; i < n; ++i) out[i] = std::exp(x[i] - m) * f;
}

}  // namespace

double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits) {
  KILN_CHECK(logits.ndim() == 2 && (logits.dtype() == DType::f32 || logits.dtype() == DType::bf16),
             "cross_entropy: logits must be f32 or bf16 [N, V], got ", dtype_name(logits.dtype()),
             " ", shape_str(logits.shape()));
  const int64_t n = logits.dim(0), v = logits.dim(1);
  KILN_CHECK(labels.dtype() == DType::i32 && labels.shape() == Shape({n}),
             "cross_entropy: labels must be i32 [", n, "]");
  KILN_CHECK(
      !dlogits || (dlogits->dtype() == logits.dtype() && dlogits->shape() == logits.shape()),
      "cross_entropy: dlogits must be ", dtype_name(logits.dtype()), " ", shape_str(logits.shape()));
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(lab[i] == kIgnoreIndex || (lab[i] >= 0 && lab[i] < v), "cross_entropy: label ",
               lab[i], " at row ", i, " outside [0, ", v, ") and not -100");
  // bf16 rows are widened into a per-thread f32 row, worked on there and rounded back.
  const bool bf16 = logits.dtype() == DType::bf16;
  const size_t item = dtype_size(logits.dtype());
  const char* x = static_cast<const char*>(logits.raw());
  char* dx = dlogits ? static_cast<char*>(dlogits->raw()) : nullptr;
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  parallel_for(n, [&](int64_t r0, int64_t r1) {
    std::vector<float> wide(bf16 ? size_t(v) : 0);
    for (int64_t r = r0; r < r1; ++r) {
      char* dr = dx ? dx + size_t(r * v) * item : nullptr;
      if (lab[r] == kIgnoreIndex) {
        if (dr) std::memset(dr, 0, size_t(v) * item);
        continue;
      }
      if (bf16) {
        // Widened once into f32; the exponentials are kept there for the gradient (one exp per
        // logit), which is scaled and rounded back to bf16 in one pass.
        const auto* xb = reinterpret_cast<const bf16_t*>(x) + r * v;
        const float target = bf16_to_f32(xb[lab[r]]);
        const float m = widen_row_max(xb, v, wide.data());
        const double s = row_sum_exp(wide.data(), v, m, wide.data());
        row_loss[size_t(r)] = std::log(s) + double(m) - double(target);
        if (dr) {
          const float f = float(1.0 / s) * grad_scale;
          // The label's entry: exp * f - scale, rounded once like the rest.
          const float at_label = wide[size_t(lab[r])] * f - grad_scale;
          scale_to_bf16(wide.data(), v, f, reinterpret_cast<bf16_t*>(dr));
          reinterpret_cast<bf16_t*>(dr)[lab[r]] = f32_to_bf16(at_label);
        }
        continue;
      }
      const float* xr = reinterpret_cast<const float*>(x + size_t(r * v) * item);
      const float m = row_max(xr, v);
      const double s = row_sum_exp(xr, v, m);
      const float target = xr[lab[r]];  // read before dlogits (which may alias) overwrites it
      row_loss[size_t(r)] = std::log(s) + double(m) - double(target);
      if (dr) {
        auto* out = reinterpret_cast<float*>(dr);
        write_softmax(xr, v, m, float(1.0 / s), grad_scale, out);
        out[lab[r]] -= grad_scale;
      }
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total;
}

}  // namespace kiln::cpu
