// Internal: RoPE row helpers shared by rope, rope_backward and qk_norm_rope_cache.
//
// Example:
//   kiln::cpu::detail::rope_row(q_head, cos_sin_row, 128, /*inverse=*/false);
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cpu::detail {

// Rotates one head of d values in place: pairs (i, i + d/2) by the angle whose cos/sin are
// cs[i] and cs[d/2 + i]; inverse rotates by the negative angle (the transpose, for backward).
void rope_row(float* x, const float* cs, int64_t d, bool inverse);
void check_rope_args(const char* op, const Tensor& x, const Tensor& positions,
                     const Tensor& cos_sin);
void rope_apply(Tensor& x, const Tensor& positions, const Tensor& cos_sin, bool inverse);

}  // namespace kiln::cpu::detail
