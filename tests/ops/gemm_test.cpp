// gemm() (training GEMMs) against a double-precision reference: every transpose combination, f32,
// bf16 and mixed inputs, beta 0 (overwrite, even over NaN) and beta 1 (accumulate).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "tests/ops/bf16_arithmetic.h"

namespace kiln::cpu {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 7;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23);
  }
  return v;
}

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  DType da, db;
  float beta;
  DType dc = DType::f32;
};

class GemmTest : public testing::TestWithParam<Case> {};

TEST_P(GemmTest, MatchesReference) {
  test::for_each_bf16_gemm_arithmetic([&] {
    const Case c = GetParam();
    // Stored shapes: a is [M, K] or, transposed, [K, M]; b is [K, N] or [N, K].
    const Shape a_shape = c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K};
    const Shape b_shape = c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N};
    Tensor a = Tensor::from_vector(random_values(c.M * c.K, 1), a_shape).to(c.da);
    Tensor b = Tensor::from_vector(random_values(c.K * c.N, 2), b_shape).to(c.db);
    const auto c0 = random_values(c.M * c.N, 3);
    Tensor out = Tensor::from_vector(c0, {c.M, c.N});
    if (c.beta == 0.f) {  // beta = 0 must overwrite whatever c held, NaN included
      for (int64_t i = 0; i < c.M * c.N; i += 7)
        out.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    }
    out = out.to(c.dc);
    gemm(a, c.ta, b, c.tb, c.beta, out);

    const auto av = a.to_f32_vector(), bv = b.to_f32_vector(), got = out.to_f32_vector();
    double worst = 0;
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          double x = c.ta ? av[k * c.M + m] : av[m * c.K + k];
          double y = c.tb ? bv[n * c.K + k] : bv[k * c.N + n];
          s += x * y;
          mag += std::fabs(x * y);
        }
        s += double(c.beta) * c0[m * c.N + n];
        // f32 accumulation error, plus the final rounding of a bf16 c.
        const double tol = mag * std::ldexp(1.0, -12) + 1e-6 +
                           (c.dc == DType::bf16 ? std::fabs(s) * std::ldexp(1.0, -8) : 0.0);
        const double err = std::fabs(got[m * c.N + n] - s) / tol;
        worst = std::isnan(got[m * c.N + n]) ? 1e30 : std::max(worst, err);
      }
    }
    EXPECT_LE(worst, 1.0);
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f}) {
        out.push_back({7, 33, 50, ta, tb, DType::f32, DType::f32, beta});
        out.push_back({33, 17, 130, ta, tb, DType::bf16, DType::bf16, beta});
        out.push_back({1, 40, 9, ta, tb, DType::bf16, DType::f32, beta});
        out.push_back({64, 96, 32, ta, tb, DType::f32, DType::f32, beta});
        // bf16 x bf16 runs kiln's blocked kernel: shapes past one block of rows (192), columns
        // (1024) and k (512), with ragged tails, odd K, and bf16 output.
        out.push_back({200, 70, 1030, ta, tb, DType::bf16, DType::bf16, beta});
        out.push_back({13, 1100, 520, ta, tb, DType::bf16, DType::bf16, beta});
        out.push_back({197, 130, 517, ta, tb, DType::bf16, DType::bf16, beta});
        // From M = 128 rows a transposed B is packed by kiln too (the cases above with M >= 128
        // as well): 16-pair register transposes, then per-pair tails; here over two k blocks, the
        // second a 6-wide tail, and more than one block of rows.
        out.push_back({300, 130, 1030, ta, tb, DType::bf16, DType::bf16, beta});
        if (beta == 0.f)
          out.push_back({37, 150, 333, ta, tb, DType::bf16, DType::bf16, beta, DType::bf16});
      }
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream os;  // (not string operator+: GCC 12 -Wrestrict false positive)
  os << "M" << c.M << "N" << c.N << "K" << c.K << (c.ta ? "_at" : "_a") << (c.tb ? "_bt" : "_b")
     << "_" << dtype_name(c.da) << dtype_name(c.db) << (c.beta == 0.f ? "_beta0" : "_beta1")
     << (c.dc == DType::bf16 ? "_cbf16" : "");
  return os.str();
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest, testing::ValuesIn(cases()), case_name);

TEST(Gemm, TrainingIdentities) {
  // dX = dY @ W and dW += dY^T @ X agree with linear()'s forward y = X @ W^T via the identity
  // <dY, X W^T> = <dY W, X> = <dY^T X, W>: catches a transpose mixed up in either direction.
  const int64_t M = 12, N = 20, K = 24;
  Tensor x = Tensor::from_vector(random_values(M * K, 4), {M, K});
  Tensor w = Tensor::from_vector(random_values(N * K, 5), {N, K});
  Tensor dy = Tensor::from_vector(random_values(M * N, 6), {M, N});
  Tensor y = Tensor::empty({M, N}, DType::f32), dx = Tensor::empty({M, K}, DType::f32);
  Tensor dw = Tensor::zeros({N, K}, DType::f32);
  gemm(x, false, w, true, 0.f, y);
  gemm(dy, false, w, false, 0.f, dx);
  gemm(dy, true, x, false, 1.f, dw);
  double a = 0, b = 0, c = 0;
  for (int64_t i = 0; i < M * N; ++i) a += double(dy.data<float>()[i]) * y.data<float>()[i];
  for (int64_t i = 0; i < M * K; ++i) b += double(dx.data<float>()[i]) * x.data<float>()[i];
  for (int64_t i = 0; i < N * K; ++i) c += double(dw.data<float>()[i]) * w.data<float>()[i];
  EXPECT_NEAR(a, b, 1e-3);
  EXPECT_NEAR(a, c, 1e-3);
}

}  // namespace
}  // namespace kiln::cpu
