#include "op_harness.h"

#include <algorithm>
#include <random>
#include <sstream>

namespace kiln::optest {

const OpBackend& cpu_backend() {
  static const OpBackend b = [] {
    OpBackend o;
    o.name = "cpu";
    o.embedding = cpu::embedding;
    o.rms_norm = cpu::rms_norm;
    o.add = cpu::add;
    o.silu_mul = cpu::silu_mul;
    o.silu = cpu::silu;
    o.mul = cpu::mul;
    o.rope = cpu::rope;
    o.qk_norm_rope_cache = cpu::qk_norm_rope_cache;
    o.kv_cache_write = cpu::kv_cache_write;
    o.split_columns = cpu::split_columns;
    o.attention = cpu::attention;
    o.rms_norm_backward = cpu::rms_norm_backward;
    o.rope_backward = cpu::rope_backward;
    o.silu_mul_backward = cpu::silu_mul_backward;
    o.attention_backward = cpu::attention_backward;
    o.embedding_backward = cpu::embedding_backward;
    o.bias_add_backward = cpu::bias_add_backward;
    o.cross_entropy = cpu::cross_entropy;
    return o;
  }();
  return b;
}

std::vector<OpParam> for_each_dtype(const std::vector<OpCase>& cases) {
  std::vector<OpParam> out;
  for (const OpCase& c : cases)
    for (DType t : {DType::f32, DType::bf16}) out.push_back({c, t});
  return out;
}

std::string param_name(const ::testing::TestParamInfo<OpParam>& info) {
  return info.param.op.name + "_" + std::string(dtype_name(info.param.dtype));
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (float& x : v) x = dist(rng);
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::f32 ? t : t.to(dtype);
}

std::vector<double> to_double(const Tensor& t) {
  std::vector<float> f = t.to_f32_vector();
  return std::vector<double>(f.begin(), f.end());
}

double round_as(DType dtype, double v) {
  return dtype == DType::bf16 ? double(bf16_round(float(v))) : v;
}

::testing::AssertionResult all_close(const std::vector<double>& actual,
                                     const std::vector<double>& expected, Tol tol,
                                     const std::vector<double>& slack) {
  if (actual.size() != expected.size() || (!slack.empty() && slack.size() != expected.size()))
    return ::testing::AssertionFailure() << "size " << actual.size() << " != expected size "
                                         << expected.size() << " (slack " << slack.size() << ")";
  int64_t bad = 0, first_bad = -1, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    const double allowed =
        tol.atol + tol.rtol * std::abs(expected[i]) + (slack.empty() ? 0.0 : slack[i]);
    if (!(err <= allowed)) {  // also catches NaN
      ++bad;
      if (first_bad < 0) first_bad = int64_t(i);
      const double excess = std::isnan(err) ? INFINITY : err / std::max(allowed, 1e-300);
      if (worst < 0 || excess > worst_excess) {
        worst_excess = excess;
        worst = int64_t(i);
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << actual.size() << " elements differ (atol " << tol.atol << ", rtol "
     << tol.rtol << "); first at " << first_bad << ": " << actual[size_t(first_bad)] << " vs "
     << expected[size_t(first_bad)] << "; worst at " << worst << ": " << actual[size_t(worst)]
     << " vs " << expected[size_t(worst)] << "; first values:";
  for (size_t i = 0; i < std::min<size_t>(4, actual.size()); ++i)
    os << " (" << actual[i] << ", " << expected[i] << ")";
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << "dtype/size differ";
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  const size_t es = dtype_size(a.dtype());
  for (size_t i = 0; i < a.nbytes(); ++i)
    if (pa[i] != pb[i]) {
      std::vector<float> fa = a.to_f32_vector(), fb = b.to_f32_vector();
      return ::testing::AssertionFailure() << "element " << i / es << " differs: " << fa[i / es]
                                           << " vs " << fb[i / es];
    }
  return ::testing::AssertionSuccess();
}

std::vector<double> numeric_grad(std::vector<double> x,
                                 const std::function<double(const std::vector<double>&)>& f,
                                 double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Tensor rope_table(int64_t positions, int64_t d, double theta) {
  std::vector<float> v(static_cast<size_t>(positions * d));
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double inv_freq = std::pow(theta, -double(2 * i) / double(d));
      v[size_t(p * d + i)] = float(std::cos(double(p) * inv_freq));
      v[size_t(p * d + d / 2 + i)] = float(std::sin(double(p) * inv_freq));
    }
  return Tensor::from_vector(v, {positions, d});
}

}  // namespace kiln::optest
