#include "kiln/generation/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/core/error.h"

namespace kiln::generation {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> logs(std::vector<double> probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(float(std::log(p)));
  return out;
}

std::vector<int32_t> kept(const std::vector<float>& logits) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > -kInf) out.push_back(int32_t(i));
  return out;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float((rng.uniform() * 2 - 1) * scale);
  return v;
}

TEST(RepetitionPenalty, DividesPositiveMultipliesNegativeOncePerId) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  std::vector<int32_t> ids = {0, 1, 1, 1};  // id 1 repeated: penalised once, as Transformers
  apply_repetition_penalty(l, ids, 2.0);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], -4.0f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  EXPECT_FLOAT_EQ(l[3], 0.5f);
}

TEST(RepetitionPenalty, PenaltyBelowOneRewards) {
  std::vector<float> l = {2.0f, -2.0f};
  std::vector<int32_t> ids = {0, 1};
  apply_repetition_penalty(l, ids, 0.5);
  EXPECT_FLOAT_EQ(l[0], 4.0f);
  EXPECT_FLOAT_EQ(l[1], -1.0f);
}

TEST(RepetitionPenalty, OutOfVocabularyIdIsAnError) {
  std::vector<float> l = {1.0f, 2.0f};
  std::vector<int32_t> ids = {0, 7};
  try {
    apply_repetition_penalty(l, ids, 1.2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "input_ids");
    EXPECT_NE(std::string(e.what()).find("7"), std::string::npos);
  }
}

TEST(Temperature, Divides) {
  std::vector<float> l = {1.0f, -2.0f, 3.0f};
  apply_temperature(l, 0.5);
  EXPECT_EQ(l, (std::vector<float>{2.0f, -4.0f, 6.0f}));
  EXPECT_THROW(apply_temperature(l, 0.0), Error);
}

TEST(TopK, KeepsTheKLargest) {
  std::vector<float> l = {1, 5, 3, 4, 2};
  apply_top_k(l, 2);
  EXPECT_EQ(kept(l), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(l[1], 5.0f);  // kept scores unchanged
  EXPECT_EQ(l[3], 4.0f);
}

TEST(TopK, KeepsEveryTieAtTheCut) {
  // Transformers removes scores < the k-th largest, so ties with it all stay.
  std::vector<float> l = {1, 3, 3, 3, 0};
  apply_top_k(l, 2);
  EXPECT_EQ(kept(l), (std::vector<int32_t>{1, 2, 3}));
}

TEST(TopK, ZeroOrAtLeastVocabKeepsAll) {
  std::vector<float> l = {1, 2, 3};
  apply_top_k(l, 0);
  EXPECT_EQ(kept(l).size(), 3u);
  apply_top_k(l, 10);
  EXPECT_EQ(kept(l).size(), 3u);
}

TEST(TopK, LargeKPathAgreesWithSort) {
  auto l = random_logits(20000, 3);
  for (int64_t k : {1, 7, 4096, 4097, 12345}) {
    auto x = l;
    apply_top_k(x, k);
    auto sorted = l;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float thr = sorted[size_t(k - 1)];
    for (size_t i = 0; i < l.size(); ++i)
      ASSERT_EQ(x[i] > -kInf, l[i] >= thr) << "k=" << k << " i=" << i;
  }
}

TEST(TopP, HandComputed) {
  // probabilities 0.5, 0.3, 0.15, 0.05, shuffled
  auto l = logs({0.15, 0.5, 0.05, 0.3});
  auto a = l;
  apply_top_p(a, 0.7);  // 0.5 (above 0) and 0.3 (above 0.5) stay; 0.15 has 0.8 above
  EXPECT_EQ(kept(a), (std::vector<int32_t>{1, 3}));
  auto b = l;
  apply_top_p(b, 0.9);
  EXPECT_EQ(kept(b), (std::vector<int32_t>{0, 1, 3}));
  auto c = l;
  apply_top_p(c, 0.01);  // always at least one token
  EXPECT_EQ(kept(c), (std::vector<int32_t>{1}));
  auto d = l;
  apply_top_p(d, 1.0);
  EXPECT_EQ(kept(d).size(), 4u);
  EXPECT_THROW(apply_top_p(d, 0.0), Error);
  EXPECT_THROW(apply_top_p(d, 1.5), Error);
}

TEST(TopP, LargeVocabularyAgreesWithFullSort) {
  // Exercises the growing partial sort (nuclei larger than 256 and 1024 entries).
  auto l = random_logits(151936, 11, 4.0f);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
  });
  for (double p : {0.05, 0.5, 0.9, 0.99}) {
    auto x = l;
    apply_top_p(x, p);
    double total = 0;
    for (float v : l) total += std::exp(double(v) - double(l[order[0]]));
    std::vector<char> keep(l.size(), 0);
    double above = 0;
    size_t n_keep = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i > 0 && above >= p * total) break;
      keep[order[i]] = 1;
      above += std::exp(double(l[order[i]]) - double(l[order[0]]));
      ++n_keep;
    }
    size_t n = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      ASSERT_EQ(x[i] > -kInf, bool(keep[i])) << "p=" << p << " i=" << i;
      n += keep[i];
    }
    EXPECT_EQ(n, n_keep);
    if (p >= 0.9) {
      EXPECT_GT(n, 1024u);  // the prefix had to grow
    }
  }
}

TEST(MinP, HandComputed) {
  auto l = logs({0.5, 0.3, 0.15, 0.05});
  auto a = l;
  apply_min_p(a, 0.2);  // cut at 0.2 * 0.5 = 0.1
  EXPECT_EQ(kept(a), (std::vector<int32_t>{0, 1, 2}));
  auto b = l;
  apply_min_p(b, 0.5);  // cut at 0.25
  EXPECT_EQ(kept(b), (std::vector<int32_t>{0, 1}));
  auto c = l;
  apply_min_p(c, 0.0);
  EXPECT_EQ(kept(c).size(), 4u);
  std::vector<float> ties = {2, 2, 1};
  apply_min_p(ties, 1.0);  // only the most likely, ties included
  EXPECT_EQ(kept(ties), (std::vector<int32_t>{0, 1}));
  EXPECT_THROW(apply_min_p(c, 1.5), Error);
}

TEST(Argmax, FirstIndexAmongTies) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(argmax(l), 1);
  std::vector<float> nan = {std::nanf(""), 1.0f, std::nanf("")};
  EXPECT_EQ(argmax(nan), 1);
  std::vector<float> none = {-kInf, std::nanf("")};
  EXPECT_THROW(argmax(none), Error);
}

TEST(Sample, SameSeedSameSequenceAndOtherSeedDiffers) {
  auto l = random_logits(1000, 5, 1.0f);
  auto draw_seq = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(sample(l, rng));
    return out;
  };
  EXPECT_EQ(draw_seq(42), draw_seq(42));
  EXPECT_NE(draw_seq(42), draw_seq(43));
}

TEST(Sample, NeverDrawsRemovedTokens) {
  std::vector<float> l = {-kInf, 0.0f, -kInf, 0.0f};
  Rng rng(1);
  for (int i = 0; i < 1000; ++i) {
    int32_t t = sample(l, rng);
    ASSERT_TRUE(t == 1 || t == 3);
  }
}

TEST(Sample, FollowsTheDistribution) {
  // Chi-square goodness of fit over 40,000 draws from p = (0.1, 0.2, 0.3, 0.4). Seeded, so the
  // statistic is fixed; 16.27 is the 0.999 quantile for 3 degrees of freedom.
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  auto l = logs(p);
  for (float& x : l) x += 3.0f;  // softmax is shift invariant
  Rng rng(2024);
  const int n = 40000;
  std::vector<int> count(4, 0);
  for (int i = 0; i < n; ++i) ++count[size_t(sample(l, rng))];
  double chi2 = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double e = n * p[i];
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 16.27) << count[0] << " " << count[1] << " " << count[2] << " " << count[3];
  // And it can fail: the same counts against a wrong distribution are far off.
  double wrong = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double e = n * 0.25;
    wrong += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_GT(wrong, 1000.0);
}

TEST(Rng, UniformInUnitInterval) {
  Rng rng(0);
  double lo = 1, hi = 0, sum = 0;
  for (int i = 0; i < 100000; ++i) {
    double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_LT(lo, 1e-3);
  EXPECT_GT(hi, 1 - 1e-3);
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

GenerationConfig sampling_config() {
  GenerationConfig c;
  c.do_sample = true;
  c.temperature = 0.7;
  c.top_k = 50;
  c.top_p = 0.9;
  c.min_p = 0.05;
  c.repetition_penalty = 1.3;
  c.seed = 7;
  return c;
}

TEST(LogitsProcessor, GreedyAppliesOnlyThePenalty) {
  GenerationConfig c;  // do_sample false: temperature and top_k must not act
  c.temperature = 0.1;
  c.top_k = 1;
  c.repetition_penalty = 1.5;
  LogitsProcessor proc(c);
  std::vector<float> l = {3.0f, 2.9f, 1.0f, -1.0f};
  std::vector<int32_t> prev = {0, 3};
  Rng rng(0);
  auto x = l;
  EXPECT_EQ(proc.next_token(x, prev, rng), 1);  // 3 / 1.5 = 2 < 2.9
  auto y = l;
  proc.process(y, prev);
  EXPECT_EQ(y, (std::vector<float>{2.0f, 2.9f, 1.0f, -1.5f}));
}

TEST(LogitsProcessor, GreedyWithoutPenaltyIsArgmax) {
  LogitsProcessor proc{GenerationConfig{}};
  Rng rng(0);
  std::vector<float> l = {0.5f, 4.0f, 4.0f, -2.0f};
  EXPECT_EQ(proc.next_token(l, {}, rng), 1);
}

TEST(LogitsProcessor, TemperatureActsBeforeTopP) {
  // p = (0.6, 0.3, 0.1). With top_p 0.7 alone, two tokens stay; at temperature 0.5 the
  // distribution sharpens to (0.78, 0.20, 0.02) and only the first stays.
  GenerationConfig c;
  c.do_sample = true;
  c.top_k = 0;
  c.top_p = 0.7;
  auto l = logs({0.6, 0.3, 0.1});
  auto a = l;
  LogitsProcessor(c).process(a, {});
  EXPECT_EQ(kept(a), (std::vector<int32_t>{0, 1}));
  c.temperature = 0.5;
  auto b = l;
  LogitsProcessor(c).process(b, {});
  EXPECT_EQ(kept(b), (std::vector<int32_t>{0}));
}

TEST(LogitsProcessor, TopKActsBeforeTopP) {
  // p = (0.4, 0.35, 0.25): top_p 0.5 alone keeps two; after top_k 2 the two renormalise to
  // (0.53, 0.47) and top_p 0.5 keeps one.
  GenerationConfig c;
  c.do_sample = true;
  c.top_k = 0;
  c.top_p = 0.5;
  auto l = logs({0.4, 0.35, 0.25});
  auto a = l;
  LogitsProcessor(c).process(a, {});
  EXPECT_EQ(kept(a), (std::vector<int32_t>{0, 1}));
  c.top_k = 2;
  auto b = l;
  LogitsProcessor(c).process(b, {});
  EXPECT_EQ(kept(b), (std::vector<int32_t>{0}));
}

TEST(LogitsProcessor, ProcessEqualsTheStepsInTransformersOrder) {
  const auto c = sampling_config();
  LogitsProcessor proc(c);
  std::vector<int32_t> prev = {5, 17, 17, 151935, 0, 99};
  for (uint64_t seed = 0; seed < 5; ++seed) {
    auto l = random_logits(151936, seed, 6.0f);
    auto ref = l;
    apply_repetition_penalty(ref, prev, c.repetition_penalty);
    apply_temperature(ref, c.temperature);
    apply_top_k(ref, c.top_k);
    apply_top_p(ref, c.top_p);
    apply_min_p(ref, *c.min_p);
    auto x = l;
    proc.process(x, prev);
    ASSERT_EQ(x, ref) << "seed " << seed;
    ASSERT_GE(kept(x).size(), 1u);
    ASSERT_LE(kept(x).size(), 50u);
  }
}

TEST(LogitsProcessor, NextTokenEqualsSampleOfProcessedScores) {
  const auto c = sampling_config();
  LogitsProcessor proc(c);
  std::vector<int32_t> prev = {1, 2, 3};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto l = random_logits(5000, 100 + seed, 3.0f);
    auto x = l;
    Rng r1(seed);
    const int32_t got = proc.next_token(x, prev, r1);
    auto y = l;
    proc.process(y, prev);
    Rng r2(seed);
    EXPECT_EQ(got, sample(y, r2)) << "seed " << seed;
    EXPECT_GT(y[size_t(got)], -kInf);
  }
}

TEST(LogitsProcessor, SameSeedSameTokens) {
  auto c = sampling_config();
  c.top_k = 0;  // the unsorted path
  c.min_p.reset();
  auto run = [&](uint64_t seed) {
    LogitsProcessor proc(c);
    Rng rng(seed);
    std::vector<int32_t> ids;
    for (int step = 0; step < 30; ++step) {
      auto l = random_logits(2000, uint64_t(step), 2.0f);
      ids.push_back(proc.next_token(l, ids, rng));
    }
    return ids;
  };
  EXPECT_EQ(run(9), run(9));
  EXPECT_NE(run(9), run(10));
}

TEST(LogitsProcessor, ValidatesTheConfig) {
  auto c = sampling_config();
  c.top_p = 0;
  try {
    LogitsProcessor p(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "top_p");
  }
}

TEST(LogitsProcessor, AllRemovedIsAnError) {
  auto c = sampling_config();
  LogitsProcessor proc(c);
  std::vector<float> l(10, -kInf);
  Rng rng(0);
  EXPECT_THROW(proc.next_token(l, {}, rng), Error);
}

}  // namespace
}  // namespace kiln::generation
