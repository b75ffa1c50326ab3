// Internal: RoPE row helpers shared by rope, rope_backward and qk_norm_rope_cache.
//
// Example:
//   kiln::cpu::detail::rope_row(q_head, cos_sin_row, 128, /*inverse=*/false);
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::cpu::detail {

// What qk_norm_rope_cache does to one head of one row of the qkv projection, as raw pointers, so
// that the fused qkv GEMM (gemm_bf16_packed_qkv) applies it to its f32 tile and gives the same bits.
// Row m of the projection is token (b, t) = (m / t, m % t), written to cache slot
// b * l + slot_offset + t.
struct QkvEpilogue {
  int64_t hq = 0, hkv = 0, d = 0;  // heads, head_dim; the row holds q heads, k heads, v heads
  bool norm = false;               // q/k-norm weights in norm_w: q's [0, d), k's [d, 2d)
  std::vector<float> norm_w;
  float eps = 0;
  const int32_t* positions = nullptr;  // [M]: row m's rope position
  const float* cos_sin = nullptr;      // [P, d]
  int64_t t = 0, l = 0, slot_offset = 0;
  void* q = nullptr;    // f32 [M, hq, d]; or, q_grouped, bf16 [B, hkv, t, hq / hkv, d] (kernels.h)
  bool q_grouped = false;
  float q_scale = 1;    // the grouped q's factor, attention_scale(d)
  void* k_cache = nullptr;
  void* v_cache = nullptr;  // [B, l, hkv, d] each
  DType cache_dtype = DType::f32;

  // Checks the operands as qk_norm_rope_cache documents them (kernels.h) for a projection of
  // `rows` rows of `cols` columns, and builds the epilogue; `op` names the caller in errors.
  static QkvEpilogue make(const char* op, int64_t rows, int64_t cols, const Tensor& q_norm,
                          const Tensor& k_norm, float eps, const Tensor& positions,
                          const Tensor& cos_sin, int64_t slot_offset, Tensor& q_out,
                          Tensor& k_cache, Tensor& v_cache);
  // Head `head` (q heads first, then k, then v) of rows [m0, m0 + rows), row r's d values at
  // x + r * d (may be overwritten): q and k normed and rotated, q stored to q, k and v to their
  // cache slots.
  void apply_rows(int64_t m0, int64_t rows, int64_t head, float* x) const;
  // Where q head `head` of row m goes: an element offset into q.
  int64_t q_offset(int64_t m, int64_t head) const {
    if (!q_grouped) return (m * hq + head) * d;
    const int64_t g = hq / hkv, b = m / t;
    return (((b * hkv + head / g) * t + m % t) * g + head % g) * d;
  }
};

// Rotates one head of d values in place: pairs (i, i + d/2) by the angle whose cos/sin are
// cs[i] and cs[d/2 + i]; inverse rotates by the negative angle (the transpose, for backward).
void rope_row(float* x, const float* cs, int64_t d, bool inverse);
void check_rope_args(const char* op, const Tensor& x, const Tensor& positions,
                     const Tensor& cos_sin);
// positions i32 [b, t] within cos_sin f32 [P, d] (what check_rope_args checks of x's dims).
void check_rope_tables(const char* op, int64_t b, int64_t t, int64_t d, const Tensor& positions,
                       const Tensor& cos_sin);
void rope_apply(Tensor& x, const Tensor& positions, const Tensor& cos_sin, bool inverse);

}  // namespace kiln::cpu::detail
