// Backward kernels against central finite differences of double-precision forward references:
// for a fixed random upstream gradient dy, the kernel's input gradient must equal
// d/dx <dy, f(x)> (and the loss's own derivative for cross-entropy). Inputs a kernel reads "as
// stored" are given in the case's activation dtype; the derivative is taken at the stored values.
#include <cmath>
#include <vector>

#include "op_harness.h"

namespace kiln::optest {
namespace {

constexpr float kEps = 1e-6f;
const Tol kGradTol{2e-5, 2e-4};

void run_rms_norm_backward(const OpBackend& be, DType dt, Tol tol) {
  const int64_t r = 3, h = 24;
  Tensor x = random_tensor({r, h}, dt, 51, -2.f, 2.f);
  Tensor w = random_tensor({h}, dt, 52, 0.5f, 1.5f);
  Tensor dy = random_tensor({r, h}, DType::f32, 53);
  Tensor dx = Tensor::empty({r, h}, DType::f32);
  Tensor dw = random_tensor({h}, DType::f32, 54);  // accumulated into
  const std::vector<double> dw0 = to_double(dw), xv = to_double(x), wv = to_double(w),
                            g = to_double(dy);
  be.rms_norm_backward(x, w, kEps, dy, dx, dw);
  auto f = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    double l = 0;
    for (int64_t i = 0; i < r; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < h; ++j) ss += xs[size_t(i * h + j)] * xs[size_t(i * h + j)];
      const double inv = 1 / std::sqrt(ss / double(h) + double(kEps));
      for (int64_t j = 0; j < h; ++j) l += g[size_t(i * h + j)] * xs[size_t(i * h + j)] * inv * ws[size_t(j)];
    }
    return l;
  };
  EXPECT_TRUE(all_close(dx, numeric_grad(xv, [&](const std::vector<double>& xs) { return f(xs, wv); }), tol)) << "dx";
  std::vector<double> dw_fd = numeric_grad(wv, [&](const std::vector<double>& ws) { return f(xv, ws); });
  for (size_t i = 0; i < dw_fd.size(); ++i) dw_fd[i] += dw0[i];
  EXPECT_TRUE(all_close(dw, dw_fd, tol)) << "dw (accumulated)";
}

void run_rope_backward(const OpBackend& be, DType dt, Tol tol) {
  if (dt != DType::f32) GTEST_SKIP() << "rope is f32-only";
  const int64_t d = 16;
  Tensor table = rope_table(20, d);
  const std::vector<double> cs = to_double(table);
  std::vector<int32_t> pos = {1, 4, 19, 0};
  Tensor positions = Tensor::from_vector(pos, {2, 2});
  Tensor dy = random_tensor({2, 2, 2, d}, DType::f32, 55);
  const std::vector<double> g = to_double(dy), x0 = to_double(random_tensor({2, 2, 2, d}, DType::f32, 56));
  be.rope_backward(dy, positions, table);
  auto f = [&](const std::vector<double>& x) {
    double l = 0;
    for (size_t bt = 0; bt < 4; ++bt)
      for (size_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const size_t o = (bt * 2 + h) * d;
          const double c = cs[size_t(pos[bt] * d + i)], s = cs[size_t(pos[bt] * d + d / 2 + i)];
          const double a = x[o + size_t(i)], b = x[o + size_t(d / 2 + i)];
          l += g[o + size_t(i)] * (a * c - b * s) + g[o + size_t(d / 2 + i)] * (b * c + a * s);
        }
    return l;
  };
  EXPECT_TRUE(all_close(dy, numeric_grad(x0, f), tol));
}

void run_silu_mul_backward(const OpBackend& be, DType dt, Tol tol) {
  const int64_t m = 2, inter = 20;
  Tensor gu = random_tensor({m, 2 * inter}, dt, 57, -5.f, 5.f);
  Tensor dy = random_tensor({m, inter}, DType::f32, 58);
  Tensor dgu = Tensor::empty({m, 2 * inter}, DType::f32);
  be.silu_mul_backward(gu, dy, dgu);
  const std::vector<double> g = to_double(dy);
  auto f = [&](const std::vector<double>& x) {
    double l = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < inter; ++i) {
        const double a = x[size_t(r * 2 * inter + i)], u = x[size_t(r * 2 * inter + inter + i)];
        l += g[size_t(r * inter + i)] * a / (1 + std::exp(-a)) * u;
      }
    return l;
  };
  EXPECT_TRUE(all_close(dgu, numeric_grad(to_double(gu), f), tol));
}

// Attention forward in double (slot_offset 0, causal, kv_mask), as a function of q, k, v.
double attention_loss(int64_t b, int64_t t, int64_t l, int64_t hq, int64_t hkv, int64_t d,
                      const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<int32_t>& mask,
                      const std::vector<double>& dout) {
  const int64_t g = hq / hkv;
  double loss = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t h = 0; h < hq; ++h) {
        const size_t qo = size_t(((bi * t + ti) * hq + h) * d);
        std::vector<double> s;
        std::vector<size_t> vo;
        for (int64_t j = 0; j <= ti; ++j) {
          if (!mask[size_t(bi * l + j)]) continue;
          const size_t ko = size_t(((bi * l + j) * hkv + h / g) * d);
          double x = 0;
          for (int64_t i = 0; i < d; ++i) x += q[qo + size_t(i)] * k[ko + size_t(i)];
          s.push_back(x / std::sqrt(double(d)));
          vo.push_back(ko);
        }
        if (s.empty()) continue;
        double m = -INFINITY, sum = 0;
        for (double x : s) m = std::max(m, x);
        for (double& x : s) sum += (x = std::exp(x - m));
        for (size_t n = 0; n < s.size(); ++n)
          for (int64_t i = 0; i < d; ++i) loss += dout[qo + size_t(i)] * s[n] / sum * v[vo[n] + size_t(i)];
      }
  return loss;
}

void run_attention_backward(const OpBackend& be, DType dt, Tol tol) {
  // GQA, left padding of 2 in row 1 (its first two queries see nothing), L > T.
  const int64_t b = 2, t = 6, l = 7, hq = 4, hkv = 2, d = 8;
  Tensor q = random_tensor({b, t, hq, d}, DType::f32, 61, -2.f, 2.f);
  Tensor k = random_tensor({b, l, hkv, d}, dt, 62, -2.f, 2.f);
  Tensor v = random_tensor({b, l, hkv, d}, dt, 63);
  Tensor dout = random_tensor({b, t, hq, d}, DType::f32, 64);
  std::vector<int32_t> m(size_t(b * l), 1);
  m[size_t(l)] = m[size_t(l + 1)] = 0;
  Tensor mask = Tensor::from_vector(m, {b, l});
  Tensor out = Tensor::empty({b, t, hq, d}, dt);
  be.attention(q, k, v, mask, 0, out);
  Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32);
  Tensor dv = Tensor::empty(k.shape(), DType::f32);
  be.attention_backward(q, k, v, mask, out, dout, dq, dk, dv);
  const std::vector<double> qv = to_double(q), kv = to_double(k), vv = to_double(v), g = to_double(dout);
  auto loss = [&](const std::vector<double>& qs, const std::vector<double>& ks, const std::vector<double>& vs) {
    return attention_loss(b, t, l, hq, hkv, d, qs, ks, vs, m, g);
  };
  EXPECT_TRUE(all_close(dq, numeric_grad(qv, [&](const std::vector<double>& x) { return loss(x, kv, vv); }), tol)) << "dq";
  EXPECT_TRUE(all_close(dk, numeric_grad(kv, [&](const std::vector<double>& x) { return loss(qv, x, vv); }), tol)) << "dk";
  EXPECT_TRUE(all_close(dv, numeric_grad(vv, [&](const std::vector<double>& x) { return loss(qv, kv, x); }), tol)) << "dv";
}

void run_embedding_backward(const OpBackend& be, DType dt, Tol tol) {
  if (dt != DType::f32) GTEST_SKIP() << "gradients are f32";
  const int64_t v = 6, h = 100;
  std::vector<int32_t> id = {2, 5, 2, 0, 2};
  Tensor ids = Tensor::from_vector(id, {5});
  Tensor dy = random_tensor({5, h}, DType::f32, 65);
  Tensor dtable = random_tensor({v, h}, DType::f32, 66);
  const std::vector<double> t0 = to_double(dtable), g = to_double(dy);
  be.embedding_backward(ids, dy, dtable);
  auto f = [&](const std::vector<double>& table) {
    double l = 0;
    for (size_t i = 0; i < id.size(); ++i)
      for (int64_t j = 0; j < h; ++j) l += g[i * size_t(h) + size_t(j)] * table[size_t(id[i] * h + j)];
    return l;
  };
  std::vector<double> want = numeric_grad(t0, f);
  for (size_t i = 0; i < want.size(); ++i) want[i] += t0[i];
  EXPECT_TRUE(all_close(dtable, want, tol));
}

void run_bias_add_backward(const OpBackend& be, DType dt, Tol tol) {
  if (dt != DType::f32) GTEST_SKIP() << "gradients are f32";
  const int64_t m = 7, n = 150;  // more columns than one thread's share
  Tensor dy = random_tensor({m, n}, DType::f32, 81);
  Tensor db = random_tensor({n}, DType::f32, 82);  // accumulated into
  const std::vector<double> g = to_double(dy), b0 = to_double(db);
  be.bias_add_backward(dy, db);
  // d/db <dy, x + b> = column sums of dy.
  auto f = [&](const std::vector<double>& b) {
    double l = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) l += g[size_t(i * n + j)] * b[size_t(j)];
    return l;
  };
  std::vector<double> want = numeric_grad(std::vector<double>(size_t(n), 0.5), f);
  for (size_t j = 0; j < want.size(); ++j) want[j] += b0[j];
  EXPECT_TRUE(all_close(db, want, tol));
}

// bf16 logits (autocast): the same loss as the f32 path on the same (bf16-representable) values,
// and the gradient rounded once to bf16. vocab is odd so rows start at every alignment.
void run_cross_entropy_bf16(const OpBackend& be) {
  const int64_t n = 6, vocab = 1037;
  const float scale = 0.25f;
  Tensor logits = random_tensor({n, vocab}, DType::f32, 68, -4.f, 4.f).to(DType::bf16);
  Tensor wide = logits.to(DType::f32);
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{3, -100, 1036, 0, 517, 1000}, {n});
  Tensor want = Tensor::empty({n, vocab}, DType::f32), got = Tensor::empty({n, vocab}, DType::bf16);
  const double want_loss = be.cross_entropy(wide, labels, scale, &want);
  EXPECT_NEAR(be.cross_entropy(logits, labels, scale, &got), want_loss, 1e-6 * want_loss);
  const auto w = want.to_f32_vector(), g = got.to_f32_vector();
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(g[i], w[i], std::ldexp(std::fabs(w[i]), -8) + 1e-9) << "element " << i;
}

void run_cross_entropy(const OpBackend& be, DType dt, Tol tol) {
  if (dt == DType::bf16) return run_cross_entropy_bf16(be);
  const int64_t n = 5, vocab = 37;
  const float scale = 0.25f;
  Tensor logits = random_tensor({n, vocab}, DType::f32, 67, -4.f, 4.f);
  std::vector<int32_t> lab = {3, -100, 36, 0, -100};
  Tensor labels = Tensor::from_vector(lab, {n});
  auto loss_ref = [&](const std::vector<double>& x) {
    double l = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (lab[size_t(r)] == -100) continue;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, x[size_t(r * vocab + j)]);
      for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[size_t(r * vocab + j)] - m);
      l -= x[size_t(r * vocab + lab[size_t(r)])] - m - std::log(s);  // -log_softmax[label]
    }
    return l;
  };
  const std::vector<double> x = to_double(logits);
  std::vector<double> want = numeric_grad(x, [&](const std::vector<double>& xs) { return scale * loss_ref(xs); });
  Tensor dl = Tensor::empty({n, vocab}, DType::f32);
  const double loss = be.cross_entropy(logits, labels, scale, &dl);
  EXPECT_NEAR(loss, loss_ref(x), 1e-5 * std::abs(loss_ref(x)));
  EXPECT_TRUE(all_close(dl, want, tol)) << "dlogits";
  // Ignored rows have zero gradient exactly; dlogits may alias logits; no-gradient call.
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(dl.data<float>()[vocab + j], 0.f);
  EXPECT_NEAR(be.cross_entropy(logits, labels, scale, nullptr), loss, 1e-12);
  Tensor alias = logits.clone();
  EXPECT_NEAR(be.cross_entropy(alias, labels, scale, &alias), loss, 1e-12);
  EXPECT_TRUE(bitwise_equal(alias, dl));
}

const std::vector<OpCase>& grad_cases() {
  static const std::vector<OpCase> cases = {
      {"rms_norm_backward", {kGradTol, kGradTol}, run_rms_norm_backward},
      {"rope_backward", {kGradTol, kGradTol}, run_rope_backward},
      {"silu_mul_backward", {kGradTol, kGradTol}, run_silu_mul_backward},
      {"attention_backward", {kGradTol, kGradTol}, run_attention_backward},
      {"embedding_backward", {kGradTol, kGradTol}, run_embedding_backward},
      {"bias_add_backward", {kGradTol, kGradTol}, run_bias_add_backward},
      {"cross_entropy", {kGradTol, kGradTol}, run_cross_entropy},
  };
  return cases;
}

class GradOps : public ::testing::TestWithParam<OpParam> {};
TEST_P(GradOps, MatchesFiniteDifferences) {
  GetParam().op.run(cpu_backend(), GetParam().dtype, GetParam().tol());
}
INSTANTIATE_TEST_SUITE_P(Cpu, GradOps, ::testing::ValuesIn(for_each_dtype(grad_cases())), param_name);

// Larger attention backward: 300 queries cross the kernel's 128-query blocks twice, GQA (2 query
// heads per kv head), left padding of 3. Checked against the double reference: <dv, v> equals
// <dout, out> exactly (linear in v), and the directional derivatives along random directions of q
// and k match finite differences.
TEST(AttentionBackward, LargerShapeDvAndDqConsistent) {
  const int64_t b = 1, t = 300, hq = 4, hkv = 2, d = 32;
  Tensor q = random_tensor({b, t, hq, d}, DType::f32, 71);
  Tensor k = random_tensor({b, t, hkv, d}, DType::f32, 72);
  Tensor v = random_tensor({b, t, hkv, d}, DType::f32, 73);
  Tensor dout = random_tensor({b, t, hq, d}, DType::f32, 74);
  std::vector<int32_t> m(size_t(t), 1);
  m[0] = m[1] = m[2] = 0;
  Tensor mask = Tensor::from_vector(m, {b, t});
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  cpu::attention(q, k, v, mask, 0, out);
  Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32);
  Tensor dv = Tensor::empty(k.shape(), DType::f32);
  cpu::attention_backward(q, k, v, mask, out, dout, dq, dk, dv);
  const std::vector<double> qv = to_double(q), kv = to_double(k), vv = to_double(v), g = to_double(dout);
  // <dout, out> is linear in v, so <dv, v> equals it exactly.
  const double lin = attention_loss(b, t, t, hq, hkv, d, qv, kv, vv, m, g);
  EXPECT_NEAR(dot(to_double(dv), vv), lin, 1e-4 * std::abs(lin) + 1e-5);
  // Directional derivatives along q and k (random directions) by central finite differences.
  const std::vector<double> dir_q = to_double(random_tensor(q.shape(), DType::f32, 75));
  const std::vector<double> dir_k = to_double(random_tensor(k.shape(), DType::f32, 76));
  auto along = [&](const std::vector<double>& dir, bool of_q) {
    auto at = [&](double eps) {
      std::vector<double> x = of_q ? qv : kv;
      for (size_t i = 0; i < x.size(); ++i) x[i] += eps * dir[i];
      return of_q ? attention_loss(b, t, t, hq, hkv, d, x, kv, vv, m, g)
                  : attention_loss(b, t, t, hq, hkv, d, qv, x, vv, m, g);
    };
    return (at(1e-4) - at(-1e-4)) / 2e-4;
  };
  const double fd_q = along(dir_q, true), fd_k = along(dir_k, false);
  EXPECT_NEAR(dot(to_double(dq), dir_q), fd_q, 1e-4 * std::abs(fd_q) + 1e-4);
  EXPECT_NEAR(dot(to_double(dk), dir_k), fd_k, 1e-4 * std::abs(fd_k) + 1e-4);
}

}  // namespace
}  // namespace kiln::optest
