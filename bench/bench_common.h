// Helpers shared by the kernel micro-benchmarks (header only).
#pragma once

#include <chrono>
#include <cstdint>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A [rows, cols] bf16 tensor of small deterministic pseudo-random values (|x| < 1/8).
inline Tensor random_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::bf16);
  auto* p = t.data<uint16_t>();
  uint32_t s = seed;
  for (int64_t i = 0; i < rows * cols; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = f32_to_bf16(float(int32_t(s >> 8) - (1 << 23)) / float(1 << 26));
  }
  return t;
}

}  // namespace kiln::bench
