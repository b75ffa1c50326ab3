// The op test harness: one table of cases per op family, each case run for every activation dtype
// (f32, bf16) on a backend given as a table of kernel entry points, against a plain double-precision
// reference written in the test. A later backend (CUDA) adds an OpBackend whose entries copy host
// tensors to the device and back, and reuses every case and tolerance unchanged.
//
// Example:
//   TEST_P(ForwardOps, Matches) { GetParam().op.run(backend(), GetParam().dtype, GetParam().tol()); }
//   // with cases { "rms_norm", {f32: {1e-6, 1e-5}, bf16: {1e-3, 1.6e-2}}, run_rms_norm }
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::optest {

// |actual - expected| <= atol + rtol * |expected|, element-wise.
struct Tol {
  double atol = 0, rtol = 0;
};

// Per-op tolerance for each activation dtype. bf16 tolerances come from bf16 rounding: one
// round-to-nearest is off by at most 2^-9 relative, one ulp is 2^-8 (so rtol 8e-3 allows a rounding
// that lands one ulp away because the f32 value sat on a rounding boundary).
struct DTypeTol {
  Tol f32, bf16;
  Tol get(DType t) const { return t == DType::bf16 ? bf16 : f32; }
};

// The kernels a backend provides, with kiln::cpu's signatures on host tensors.
struct OpBackend {
  std::string name;
  std::function<void(const Tensor&, const Tensor&, Tensor&)> embedding;
  std::function<void(const Tensor&, const Tensor&, float, Tensor&)> rms_norm;
  std::function<void(const Tensor&, const Tensor&, Tensor&)> add;
  std::function<void(const Tensor&, Tensor&)> silu_mul;
  std::function<void(const Tensor&, Tensor&)> silu;
  std::function<void(const Tensor&, const Tensor&, Tensor&)> mul;
  std::function<void(Tensor&, const Tensor&, const Tensor&)> rope;
  std::function<void(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&,
                     const Tensor&, int64_t, Tensor&, Tensor&, Tensor&)>
      qk_norm_rope_cache;
  std::function<void(const Tensor&, int64_t, Tensor&)> kv_cache_write;
  std::function<void(const Tensor&, int64_t, Tensor&)> split_columns;
  std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, Tensor&)>
      attention;
  std::function<void(const Tensor&, const Tensor&, float, const Tensor&, Tensor&, Tensor&)>
      rms_norm_backward;
  std::function<void(Tensor&, const Tensor&, const Tensor&)> rope_backward;
  std::function<void(const Tensor&, const Tensor&, Tensor&)> silu_mul_backward;
  std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, Tensor&, Tensor&, Tensor&)>
      attention_backward;
  std::function<void(const Tensor&, const Tensor&, Tensor&)> embedding_backward;
  std::function<void(const Tensor&, Tensor&)> bias_add_backward;
  std::function<double(const Tensor&, const Tensor&, float, Tensor*)> cross_entropy;
};

const OpBackend& cpu_backend();

// A case of the table: `run` builds inputs, calls the backend and checks against its reference.
struct OpCase {
  std::string name;
  DTypeTol tol;
  std::function<void(const OpBackend&, DType, Tol)> run;
};
// The parameter of a harness test: one case at one activation dtype.
struct OpParam {
  OpCase op;
  DType dtype;
  Tol tol() const { return op.tol.get(dtype); }
};
inline void PrintTo(const OpParam& p, std::ostream* os) {
  *os << p.op.name << "/" << dtype_name(p.dtype);
}
std::vector<OpParam> for_each_dtype(const std::vector<OpCase>& cases);
std::string param_name(const ::testing::TestParamInfo<OpParam>& info);

// Deterministic uniform values in [lo, hi), stored in `dtype` (rounded once for bf16).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Values as double (bf16 widened exactly).
std::vector<double> to_double(const Tensor& t);
inline float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }
// Rounds a double reference the way storing it in `dtype` would.
double round_as(DType dtype, double v);

// Compares element-wise (|actual - expected| <= atol + rtol |expected| + slack[i], where slack,
// if not empty, is a per-element error bound the op's definition allows on top); on failure names
// the first bad index, the max error and a few values.
::testing::AssertionResult all_close(const std::vector<double>& actual,
                                     const std::vector<double>& expected, Tol tol,
                                     const std::vector<double>& slack = {});
inline ::testing::AssertionResult all_close(const Tensor& actual,
                                            const std::vector<double>& expected, Tol tol,
                                            const std::vector<double>& slack = {}) {
  return all_close(to_double(actual), expected, tol, slack);
}
// Bit-for-bit equality of two tensors of one dtype.
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b);

// Central finite differences of a scalar function of x: grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h.
std::vector<double> numeric_grad(std::vector<double> x,
                                 const std::function<double(const std::vector<double>&)>& f,
                                 double h = 1e-4);
// sum_i a[i] * b[i].
double dot(const std::vector<double>& a, const std::vector<double>& b);

// The RoPE table the models build: row p = cos(p * inv_freq) then sin(p * inv_freq), D/2 each.
Tensor rope_table(int64_t positions, int64_t d, double theta = 10000.0);

}  // namespace kiln::optest
