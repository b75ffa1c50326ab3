// Runs a test body once for each arithmetic kiln's bf16 GEMM can use (vdpbf16ps on bf16 pairs, and
// f32 FMAs on widened inputs), so that the GEMM and every caller of it are tested with both kernels
// on any CPU, not only with the one the test machine's CPU runs faster.
#pragma once

#include <gtest/gtest.h>

#include "kiln/backends/cpu/linear_dnnl.h"

namespace kiln::cpu::test {

// body() under a SCOPED_TRACE naming each arithmetic; the process's choice is restored after.
template <typename Body>
void for_each_bf16_gemm_arithmetic(Body&& body) {
  using detail::Bf16GemmArithmetic;
  const Bf16GemmArithmetic before = detail::bf16_gemm_arithmetic();
  for (Bf16GemmArithmetic a : {Bf16GemmArithmetic::kDpbf16, Bf16GemmArithmetic::kF32Fma}) {
    SCOPED_TRACE(a == Bf16GemmArithmetic::kDpbf16 ? "bf16 GEMM on vdpbf16ps"
                                                   : "bf16 GEMM on f32 FMAs");
    detail::set_bf16_gemm_arithmetic(a);
    body();
  }
  detail::set_bf16_gemm_arithmetic(before);
}

}  // namespace kiln::cpu::test
