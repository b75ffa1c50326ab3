// Internal: one-row RMSNorm shared by rms_norm (norm.cpp) and the fused qk_norm_rope_cache
// (rope.cpp), so the fused kernel computes bit-for-bit what the unfused composition does.
//
// Example:
//   kiln::cpu::detail::rms_norm_row(x, w, 1024, 1e-6f, /*round_normed_bf16=*/false, y);
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/simd.h"
#include "kiln/core/tensor.h"

namespace kiln::cpu::detail {

// 1 / sqrt(mean(x^2) + eps) over n f32 values, as Qwen3RMSNorm computes it in f32.
inline float rms_inv(const float* x, int64_t n, float eps) {
  float ss = dot_f32(x, x, n);
  return 1.f / std::sqrt(ss / float(n) + eps);
}

// out[i] = (x[i] * r) * w[i]. Transformers' Qwen3RMSNorm returns weight * normed.to(input_dtype):
// in a bf16 model the normed value is rounded to bf16 before the weight multiply, which
// round_normed_bf16 reproduces; a bf16 out rounds the product as store_row does. out may alias x.
template <typename OutT>  // float | bf16_t
inline void rms_norm_row(const float* x, const float* w, int64_t n, float eps,
                         bool round_normed_bf16, OutT* out) {
  const float r = rms_inv(x, n, eps);
  int64_t i = 0;
#ifdef KILN_SIMD_VEC
  const VecF vr = vset1(r);
  for (; i + kLanes <= n; i += kLanes) {
    VecF v = vmul(vload(x + i), vr);
    if (round_normed_bf16) v = vround_bf16(v);
    vstore(out + i, vmul(v, vload(w + i)));
  }
#endif
  for (; i < n; ++i) {
    float v = x[i] * r;
    if (round_normed_bf16) v = bf16_to_f32(f32_to_bf16(v));
    if constexpr (std::is_same_v<OutT, bf16_t>)
      out[i] = f32_to_bf16(v * w[i]);
    else
      out[i] = v * w[i];
  }
}

// A norm weight (f32|bf16 [n]) widened to f32 once per kernel call.
inline std::vector<float> weight_f32(const Tensor& w) {
  std::vector<float> out(static_cast<size_t>(w.numel()));
  load_row(w.raw(), w.dtype(), 0, w.numel(), out.data());
  return out;
}

}  // namespace kiln::cpu::detail
