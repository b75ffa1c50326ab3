#include "kiln/core/dtype.h"

#include <cmath>

#include "kiln/core/error.h"

namespace kiln {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view s, const std::string& where) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  throw Error(where, "unknown dtype '" + std::string(s) + "' (expected bf16, f16 or f32)");
}

float f16_to_f32(f16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400));
      mant &= 0x3ff;
      bits = sign | uint32_t(127 - 15 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

f16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  if (std::isnan(f)) return f16_t(sign | 0x7e00);
  float a = std::fabs(f);
  if (a >= 65520.0f) return f16_t(sign | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal range: scale and round
    uint32_t m = uint32_t(std::nearbyint(a * 16777216.0f));  // a / 2^-24
    return f16_t(sign | m);
  }
  uint32_t e = ((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mant = bits & 0x7fffff;
  uint32_t h = (e << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return f16_t(sign | h);
}

}  // namespace kiln
