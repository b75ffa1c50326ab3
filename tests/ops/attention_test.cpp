// Attention against a double-precision reference over a table of shapes that reach every path of
// the CPU kernel (decode: T * group <= 8; prefill blocks; scalar: D % 16 != 0), with GQA, left
// padding, a partly filled cache (slot_offset > 0), rows with no visible slot, and NaN in every
// slot the mask hides (a kernel must skip those slots, not multiply them by zero).
#include <cmath>
#include <limits>
#include <vector>

#include "op_harness.h"
#include "tests/ops/bf16_arithmetic.h"

namespace kiln::optest {
namespace {

struct AttnShape {
  const char* name;
  int64_t b, t, l, hq, hkv, d, slot_offset;
  std::vector<int64_t> left_pad;  // per batch row: slots [0, pad) masked; pad >= L: row empty
  std::vector<int64_t> holes = {};  // slots masked in every row (kv_mask zeros inside the range)
};

// With a bf16 cache the op may round the pre-scaled q and the unnormalised probabilities
// p = exp(s - max) to bf16 once each (the precision of the tensors around it; the GEMM prefill
// path does). To first order that moves out = sum_j w_j v_j (w = p / sum p) by
// sum_j w_j e_j (v_j - out), with |e_j| <= 2^-9 (p's rounding) + |ds_j| (the score's error,
// |ds_j| <= 2^-9 scale sum_i |q_i k_ji|), so `bound` gets sum_j w_j (2^-9 + |ds_j|) |v_j - out|
// per element, a little over (x 1.25) for the second-order terms and f32 sums.
constexpr double kBf16Half = 1.0 / 512;

// out [B, T, Hq, D] in double; k, v as stored; `bound` as above.
std::vector<double> attention_ref(const AttnShape& s, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  const std::vector<int32_t>& mask, std::vector<double>& bound) {
  std::vector<double> out(q.size(), 0.0);
  bound.assign(q.size(), 0.0);
  const int64_t g = s.hq / s.hkv;
  const double scale = 1 / std::sqrt(double(s.d));
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t t = 0; t < s.t; ++t)
      for (int64_t h = 0; h < s.hq; ++h) {
        const size_t qo = size_t(((b * s.t + t) * s.hq + h) * s.d);
        std::vector<double> sc, ds;
        std::vector<int64_t> js;
        for (int64_t j = 0; j <= s.slot_offset + t; ++j) {
          if (!mask[size_t(b * s.l + j)]) continue;
          const size_t ko = size_t(((b * s.l + j) * s.hkv + h / g) * s.d);
          double dotp = 0, dotp_abs = 0;
          for (int64_t i = 0; i < s.d; ++i) {
            dotp += q[qo + size_t(i)] * k[ko + size_t(i)];
            dotp_abs += std::abs(q[qo + size_t(i)] * k[ko + size_t(i)]);
          }
          sc.push_back(dotp * scale);
          ds.push_back(kBf16Half * dotp_abs * scale);
          js.push_back(j);
        }
        if (sc.empty()) continue;
        double m = -INFINITY, sum = 0;
        for (double x : sc) m = std::max(m, x);
        for (double& x : sc) sum += (x = std::exp(x - m));
        auto v_at = [&](size_t n, int64_t i) {
          return v[size_t(((b * s.l + js[n]) * s.hkv + h / g) * s.d + i)];
        };
        for (size_t n = 0; n < js.size(); ++n)
          for (int64_t i = 0; i < s.d; ++i) out[qo + size_t(i)] += sc[n] / sum * v_at(n, i);
        for (size_t n = 0; n < js.size(); ++n)
          for (int64_t i = 0; i < s.d; ++i)
            bound[qo + size_t(i)] += 1.25 * sc[n] / sum * (kBf16Half + ds[n]) *
                                     std::abs(v_at(n, i) - out[qo + size_t(i)]);
      }
  return out;
}

std::vector<int32_t> make_mask(const AttnShape& s) {
  // Slots hold real tokens from the row's left padding up to the last slot in use.
  std::vector<int32_t> mask(size_t(s.b * s.l), 0);
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t j = s.left_pad[size_t(b)]; j < s.slot_offset + s.t && j < s.l; ++j)
      mask[size_t(b * s.l + j)] = 1;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t j : s.holes) mask[size_t(b * s.l + j)] = 0;
  return mask;
}

// Fills masked slots and slots beyond the queries with NaN.
void poison_hidden_slots(const AttnShape& s, const std::vector<int32_t>& mask, Tensor& cache) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t j = 0; j < s.l; ++j) {
      if (mask[size_t(b * s.l + j)] && j < s.slot_offset + s.t) continue;
      for (int64_t i = 0; i < s.hkv * s.d; ++i) {
        const int64_t e = (b * s.l + j) * s.hkv * s.d + i;
        if (cache.dtype() == DType::f32)
          cache.data<float>()[e] = nan;
        else
          cache.data<bf16_t>()[e] = f32_to_bf16(nan);
      }
    }
}

const std::vector<AttnShape>& shapes() {
  static const std::vector<AttnShape> s = {
      // decode: one new token against a partly filled cache; row 2 is all padding.
      {"decode_gqa", 3, 1, 100, 4, 2, 32, 60, {0, 7, 200}},
      {"decode_t3", 2, 3, 40, 4, 2, 32, 20, {0, 5}},
      {"decode_d160_g4", 1, 2, 50, 8, 2, 160, 30, {3}},
      {"decode_long", 1, 1, 600, 2, 1, 64, 570, {10}},
      {"decode_holes", 2, 1, 64, 4, 2, 32, 40, {0, 2}, {5, 6, 20, 33}},
      // decode split along the slots as well as the kv heads (partials merged per head), and a
      // split batch row beside an all-padding one.
      {"decode_split_heads", 1, 1, 300, 4, 2, 32, 250, {3}},
      {"decode_split_padded", 2, 1, 200, 2, 1, 32, 150, {0, 200}},
      // decode shapes whose scores keep q in registers over a block (D = 128 and 64), with holes.
      {"decode_d128", 2, 1, 90, 4, 2, 128, 70, {0, 9}, {3, 40}},
      {"decode_t2_d64", 1, 2, 50, 4, 2, 64, 30, {2}, {11}},
      // an odd number of rows per kv head (p V's last row alone): one (MHA) and three, at D = 96
      // (three 32-value pairs) and 64.
      {"decode_mha_d96", 1, 1, 80, 3, 3, 96, 60, {4}},
      {"decode_t3_mha_d64", 1, 3, 50, 2, 2, 64, 30, {0}, {7}},
      // prefill: several key and query blocks, padding rows whose queries see nothing.
      {"prefill_gqa", 2, 37, 37, 4, 2, 32, 0, {0, 5}},
      {"prefill_blocks", 1, 70, 150, 2, 1, 16, 3, {9}},
      {"prefill_mha_d48", 2, 9, 12, 3, 3, 48, 2, {0, 12}},
      {"prefill_d160_g4", 1, 20, 24, 8, 2, 160, 4, {2}},
      {"prefill_g3", 1, 25, 30, 6, 2, 32, 5, {0}},
      {"prefill_holes", 2, 20, 20, 4, 2, 32, 0, {0, 3}, {1, 7, 8, 15}},
      // prefill through the bf16 GEMMs (T >= 32): two query blocks over two 64-key panels with
      // holes, a block that sees no key (row 1's padding covers it); G = 3 with odd key counts;
      // an all-padding row.
      {"prefill_gemm_d128", 2, 100, 140, 4, 2, 128, 10, {0, 75}, {3, 40, 77, 90}},
      {"prefill_gemm_d64_g3", 1, 40, 50, 6, 2, 64, 3, {2}, {20, 31}},
      {"prefill_gemm_empty_row", 2, 33, 33, 2, 1, 32, 0, {0, 33}},
      // scalar path (D % 16 != 0).
      {"scalar_d8", 2, 5, 9, 3, 1, 8, 4, {0, 3}},
      {"scalar_decode_d24", 2, 1, 9, 2, 2, 24, 8, {1, 9}},
      {"scalar_holes_d8", 1, 6, 8, 2, 1, 8, 2, {1}, {3, 4}},
  };
  return s;
}

void run_attention(const OpBackend& be, DType dt, Tol tol, const AttnShape& s) {
  Tensor q = random_tensor({s.b, s.t, s.hq, s.d}, DType::f32, 31, -2.f, 2.f);
  Tensor k = random_tensor({s.b, s.l, s.hkv, s.d}, dt, 32, -2.f, 2.f);
  Tensor v = random_tensor({s.b, s.l, s.hkv, s.d}, dt, 33);
  std::vector<int32_t> mask = make_mask(s);
  std::vector<double> bound;
  const std::vector<double> ref =
      attention_ref(s, to_double(q), to_double(k), to_double(v), mask, bound);
  poison_hidden_slots(s, mask, k);
  poison_hidden_slots(s, mask, v);
  Tensor out = Tensor::empty({s.b, s.t, s.hq, s.d}, dt);
  be.attention(q, k, v, Tensor::from_vector(mask, {s.b, s.l}), s.slot_offset, out);
  std::vector<double> expected(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) expected[i] = round_as(dt, ref[i]);
  // An f32 cache keeps the op f32-class; a bf16 one may round q and p (see attention_ref).
  if (dt == DType::f32) bound.clear();
  EXPECT_TRUE(all_close(out, expected, tol, bound)) << s.name;
  // Rows with no visible slot are exactly zero.
  for (int64_t b = 0; b < s.b; ++b)
    if (s.left_pad[size_t(b)] >= s.l) {
      std::vector<float> o = out.to_f32_vector();
      for (int64_t i = 0; i < s.t * s.hq * s.d; ++i)
        ASSERT_EQ(o[size_t(b * s.t * s.hq * s.d + i)], 0.f) << s.name << " padding row " << b;
    }
}

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  for (const AttnShape& s : shapes())
    cases.push_back({s.name,
                     {{1e-5, 1e-5}, {1e-5, 8e-3}},
                     [s](const OpBackend& be, DType dt, Tol tol) { run_attention(be, dt, tol, s); }});
  return cases;
}

class AttentionOps : public ::testing::TestWithParam<OpParam> {};
// Under both arithmetics of kiln's bf16 GEMM: the prefill path through it blocks its queries by
// the GEMM tile's rows.
TEST_P(AttentionOps, MatchesReference) {
  cpu::test::for_each_bf16_gemm_arithmetic(
      [&] { GetParam().op.run(cpu_backend(), GetParam().dtype, GetParam().tol()); });
}
INSTANTIATE_TEST_SUITE_P(Cpu, AttentionOps, ::testing::ValuesIn(for_each_dtype(attention_cases())),
                         param_name);

// Decoding token by token against the cache gives what one prefill over all tokens gives (a
// prefill this short takes the f32-class path): to f32 rounding where the decode multiplies in f32,
// within attention_ref's bound for the rounding of q and p where it takes vdpbf16ps.
TEST(Attention, DecodeStepsMatchPrefill) {
  const AttnShape s = {"decode_steps", 1, 20, 20, 4, 2, 32, 0, {2}};
  const int64_t l = s.l, hq = s.hq, d = s.d;
  Tensor q = random_tensor({1, l, hq, d}, DType::f32, 41);
  Tensor k = random_tensor({1, l, s.hkv, d}, DType::bf16, 42);
  Tensor v = random_tensor({1, l, s.hkv, d}, DType::bf16, 43);
  const std::vector<int32_t> m = make_mask(s);  // slots 0 and 1 masked
  std::vector<double> bound;
  attention_ref(s, to_double(q), to_double(k), to_double(v), m, bound);
  Tensor mask = Tensor::from_vector(m, {1, l});
  Tensor full = Tensor::empty({1, l, hq, d}, DType::f32);
  cpu::attention(q, k, v, mask, 0, full);
  std::vector<float> fv = full.to_f32_vector();
  cpu::test::for_each_bf16_gemm_arithmetic([&] {
    const bool rounded =
        cpu::detail::bf16_gemm_arithmetic() == cpu::detail::Bf16GemmArithmetic::kDpbf16;
    for (int64_t t = 0; t < l; ++t) {
      Tensor qt = Tensor::from_vector(
          std::vector<float>(q.data<float>() + t * hq * d, q.data<float>() + (t + 1) * hq * d),
          {1, 1, hq, d});
      Tensor o = Tensor::empty({1, 1, hq, d}, DType::f32);
      cpu::attention(qt, k, v, mask, t, o);
      std::vector<double> want(fv.begin() + t * hq * d, fv.begin() + (t + 1) * hq * d);
      std::vector<double> slack;
      if (rounded) slack.assign(bound.begin() + t * hq * d, bound.begin() + (t + 1) * hq * d);
      EXPECT_TRUE(all_close(o, want, {1e-6, 1e-5}, slack)) << "step " << t;
    }
  });
}

// A grouped q (bf16 [B, Hkv, T, G, D], scaled: kernels.h) gives the bits of the f32 q it was made
// from, on every shape of the table that takes one, under both arithmetics of the bf16 GEMM.
TEST(Attention, GroupedQGivesTheBitsOfItsF32Q) {
  int ran = 0;
  cpu::test::for_each_bf16_gemm_arithmetic([&] {
    for (const AttnShape& s : shapes()) {
      if (!cpu::attention_takes_grouped_q(s.t, s.hq, s.hkv, s.d, DType::bf16)) continue;
      ++ran;
      const int64_t g = s.hq / s.hkv;
      Tensor q = random_tensor({s.b, s.t, s.hq, s.d}, DType::f32, 31, -2.f, 2.f);
      Tensor k = random_tensor({s.b, s.l, s.hkv, s.d}, DType::bf16, 32, -2.f, 2.f);
      Tensor v = random_tensor({s.b, s.l, s.hkv, s.d}, DType::bf16, 33);
      std::vector<int32_t> mask = make_mask(s);
      poison_hidden_slots(s, mask, k);
      poison_hidden_slots(s, mask, v);
      Tensor kv_mask = Tensor::from_vector(mask, {s.b, s.l});
      Tensor grouped = Tensor::empty({s.b, s.hkv, s.t, g, s.d}, DType::bf16);
      const float scale = cpu::attention_scale(s.d);
      for (int64_t b = 0; b < s.b; ++b)
        for (int64_t t = 0; t < s.t; ++t)
          for (int64_t h = 0; h < s.hq; ++h)
            for (int64_t i = 0; i < s.d; ++i)
              grouped.data<bf16_t>()[(((b * s.hkv + h / g) * s.t + t) * g + h % g) * s.d + i] =
                  f32_to_bf16(q.data<float>()[((b * s.t + t) * s.hq + h) * s.d + i] * scale);
      Tensor from_f32 = Tensor::empty({s.b, s.t, s.hq, s.d}, DType::bf16);
      Tensor from_grouped = Tensor::empty({s.b, s.t, s.hq, s.d}, DType::bf16);
      cpu::attention(q, k, v, kv_mask, s.slot_offset, from_f32);
      cpu::attention(grouped, k, v, kv_mask, s.slot_offset, from_grouped);
      EXPECT_EQ(from_grouped.to_f32_vector(), from_f32.to_f32_vector()) << s.name;
    }
  });
  if (ran == 0) GTEST_SKIP() << "attention takes no grouped q in this build";
  // Where the kernel would not take it (an f32 cache), a grouped q is refused by name.
  Tensor q = Tensor::zeros({1, 1, 40, 2, 64}, DType::bf16);
  Tensor k = Tensor::zeros({1, 40, 1, 64}, DType::f32);
  Tensor mask = Tensor::from_vector(std::vector<int32_t>(40, 1), {1, 40});
  Tensor out = Tensor::empty({1, 40, 2, 64}, DType::f32);
  EXPECT_THROW(cpu::attention(q, k, k, mask, 0, out), InternalError);
}

TEST(Attention, RejectsSlotsBeyondCache) {
  Tensor q = Tensor::zeros({1, 2, 2, 16}, DType::f32);
  Tensor k = Tensor::zeros({1, 4, 1, 16}, DType::f32);
  Tensor mask = Tensor::from_vector(std::vector<int32_t>{1, 1, 1, 1}, {1, 4});
  Tensor out = Tensor::empty({1, 2, 2, 16}, DType::f32);
  EXPECT_THROW(cpu::attention(q, k, k, mask, 3, out), InternalError);
}

}  // namespace
}  // namespace kiln::optest
