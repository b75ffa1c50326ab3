// linear() and PackedLinear against a double-precision reference, for both compute dtypes, the
// decode (GEMV, M <= 8) and prefill (oneDNN) paths, odd shapes (K not a multiple of 32, N not a
// multiple of 64), residual epilogues (separate and aliasing y), bf16 output and pack_concat.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "tests/ops/bf16_arithmetic.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"

namespace kiln::cpu {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23);  // [-1, 1)
  }
  return v;
}

// Rounds to bf16 and back (round to nearest even), as the bf16 compute path does to x and W.
std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

struct Reference {
  std::vector<double> y;    // [M, N]
  std::vector<double> mag;  // sum_k |x||w|, the scale of the rounding error
};

Reference reference(const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                    int64_t N, int64_t K) {
  Reference r{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        double p = double(x[m * K + k]) * double(w[n * K + k]);
        s += p;
        a += std::fabs(p);
      }
      r.y[m * N + n] = s;
      r.mag[m * N + n] = a;
    }
  }
  return r;
}

// Max |got - ref| / tolerance over all elements (<= 1 passes), so a failure reports how far off.
// The reference multiplies the same (bf16-rounded where the kernel rounds) inputs exactly, so the
// tolerance only covers f32 accumulation (2^-12 of sum |x||w|, loose for K <= 1024) plus the final
// rounding of a bf16 output (2^-8 relative).
double worst_ratio(const std::vector<float>& got, const Reference& ref, DType out) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = ref.mag[i] * std::ldexp(1.0, -12);
    if (out == DType::bf16) tol += std::fabs(ref.y[i]) * std::ldexp(1.0, -8);
    tol += 1e-6;
    worst = std::max(worst, std::fabs(double(got[i]) - ref.y[i]) / tol);
  }
  return worst;
}

struct Case {
  DType compute;
  int64_t M, N, K;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(dtype_name(c.compute)) + "_M" + std::to_string(c.M) + "_N" +
         std::to_string(c.N) + "_K" + std::to_string(c.K);
}

class LinearTest : public testing::TestWithParam<Case> {};

TEST_P(LinearTest, MatchesReference) {
  test::for_each_bf16_gemm_arithmetic([&] {
    const auto [compute, M, N, K] = GetParam();
    const auto wv = random_values(N * K, 1), xv = random_values(M * K, 2);
    const auto rv = random_values(M * N, 3);
    auto w = PackedLinear::pack(Tensor::from_vector(wv, {N, K}), compute);
    EXPECT_EQ(w->out_features(), N);
    EXPECT_EQ(w->in_features(), K);
    EXPECT_EQ(w->compute_dtype(), compute);
    EXPECT_GE(w->bytes(), size_t(N * K) * dtype_size(compute));
    // Packing pads to 64 x 32 blocks at most: a bounded memory overhead.
    EXPECT_LE(w->bytes(), size_t((N + 63) / 64 * 64 * ((K + 31) / 32 * 32)) * dtype_size(compute));

    for (DType xt : {DType::f32, DType::bf16}) {
      // bf16 compute rounds x and W; a bf16 x is rounded already.
      const bool rx = compute == DType::bf16 || xt == DType::bf16;
      const auto xr = rx ? round_bf16(xv) : xv;
      const auto wr = compute == DType::bf16 ? round_bf16(wv) : wv;
      const Reference plain = reference(xr, wr, M, N, K);
      Reference with_res = plain;
      for (size_t i = 0; i < rv.size(); ++i) with_res.y[i] += rv[i];
      Tensor x = Tensor::from_vector(xv, {M, K}).to(xt);
      for (DType yt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string("x ") + std::string(dtype_name(xt)) + ", y " +
                     std::string(dtype_name(yt)));
        Tensor y = Tensor::empty({M, N}, yt);
        linear(x, *w, y);
        EXPECT_LE(worst_ratio(y.to_f32_vector(), plain, yt), 1.0);
        // Residual in a separate tensor (binary-add epilogue), y of either dtype.
        Tensor res = Tensor::from_vector(rv, {M, N});
        linear(x, *w, y, &res);
        EXPECT_LE(worst_ratio(y.to_f32_vector(), with_res, yt), 1.0);
      }
      // Residual aliasing y (in-place add, the fused residual of a transformer block).
      Tensor y = Tensor::from_vector(rv, {M, N});
      linear(x, *w, y, &y);
      EXPECT_LE(worst_ratio(y.to_f32_vector(), with_res, DType::f32), 1.0);
    }
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType c : {DType::bf16, DType::f32}) {
    // The GEMV's rows in one walk of a block (up to 8) and in two (9-16); the GEMM past 16.
    for (int64_t m : {1, 2, 3, 7, 8, 14, 16, 17, 33, 128}) out.push_back({c, m, 1000, 200});
    // Prefill past one block of the bf16 GEMM kernel's rows (at most 128) and, on its FMA tiles,
    // of k (1024); the vdpbf16ps tiles take a packed weight's K in one block, past 1024 here.
    out.push_back({c, 200, 150, 1100});
    for (int64_t m : {1, 5, 9}) {
      out.push_back({c, m, 64, 32});
      out.push_back({c, m, 17, 1});
      out.push_back({c, m, 130, 70});
      out.push_back({c, m, 129, 1024});
    }
    // Decode GEMVs at the down projection's width (K = 3072: 384 KiB blocks), one walk of each
    // block and several.
    for (int64_t m : {1, 2, 4, 8, 9, 16}) out.push_back({c, m, 200, 3072});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest, testing::ValuesIn(cases()), case_name);

// The portable bf16 kernel (what linear() runs without AVX512_BF16, where oneDNN has no bf16
// either) in both of its forms, whatever this machine's linear() uses: plain C++, and AVX2 where
// the CPU has it. Weights packed per 64-column block as linear_dnnl.h lays them out.
TEST(Linear, PortableBf16KernelMatchesReference) {
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const Shape3 sh : {Shape3{1, 130, 70}, Shape3{2, 64, 32}, Shape3{3, 200, 1030},
                          Shape3{4, 129, 96}, Shape3{5, 70, 64}, Shape3{9, 300, 200},
                          Shape3{100, 130, 600},
                          // x over 3 MB in panels: the AVX2 GEMM runs it in two passes over rows.
                          Shape3{389, 70, 2060}}) {
    const auto [M, N, K] = sh;
    const int64_t kp = detail::round_up(K, detail::kBlockK);
    const int64_t nblocks = (N + detail::kBlockN - 1) / detail::kBlockN;
    const auto wr = round_bf16(random_values(N * K, 4)), xr = round_bf16(random_values(M * K, 5));
    const auto rv = random_values(M * N, 6);
    std::vector<uint16_t> wb(size_t(N * K)), xb(size_t(M * kp), 0);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wr[i]);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) xb[size_t(m * kp + k)] = f32_to_bf16(xr[size_t(m * K + k)]);
    alignas(64) static uint16_t packed[8 * 1056 * 64];
    ASSERT_LE(nblocks * kp * detail::kBlockN, int64_t(sizeof(packed) / 2));
    std::fill(packed, packed + nblocks * kp * detail::kBlockN, uint16_t(0));
    for (int64_t b = 0; b < nblocks; ++b)
      detail::pack_b_panels(wb.data() + b * detail::kBlockN * K, K, /*trans=*/true, K,
                            std::min<int64_t>(detail::kBlockN, N - b * detail::kBlockN),
                            packed + b * kp * detail::kBlockN);
    const Reference plain = reference(xr, wr, M, N, K);
    Reference with_res = plain;
    for (size_t i = 0; i < rv.size(); ++i) with_res.y[i] += rv[i];
    for (const bool vector : {false, true}) {
      SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                   std::to_string(K) + (vector ? " vector" : " scalar"));
      if (vector && !detail::cpu_has_avx2_fma()) continue;
      std::vector<float> y(size_t(M * N));
      detail::linear_bf16_portable(xb.data(), M, kp, packed, N, y.data(), false, nullptr, vector);
      EXPECT_LE(worst_ratio(y, plain, DType::f32), 1.0);
      std::vector<uint16_t> yb(size_t(M * N));
      detail::linear_bf16_portable(xb.data(), M, kp, packed, N, yb.data(), true, rv.data(), vector);
      std::vector<float> ybf(yb.size());
      for (size_t i = 0; i < yb.size(); ++i) ybf[i] = bf16_to_f32(yb[i]);
      EXPECT_LE(worst_ratio(ybf, with_res, DType::bf16), 1.0);
      std::vector<float> acc = rv;  // residual aliasing y
      detail::linear_bf16_portable(xb.data(), M, kp, packed, N, acc.data(), false, acc.data(),
                                   vector);
      EXPECT_LE(worst_ratio(acc, with_res, DType::f32), 1.0);
    }
  }
}

TEST(Linear, BatchedInputShape) {
  // x [B, T, K] is treated as [B*T, K].
  const auto wv = random_values(48 * 40, 4), xv = random_values(2 * 3 * 40, 5);
  auto w = PackedLinear::pack(Tensor::from_vector(wv, {48, 40}), DType::bf16);
  Tensor y3 = Tensor::empty({2, 3, 48}, DType::f32), y2 = Tensor::empty({6, 48}, DType::f32);
  linear(Tensor::from_vector(xv, {2, 3, 40}), *w, y3);
  linear(Tensor::from_vector(xv, {6, 40}), *w, y2);
  EXPECT_EQ(y3.to_f32_vector(), y2.to_f32_vector());
}

// A fused weight's columns equal its parts packed apart: parts in mixed dtypes (converted first),
// and parts all in bf16, read in place (whole 64-row blocks inside one part, a block across two).
void expect_pack_concat_equals_separate_packs(const std::vector<int64_t>& ns, bool all_bf16) {
  const int64_t K = 200;
  std::vector<Tensor> ws;
  std::vector<std::shared_ptr<PackedLinear>> parts;
  int64_t total = 0;
  for (size_t i = 0; i < ns.size(); ++i) {
    ws.push_back(Tensor::from_vector(random_values(ns[i] * K, 10 + uint32_t(i)), {ns[i], K}));
    if (all_bf16 || i == 1) ws.back() = ws.back().to(DType::bf16);
    parts.push_back(PackedLinear::pack(ws.back(), DType::bf16));
    total += ns[i];
  }
  auto fused = PackedLinear::pack_concat(ws, DType::bf16);
  ASSERT_EQ(fused->out_features(), total);
  ASSERT_EQ(fused->in_features(), K);
  for (int64_t M : {1, 3, 40}) {
    SCOPED_TRACE("M " + std::to_string(M));
    Tensor x = Tensor::from_vector(random_values(M * K, 20), {M, K});
    Tensor yf = Tensor::empty({M, total}, DType::f32);
    linear(x, *fused, yf);
    const auto got = yf.to_f32_vector();
    int64_t col = 0;
    for (size_t i = 0; i < ns.size(); ++i) {
      Tensor yp = Tensor::empty({M, ns[i]}, DType::f32);
      linear(x, *parts[i], yp);
      const auto want = yp.to_f32_vector();
      double worst = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < ns[i]; ++n)
          worst =
              std::max(worst, double(std::fabs(got[m * total + col + n] - want[m * ns[i] + n])));
      EXPECT_LE(worst, 1e-4) << "part " << i;
      col += ns[i];
    }
  }
}

TEST(Linear, PackConcatEqualsSeparatePacks) {
  expect_pack_concat_equals_separate_packs({100, 37, 64}, /*all_bf16=*/false);
}

TEST(Linear, PackConcatOfBf16PartsEqualsSeparatePacks) {
  expect_pack_concat_equals_separate_packs({128, 64, 100, 37}, /*all_bf16=*/true);
}

TEST(Linear, PackFromBf16EqualsPackFromF32) {
  // Weights already representable in bf16 pack to the same bits from either source dtype.
  const int64_t N = 70, K = 50;
  Tensor wb = Tensor::from_vector(random_values(N * K, 30), {N, K}).to(DType::bf16);
  auto a = PackedLinear::pack(wb, DType::bf16), b = PackedLinear::pack(wb.to(DType::f32),
                                                                       DType::bf16);
  Tensor x = Tensor::from_vector(random_values(2 * K, 31), {2, K});
  Tensor ya = Tensor::empty({2, N}, DType::f32), yb = Tensor::empty({2, N}, DType::f32);
  linear(x, *a, ya);
  linear(x, *b, yb);
  EXPECT_EQ(ya.to_f32_vector(), yb.to_f32_vector());
}

TEST(Linear, EmbeddingFromPackedCopyEqualsTableLookup) {
  // A tied table is looked up in the lm_head's packed copy: the same values as the table's rows,
  // for rows in every 64-row block (the last one partial) and K odd (a half-filled last k pair).
  const int64_t V = 150, K = 37;
  const std::vector<int32_t> rows = {0, 1, 63, 64, 65, 127, 128, 149, 64, 0};
  Tensor ids = Tensor::from_vector(rows, {int64_t(rows.size())});
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor table = Tensor::from_vector(random_values(V * K, 50), {V, K}).to(dtype);
    auto packed = PackedLinear::pack(table, dtype);
    Tensor want = Tensor::empty({int64_t(rows.size()), K}, DType::f32);
    Tensor got = Tensor::empty({int64_t(rows.size()), K}, DType::f32);
    embedding(ids, table, want);
    embedding_packed(ids, *packed, got);
    EXPECT_EQ(got.to_f32_vector(), want.to_f32_vector());
    Tensor bad = Tensor::from_vector(std::vector<int32_t>{3, int32_t(V)}, {2});
    Tensor y = Tensor::empty({2, K}, DType::f32);
    EXPECT_THROW(embedding_packed(bad, *packed, y), InternalError);
  }
}

TEST(Linear, DecodeAndPrefillPathsAgree) {
  test::for_each_bf16_gemm_arithmetic([&] {
    // Row m of a batched (prefill-path) call equals the single-row (GEMV-path) call within rounding.
    const int64_t N = 300, K = 96, M = 20;
    auto w = PackedLinear::pack(Tensor::from_vector(random_values(N * K, 40), {N, K}), DType::bf16);
    Tensor x = Tensor::from_vector(random_values(M * K, 41), {M, K}).to(DType::bf16);
    Tensor y = Tensor::empty({M, N}, DType::f32);
    linear(x, *w, y);
    const auto all = y.to_f32_vector();
    for (int64_t m : {0, 7, 19}) {
      Tensor y1 = Tensor::empty({1, N}, DType::f32);
      linear(x.slice0(m, m + 1), *w, y1);
      const auto one = y1.to_f32_vector();
      for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(one[n], all[m * N + n], 1e-4) << m << "," << n;
    }
  });
}

TEST(Linear, SiluMulEpilogueEqualsLinearThenSiluMul) {
  test::for_each_bf16_gemm_arithmetic([&] {
    // linear_silu_mul is linear into an f32 gate_up, then silu_mul, bit for bit: in the bf16
    // GEMM's store (intermediate a multiple of 64, more than kGemvMaxM rows) and in its fallbacks
    // (few rows: the GEMV; an intermediate of 80). Row counts cover whole and partial row tiles
    // and blocks, both threads' column split and a split too narrow to make.
    struct Shape3 {
      int64_t M, inter, K;
    };
    for (const Shape3 c : {Shape3{5, 64, 64}, Shape3{37, 192, 96}, Shape3{128, 128, 256},
                           Shape3{300, 256, 64}, Shape3{3, 128, 64}, Shape3{40, 80, 64}}) {
      const int64_t N = 2 * c.inter;
      auto w = PackedLinear::pack(
          Tensor::from_vector(random_values(N * c.K, 60), {N, c.K}).to(DType::bf16), DType::bf16);
      Tensor x = Tensor::from_vector(random_values(c.M * c.K, 61), {c.M, c.K}).to(DType::bf16);
      Tensor gate_up = Tensor::empty({c.M, N}, DType::f32);
      linear(x, *w, gate_up);
      for (DType yt : {DType::bf16, DType::f32}) {
        Tensor want = Tensor::empty({c.M, c.inter}, yt), got = Tensor::empty({c.M, c.inter}, yt);
        silu_mul(gate_up, want);
        linear_silu_mul(x, *w, got);
        EXPECT_EQ(got.to_f32_vector(), want.to_f32_vector())
            << "M " << c.M << ", inter " << c.inter << ", K " << c.K << ", " << dtype_name(yt);
      }
    }
    // K past one block of the f32 GEMM (1024): the fused GEMM sums all of K in one chain where the
    // unfused one adds two blocks' sums, so the two agree within f32 rounding (then the output's).
    const int64_t M = 40, inter = 64, K = 1088;
    auto w = PackedLinear::pack(
        Tensor::from_vector(random_values(2 * inter * K, 62), {2 * inter, K}).to(DType::bf16),
        DType::bf16);
    Tensor x = Tensor::from_vector(random_values(M * K, 63), {M, K}).to(DType::bf16);
    Tensor gate_up = Tensor::empty({M, 2 * inter}, DType::f32);
    linear(x, *w, gate_up);
    for (DType yt : {DType::bf16, DType::f32}) {
      Tensor want = Tensor::empty({M, inter}, yt), got = Tensor::empty({M, inter}, yt);
      silu_mul(gate_up, want);
      linear_silu_mul(x, *w, got);
      const auto g = got.to_f32_vector(), e = want.to_f32_vector();
      const double rel = yt == DType::bf16 ? 1.0 / 128 : 1e-5;  // one bf16 step; f32 sums of 1088
      for (size_t i = 0; i < g.size(); ++i)
        ASSERT_NEAR(g[i], e[i], rel * std::fabs(e[i]) + 1e-5) << i << ", " << dtype_name(yt);
    }
  });
}

TEST(Linear, QkNormRopeEpilogueEqualsLinearThenQkNormRopeCache) {
  test::for_each_bf16_gemm_arithmetic([&] {
    // linear_qk_norm_rope_cache is linear into an f32 qkv projection, then qk_norm_rope_cache, bit
    // for bit: in the bf16 GEMM's tiles (head_dim 128 or 64, more than kGemvMaxM rows; rows of
    // two batch entries, a slot offset, caches longer than the prompt) and in the fallbacks (4
    // rows: the GEMV; head_dim 32), with and without q/k-norm, into bf16 and f32 caches; with q
    // f32, or grouped for the attention where it takes that (T >= 32 over a bf16 cache).
    struct Shape5 {
      int64_t b, t, hq, hkv, d;
    };
    const int64_t K = 192, off = 3;
    for (const Shape5 c : {Shape5{2, 37, 4, 2, 128}, Shape5{1, 130, 2, 1, 128},
                           Shape5{1, 4, 2, 1, 128}, Shape5{1, 40, 3, 1, 64},
                           Shape5{1, 20, 2, 1, 32}}) {
      const int64_t M = c.b * c.t, N = (c.hq + 2 * c.hkv) * c.d, L = c.t + off + 2;
      auto w = PackedLinear::pack(
          Tensor::from_vector(random_values(N * K, 70), {N, K}).to(DType::bf16), DType::bf16);
      Tensor x = Tensor::from_vector(random_values(M * K, 71), {M, K}).to(DType::bf16);
      std::vector<int32_t> pos(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m) pos[size_t(m)] = int32_t(off + m % c.t + 5 * (m / c.t));
      Tensor positions = Tensor::from_vector(pos, {c.b, c.t});
      std::vector<float> table(static_cast<size_t>(512 * c.d));
      for (int64_t p = 0; p < 512; ++p)
        for (int64_t i = 0; i < c.d / 2; ++i) {
          const double a = double(p) * std::pow(1e4, -2.0 * double(i) / double(c.d));
          table[size_t(p * c.d + i)] = float(std::cos(a));
          table[size_t(p * c.d + c.d / 2 + i)] = float(std::sin(a));
        }
      Tensor cos_sin = Tensor::from_vector(table, {512, c.d});
      Tensor proj = Tensor::empty({M, N}, DType::f32);
      linear(x, *w, proj);
      for (bool norm : {true, false})
        for (DType cache : {DType::bf16, DType::f32}) {
          Tensor qn, kn;
          if (norm) {
            qn = Tensor::from_vector(random_values(c.d, 72), {c.d}).to(DType::bf16);
            kn = Tensor::from_vector(random_values(c.d, 73), {c.d}).to(DType::bf16);
          }
          auto outputs = [&](bool fused, bool grouped) {
            Tensor q = grouped ? Tensor::empty({c.b, c.hkv, c.t, c.hq / c.hkv, c.d}, DType::bf16)
                               : Tensor::empty({c.b, c.t, c.hq, c.d}, DType::f32);
            Tensor kc = Tensor::zeros({c.b, L, c.hkv, c.d}, cache);
            Tensor vc = Tensor::zeros({c.b, L, c.hkv, c.d}, cache);
            if (fused)
              linear_qk_norm_rope_cache(x, *w, qn, kn, 1e-6f, positions, cos_sin, off, q, kc, vc);
            else
              qk_norm_rope_cache(proj, qn, kn, 1e-6f, positions, cos_sin, off, q, kc, vc);
            return std::vector<std::vector<float>>{q.to_f32_vector(), kc.to_f32_vector(),
                                                   vc.to_f32_vector()};
          };
          const std::string what = "B " + std::to_string(c.b) + ", T " + std::to_string(c.t) +
                                   ", heads " + std::to_string(c.hq) + "/" +
                                   std::to_string(c.hkv) + ", D " + std::to_string(c.d) +
                                   (norm ? ", q/k-norm, " : ", no norm, ") + std::string(dtype_name(cache)) +
                                   " cache";
          const auto plain = outputs(false, false);
          EXPECT_EQ(outputs(true, false), plain) << what;
          // Where attention takes q grouped (bf16 [B, Hkv, T, G, D]), both write exactly what
          // the attention kernel makes of the f32 q: times attention_scale(D), rounded once to
          // bf16, a kv head's rows (t, g) side by side; and the caches as before.
          if (!attention_takes_grouped_q(c.t, c.hq, c.hkv, c.d, cache)) continue;
          const int64_t G = c.hq / c.hkv;
          std::vector<float> want(plain[0].size());
          for (int64_t b = 0; b < c.b; ++b)
            for (int64_t t = 0; t < c.t; ++t)
              for (int64_t h = 0; h < c.hq; ++h)
                for (int64_t i = 0; i < c.d; ++i)
                  want[size_t((((b * c.hkv + h / G) * c.t + t) * G + h % G) * c.d + i)] =
                      bf16_to_f32(f32_to_bf16(plain[0][size_t(((b * c.t + t) * c.hq + h) * c.d + i)] *
                                              attention_scale(c.d)));
          for (bool fused : {true, false}) {
            const auto grouped = outputs(fused, true);
            EXPECT_EQ(grouped[0], want) << what << (fused ? ", fused" : "") << ", grouped q";
            EXPECT_EQ(grouped[1], plain[1]) << what << ", grouped q: k cache";
            EXPECT_EQ(grouped[2], plain[2]) << what << ", grouped q: v cache";
          }
        }
    }
  });
}

TEST(Linear, GroupedQOnlyWhereTheAttentionTakesIt) {
  // A grouped q_out that attention would not take (here an f32 cache) is refused.
  Tensor proj = Tensor::zeros({40, 4 * 64}, DType::f32);
  Tensor positions = Tensor::from_vector(std::vector<int32_t>(40, 0), {1, 40});
  Tensor cos_sin = Tensor::zeros({1, 64}, DType::f32);
  Tensor kc = Tensor::zeros({1, 40, 1, 64}, DType::f32), vc = kc;
  Tensor q = Tensor::empty({1, 1, 40, 2, 64}, DType::bf16);
  EXPECT_THROW(qk_norm_rope_cache(proj, Tensor(), Tensor(), 1e-6f, positions, cos_sin, 0, q, kc, vc),
               InternalError);
}

TEST(Linear, PrimitivesAreReusedAcrossCalls) {
  // Repeated calls with the same shape must give identical results (a cached primitive, a reused
  // scratchpad), including after a call with another shape in between.
  const int64_t N = 96, K = 64;
  auto w = PackedLinear::pack(Tensor::from_vector(random_values(N * K, 50), {N, K}), DType::bf16);
  Tensor x = Tensor::from_vector(random_values(40 * K, 51), {40, K});
  Tensor a = Tensor::empty({40, N}, DType::f32), b = Tensor::empty({40, N}, DType::f32);
  Tensor c = Tensor::empty({12, N}, DType::f32);
  linear(x, *w, a);
  linear(x.slice0(0, 12), *w, c);
  linear(x, *w, b);
  EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector());
}

}  // namespace
}  // namespace kiln::cpu
