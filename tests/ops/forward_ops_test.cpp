// Forward kernels against double-precision references, one table row per op, run for f32 and bf16
// activations. Ops that are f32-only by contract skip their bf16 run.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backends/cpu/norm.h"
#include "op_harness.h"

namespace kiln::optest {
namespace {

constexpr float kEps = 1e-6f;
double silu_d(double g) { return g / (1 + std::exp(-g)); }

void run_embedding(const OpBackend& be, DType dt, Tol tol) {
  const int64_t v = 7, h = 40;
  Tensor table = random_tensor({v, h}, dt, 1);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, 0, 6, 3, 1}, {5});
  Tensor y = Tensor::empty({5, h}, DType::f32);
  be.embedding(ids, table, y);
  std::vector<double> tv = to_double(table), ref;
  for (int32_t id : {3, 0, 6, 3, 1})
    for (int64_t i = 0; i < h; ++i) ref.push_back(tv[size_t(id * h + i)]);
  EXPECT_TRUE(all_close(y, ref, tol));
}

// Reference Qwen3RMSNorm: f32 normalisation, normed cast to the activation dtype, times weight.
std::vector<double> rms_norm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                 DType normed_dtype, DType out_dtype) {
  const size_t h = w.size();
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / h; ++r) {
    double ss = 0;
    for (size_t i = 0; i < h; ++i) ss += x[r * h + i] * x[r * h + i];
    const double inv = 1 / std::sqrt(ss / double(h) + double(kEps));
    for (size_t i = 0; i < h; ++i)
      y[r * h + i] = round_as(out_dtype, round_as(normed_dtype, x[r * h + i] * inv) * w[i]);
  }
  return y;
}

void run_rms_norm(const OpBackend& be, DType dt, Tol tol) {
  for (int64_t h : {72, 128}) {
    Tensor x = random_tensor({3, h}, dt, 2, -2.f, 2.f);
    Tensor w = random_tensor({h}, dt, 3, 0.5f, 1.5f);
    Tensor y = Tensor::empty({3, h}, dt);
    be.rms_norm(x, w, kEps, y);
    EXPECT_TRUE(all_close(y, rms_norm_ref(to_double(x), to_double(w), dt, dt), tol)) << "H " << h;
    // In place (y aliases x).
    Tensor x2 = x.clone();
    be.rms_norm(x2, w, kEps, x2);
    EXPECT_TRUE(bitwise_equal(x2, y)) << "in-place H " << h;
  }
}

void run_add(const OpBackend& be, DType dt, Tol tol) {
  if (dt != DType::f32) GTEST_SKIP() << "add is f32-only";
  Tensor a = random_tensor({5000}, dt, 4), b = random_tensor({5000}, dt, 5);
  Tensor y = Tensor::empty({5000}, DType::f32);
  be.add(a, b, y);
  std::vector<double> da = to_double(a), db = to_double(b), ref(da.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(float(da[i]) + float(db[i]));
  EXPECT_TRUE(all_close(y, ref, tol));
  be.add(a, b, a);  // aliasing output
  EXPECT_TRUE(all_close(a, ref, tol));
}

void run_silu_mul(const OpBackend& be, DType dt, Tol tol) {
  // inter: the row kernel's 4-vector steps, then single vectors, then a scalar tail.
  const int64_t m = 3, inter = 77;
  Tensor gu = random_tensor({m, 2 * inter}, DType::f32, 6, -6.f, 6.f);
  Tensor y = Tensor::empty({m, inter}, dt);
  be.silu_mul(gu, y);
  std::vector<double> g = to_double(gu), ref;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < inter; ++i)
      ref.push_back(round_as(dt, silu_d(g[size_t(r * 2 * inter + i)]) * g[size_t(r * 2 * inter + inter + i)]));
  EXPECT_TRUE(all_close(y, ref, tol));
  // Unfused: silu then mul (f32 intermediate), within one rounding of the fused result.
  Tensor gate = Tensor::empty({m, inter}, DType::f32), up = Tensor::empty({m, inter}, DType::f32);
  be.split_columns(gu, 0, gate);
  be.split_columns(gu, inter, up);
  Tensor s = Tensor::empty({m, inter}, DType::f32), y2 = Tensor::empty({m, inter}, dt);
  be.silu(gate, s);
  be.mul(s, up, y2);
  EXPECT_TRUE(all_close(y2, to_double(y), tol)) << "unfused vs fused";
  // bf16 gate_up, as a bf16 model's: widened in registers.
  Tensor gub = random_tensor({m, 2 * inter}, DType::bf16, 16, -6.f, 6.f);
  be.silu_mul(gub, y);
  g = to_double(gub);
  ref.clear();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < inter; ++i)
      ref.push_back(round_as(dt, silu_d(g[size_t(r * 2 * inter + i)]) * g[size_t(r * 2 * inter + inter + i)]));
  EXPECT_TRUE(all_close(y, ref, tol)) << "bf16 gate_up";
}

void run_silu(const OpBackend& be, DType dt, Tol tol) {
  Tensor x = random_tensor({2, 37}, DType::f32, 7, -20.f, 20.f);
  Tensor y = Tensor::empty({2, 37}, dt);
  be.silu(x, y);
  std::vector<double> ref;
  for (double g : to_double(x)) ref.push_back(round_as(dt, silu_d(g)));
  EXPECT_TRUE(all_close(y, ref, tol));
}

void run_mul(const OpBackend& be, DType dt, Tol tol) {
  Tensor a = random_tensor({3, 50}, DType::f32, 8), b = random_tensor({3, 50}, DType::f32, 9);
  Tensor y = Tensor::empty({3, 50}, dt);
  be.mul(a, b, y);
  std::vector<double> da = to_double(a), db = to_double(b), ref;
  for (size_t i = 0; i < da.size(); ++i) ref.push_back(round_as(dt, da[i] * db[i]));
  EXPECT_TRUE(all_close(y, ref, tol));
  // Mixed input dtypes (bf16 a, f32 b), widened in registers.
  Tensor ab = random_tensor({3, 77}, DType::bf16, 10), bf = random_tensor({3, 77}, DType::f32, 11);
  Tensor y3 = Tensor::empty({3, 77}, dt);
  be.mul(ab, bf, y3);
  da = to_double(ab);
  db = to_double(bf);
  ref.clear();
  for (size_t i = 0; i < da.size(); ++i) ref.push_back(round_as(dt, da[i] * db[i]));
  EXPECT_TRUE(all_close(y3, ref, tol)) << "bf16 x f32";
}

// x [B, T, H, D] rotated with the table rows at positions [B, T] (rotate_half convention).
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int32_t>& pos,
                             const Tensor& table, int64_t heads, int64_t d, bool inverse = false) {
  std::vector<double> cs = to_double(table), y(x.size());
  const int64_t half = d / 2;
  for (size_t bt = 0; bt < pos.size(); ++bt)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t o = (bt * size_t(heads) + size_t(h)) * size_t(d);
      for (int64_t i = 0; i < half; ++i) {
        const double c = cs[size_t(pos[bt] * d + i)], s = cs[size_t(pos[bt] * d + half + i)] * (inverse ? -1 : 1);
        const double a = x[o + size_t(i)], b = x[o + size_t(half + i)];
        y[o + size_t(i)] = a * c - b * s;
        y[o + size_t(half + i)] = b * c + a * s;
      }
    }
  return y;
}

void run_rope(const OpBackend& be, DType dt, Tol tol) {
  if (dt != DType::f32) GTEST_SKIP() << "rope is f32-only";
  for (int64_t d : {8, 64}) {
    Tensor table = rope_table(50, d);
    std::vector<int32_t> pos = {0, 5, 49, 7, 3, 12};
    Tensor positions = Tensor::from_vector(pos, {2, 3});
    Tensor x = random_tensor({2, 3, 2, d}, DType::f32, 10);
    std::vector<double> ref = rope_ref(to_double(x), pos, table, 2, d);
    be.rope(x, positions, table);
    EXPECT_TRUE(all_close(x, ref, tol)) << "D " << d;
  }
}

void run_split_columns(const OpBackend& be, DType dt, Tol) {
  if (dt != DType::f32) GTEST_SKIP() << "split_columns is f32-only";
  Tensor x = random_tensor({4, 30}, DType::f32, 11);
  Tensor y = Tensor::empty({4, 7}, DType::f32);
  be.split_columns(x, 20, y);
  std::vector<double> xv = to_double(x), ref;
  for (int r = 0; r < 4; ++r)
    for (int c = 20; c < 27; ++c) ref.push_back(xv[size_t(r * 30 + c)]);
  EXPECT_TRUE(all_close(y, ref, {0, 0}));
}

void run_kv_cache_write(const OpBackend& be, DType dt, Tol tol) {
  Tensor x = random_tensor({2, 3, 2, 16}, DType::f32, 12);
  Tensor cache = Tensor::zeros({2, 8, 2, 16}, dt);
  be.kv_cache_write(x, 4, cache);
  std::vector<double> xv = to_double(x), ref(size_t(cache.numel()), 0.0);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      for (int i = 0; i < 32; ++i)
        ref[size_t((b * 8 + 4 + t) * 32 + i)] = round_as(dt, xv[size_t((b * 3 + t) * 32 + i)]);
  EXPECT_TRUE(all_close(cache, ref, tol));
}

// Reference for the fused prologue: per-head RMSNorm (f32 output, so no rounding), RoPE, caches
// rounded once on store.
void run_qk_norm_rope_cache(const OpBackend& be, DType dt, Tol tol) {
  const int64_t b = 2, t = 3, hq = 4, hkv = 2, l = 6, off = 2;
  // 64 and 128: the head dims the epilogue keeps in registers (rope.cpp); 32 the helpers' path.
  for (int64_t d : {32, 64, 128})
  for (bool with_norm : {true, false}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    Tensor qkv = random_tensor({b * t, (hq + 2 * hkv) * d}, DType::f32, 13, -2.f, 2.f);
    Tensor qn = with_norm ? random_tensor({d}, dt, 14, 0.5f, 1.5f) : Tensor();
    Tensor kn = with_norm ? random_tensor({d}, dt, 15, 0.5f, 1.5f) : Tensor();
    std::vector<int32_t> pos = {2, 3, 4, 7, 8, 9};
    Tensor positions = Tensor::from_vector(pos, {b, t});
    Tensor table = rope_table(16, d);
    Tensor q = Tensor::empty({b, t, hq, d}, DType::f32);
    Tensor kc = Tensor::zeros({b, l, hkv, d}, dt), vc = Tensor::zeros({b, l, hkv, d}, dt);
    be.qk_norm_rope_cache(qkv, qn, kn, kEps, positions, table, off, q, kc, vc);

    std::vector<double> in = to_double(qkv), qs, ks, vs;
    const int64_t row = (hq + 2 * hkv) * d;
    for (int64_t r = 0; r < b * t; ++r) {
      qs.insert(qs.end(), in.begin() + r * row, in.begin() + r * row + hq * d);
      ks.insert(ks.end(), in.begin() + r * row + hq * d, in.begin() + r * row + (hq + hkv) * d);
      vs.insert(vs.end(), in.begin() + r * row + (hq + hkv) * d, in.begin() + (r + 1) * row);
    }
    if (with_norm) {
      qs = rms_norm_ref(qs, to_double(qn), DType::f32, DType::f32);
      ks = rms_norm_ref(ks, to_double(kn), DType::f32, DType::f32);
    }
    qs = rope_ref(qs, pos, table, hq, d);
    ks = rope_ref(ks, pos, table, hkv, d);
    EXPECT_TRUE(all_close(q, qs, {1e-5, 1e-5})) << "q, norm " << with_norm;
    std::vector<double> kref(size_t(kc.numel()), 0.0), vref(size_t(vc.numel()), 0.0);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t ti = 0; ti < t; ++ti)
        for (int64_t i = 0; i < hkv * d; ++i) {
          const size_t dst = size_t((bi * l + off + ti) * hkv * d + i), src = size_t((bi * t + ti) * hkv * d + i);
          kref[dst] = round_as(dt, ks[src]);
          vref[dst] = round_as(dt, vs[src]);
        }
    EXPECT_TRUE(all_close(kc, kref, {tol.atol + 1e-5, tol.rtol + 1e-5})) << "k, norm " << with_norm;
    EXPECT_TRUE(all_close(vc, vref, {0, 0})) << "v, norm " << with_norm;

    // Fused == unfused composition (split, rms_norm per head, rope, kv_cache_write), bit for bit.
    Tensor q2 = Tensor::empty({b * t, hq * d}, DType::f32), k2 = Tensor::empty({b * t, hkv * d}, DType::f32);
    Tensor v2 = Tensor::empty({b * t, hkv * d}, DType::f32);
    be.split_columns(qkv, 0, q2);
    be.split_columns(qkv, hq * d, k2);
    be.split_columns(qkv, (hq + hkv) * d, v2);
    Tensor q2h = q2.reshape({b * t * hq, d}), k2h = k2.reshape({b * t * hkv, d});
    if (with_norm) {
      be.rms_norm(q2h, qn, kEps, q2h);
      be.rms_norm(k2h, kn, kEps, k2h);
    }
    Tensor q4 = q2.reshape({b, t, hq, d}), k4 = k2.reshape({b, t, hkv, d});
    be.rope(q4, positions, table);
    be.rope(k4, positions, table);
    Tensor kc2 = Tensor::zeros({b, l, hkv, d}, dt), vc2 = Tensor::zeros({b, l, hkv, d}, dt);
    be.kv_cache_write(k4, off, kc2);
    be.kv_cache_write(v2.reshape({b, t, hkv, d}), off, vc2);
    EXPECT_TRUE(bitwise_equal(q, q4)) << "fused q vs unfused, norm " << with_norm;
    EXPECT_TRUE(bitwise_equal(kc, kc2)) << "fused k cache vs unfused, norm " << with_norm;
    EXPECT_TRUE(bitwise_equal(vc, vc2)) << "fused v cache vs unfused, norm " << with_norm;
  }
}

// bf16 tolerances: one rounding of the result (8e-3 relative covers a one-ulp flip at a rounding
// boundary); rms_norm rounds twice (normed, then product) but the reference rounds the same way.
const std::vector<OpCase>& forward_cases() {
  static const std::vector<OpCase> cases = {
      {"embedding", {{0, 0}, {0, 0}}, run_embedding},
      {"rms_norm", {{1e-6, 1e-5}, {1e-6, 8e-3}}, run_rms_norm},
      {"add", {{0, 0}, {0, 0}}, run_add},
      {"silu_mul", {{1e-6, 1e-5}, {1e-6, 8e-3}}, run_silu_mul},
      {"silu", {{1e-6, 1e-5}, {1e-6, 8e-3}}, run_silu},
      {"mul", {{1e-7, 1e-6}, {1e-7, 8e-3}}, run_mul},
      {"rope", {{1e-6, 1e-5}, {1e-6, 1e-5}}, run_rope},
      {"split_columns", {{0, 0}, {0, 0}}, run_split_columns},
      {"kv_cache_write", {{0, 0}, {0, 0}}, run_kv_cache_write},
      {"qk_norm_rope_cache", {{0, 0}, {1e-6, 8e-3}}, run_qk_norm_rope_cache},
  };
  return cases;
}

class ForwardOps : public ::testing::TestWithParam<OpParam> {};
TEST_P(ForwardOps, MatchesReference) { GetParam().op.run(cpu_backend(), GetParam().dtype, GetParam().tol()); }
INSTANTIATE_TEST_SUITE_P(Cpu, ForwardOps, ::testing::ValuesIn(for_each_dtype(forward_cases())),
                         param_name);

// Transformers' bf16 RMSNorm rounds the normed value before the weight multiply; a kernel that
// multiplied in f32 and rounded once would differ from this bit pattern on some elements.
TEST(RmsNorm, Bf16RoundsNormedBeforeWeight) {
  const int64_t h = 64;
  Tensor x = random_tensor({4, h}, DType::bf16, 21, -3.f, 3.f);
  Tensor w = random_tensor({h}, DType::bf16, 22, 0.3f, 2.f);
  Tensor y = Tensor::empty({4, h}, DType::bf16);
  cpu::rms_norm(x, w, kEps, y);
  std::vector<float> xv = x.to_f32_vector(), wv = w.to_f32_vector(), yv = y.to_f32_vector();
  int64_t mismatches = 0, single_rounding_mismatches = 0;
  for (int64_t r = 0; r < 4; ++r) {
    float ss = 0;
    for (int64_t i = 0; i < h; ++i) ss += xv[size_t(r * h + i)] * xv[size_t(r * h + i)];
    const float inv = 1.f / std::sqrt(ss / float(h) + kEps);
    for (int64_t i = 0; i < h; ++i) {
      const float want = bf16_round(bf16_round(xv[size_t(r * h + i)] * inv) * wv[size_t(i)]);
      // The f32 sum order may differ from the kernel's; allow one-ulp flips but count them.
      if (want != yv[size_t(r * h + i)]) ++mismatches;
      if (bf16_round(xv[size_t(r * h + i)] * inv * wv[size_t(i)]) != yv[size_t(r * h + i)])
        ++single_rounding_mismatches;
      EXPECT_NEAR(yv[size_t(r * h + i)], want, std::abs(want) * 8e-3 + 1e-6);
    }
  }
  EXPECT_LE(mismatches, 4 * h / 16);
  // The test can tell the two semantics apart: rounding once disagrees far more often.
  EXPECT_GT(single_rounding_mismatches, 4 * h / 16);
}

TEST(RmsNorm, MixedDtypes) {
  // f32 residual stream in, bf16 activations out (the usual decoder-layer input norm).
  Tensor x = random_tensor({2, 48}, DType::f32, 23, -2.f, 2.f);
  Tensor w = random_tensor({48}, DType::f32, 24, 0.5f, 1.5f);
  Tensor y = Tensor::empty({2, 48}, DType::bf16);
  cpu::rms_norm(x, w, kEps, y);
  EXPECT_TRUE(all_close(y, rms_norm_ref(to_double(x), to_double(w), DType::bf16, DType::bf16),
                        {1e-6, 8e-3}));
}

// A norm row written straight to bf16 (a bf16 model's input norms) has the bits of the f32 row
// rounded by store_row, with and without the normed value's rounding, vector lanes and tail alike.
TEST(RmsNorm, Bf16RowEqualsTheF32RowStored) {
  const int64_t h = 72;  // 4 vectors of 16 (9 of 8) and, with 16 lanes, a tail of 8
  const Tensor x = random_tensor({h}, DType::f32, 25, -3.f, 3.f);
  const std::vector<float> w = random_tensor({h}, DType::f32, 26, 0.3f, 2.f).to_f32_vector();
  for (bool round_normed : {false, true}) {
    std::vector<float> f32_row(size_t(h), 0.f);
    std::vector<bf16_t> stored(static_cast<size_t>(h)), direct(static_cast<size_t>(h));
    cpu::detail::rms_norm_row(x.data<float>(), w.data(), h, kEps, round_normed, f32_row.data());
    cpu::detail::store_row(f32_row.data(), h, stored.data(), DType::bf16, 0);
    cpu::detail::rms_norm_row(x.data<float>(), w.data(), h, kEps, round_normed, direct.data());
    EXPECT_EQ(stored, direct) << "round_normed " << round_normed;
  }
}

// The vector kernels' own f32 -> bf16 stores (16 or 8 lanes) round exactly as f32_to_bf16 does:
// ties to even, NaN kept as a NaN, infinities, signed zeros and denormals through unchanged.
TEST(Mul, Bf16OutputRoundsLikeTheScalarConversion) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {
      1.f + 0x1p-8f, 1.f + 0x1p-7f + 0x1p-8f, -(1.f + 0x1p-8f), 1.f + 0x1p-8f + 0x1p-20f,  // ties
      nan, -nan, inf, -inf, 0.f, -0.f, 1e-40f, -3e-39f, 3.3895e38f, -3.4e38f, 65504.f, 0.1f,
      std::bit_cast<float>(0x7fffffffu)};  // a NaN whose rounding carry would reach the sign bit
  std::vector<float> av;  // vector lanes and a scalar tail
  for (int rep = 0; rep < 5; ++rep) av.insert(av.end(), special.begin(), special.end());
  av.resize(av.size() - 3);
  const int64_t n = int64_t(av.size());
  Tensor a = Tensor::from_vector(av, {1, n});
  Tensor one = Tensor::from_vector(std::vector<float>(size_t(n), 1.f), {1, n});
  Tensor y = Tensor::empty({1, n}, DType::bf16);
  cpu::mul(a, one, y);
  for (int64_t i = 0; i < n; ++i) {
    const bf16_t got = y.data<bf16_t>()[i], want = f32_to_bf16(av[size_t(i)]);
    if (std::isnan(av[size_t(i)]))
      EXPECT_TRUE(std::isnan(bf16_to_f32(got))) << "element " << i;
    else
      EXPECT_EQ(got, want) << "element " << i << " (" << av[size_t(i)] << ")";
  }
}

TEST(Embedding, RejectsOutOfRangeId) {
  Tensor table = random_tensor({4, 8}, DType::f32, 25);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 4}, {2});
  Tensor y = Tensor::empty({2, 8}, DType::f32);
  EXPECT_THROW(cpu::embedding(ids, table, y), InternalError);
}

}  // namespace
}  // namespace kiln::optest
