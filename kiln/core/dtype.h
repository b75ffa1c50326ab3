// Element types. bf16 and f16 are stored as raw 16-bit patterns; arithmetic happens in f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, boolean };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
// Parses "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16"; `where` names the argument on error.
DType parse_dtype(std::string_view s, const std::string& where);

using bf16_t = uint16_t;
using f16_t = uint16_t;

inline float bf16_to_f32(bf16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline bf16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  // Branch-free (a select), so loops over it vectorise.
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40;
  return bf16_t((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

float f16_to_f32(f16_t v);
f16_t f32_to_f16(float f);

}  // namespace kiln
