#include "kiln/generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "kiln/core/error.h"

namespace kiln::generation {

namespace {

using Cand = LogitsProcessor::Candidate;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// False for -inf and NaN: such entries can never be drawn nor win an argmax (a NaN in a sort
// comparator would also break strict weak ordering).
inline bool usable(float x) { return x > kNegInf; }

// Descending score, ascending id among equal scores: a total order, so results never depend on
// the sort implementation.
inline bool before(const Cand& a, const Cand& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void no_usable_logits() {
  throw Error("logits", "every logit is -inf or NaN; the model produced no usable scores");
}

void penalize(std::span<float> logits,
              std::span<const int32_t> ids,
              double penalty,
              std::vector<uint8_t>& seen) {
  const int64_t vocab = int64_t(logits.size());
  if (seen.size() != logits.size()) seen.assign(logits.size(), 0);
  const float p = float(penalty);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      for (int32_t j : ids)  // leave `seen` all-zero for the next call
        if (j >= 0 && j < vocab) seen[j] = 0;
      throw Error("input_ids", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                   std::to_string(vocab) + ")");
    }
    if (seen[id]) continue;  // each distinct id once, as Transformers' gather/scatter does
    seen[id] = 1;
    float& s = logits[id];
    s = s < 0 ? s * p : s / p;
  }
  for (int32_t id : ids) seen[id] = 0;
}

void divide(std::span<float> logits, double temperature) {
  const float t = float(temperature);
  for (float& x : logits) x = x / t;
}

void collect_usable(std::span<const float> logits, std::vector<Cand>& out) {
  out.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (usable(logits[i])) out.push_back({int32_t(i), logits[i]});
}

// Every usable token scoring >= the k-th largest score, sorted.
void collect_top_k(std::span<const float> logits, int64_t k, std::vector<Cand>& out) {
  const int64_t vocab = int64_t(logits.size());
  float threshold = kNegInf;
  if (k < vocab) {
    if (k <= 4096) {
      // A min-heap of the k largest seen so far; after the first k elements most entries fail the
      // single comparison against its top, so this is one cheap pass for small k.
      std::vector<float> heap;
      heap.reserve(size_t(k));
      for (float x : logits) {
        if (!usable(x)) continue;
        if (int64_t(heap.size()) < k) {
          heap.push_back(x);
          std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        } else if (x > heap.front()) {
          std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
          heap.back() = x;
          std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        }
      }
      if (int64_t(heap.size()) == k) threshold = heap.front();
    } else {
      std::vector<float> values;
      values.reserve(logits.size());
      for (float x : logits)
        if (usable(x)) values.push_back(x);
      if (int64_t(values.size()) > k) {
        std::nth_element(values.begin(), values.begin() + (k - 1), values.end(),
                         std::greater<float>());
        threshold = values[size_t(k - 1)];
      }
    }
  }
  out.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (usable(logits[i]) && logits[i] >= threshold) out.push_back({int32_t(i), logits[i]});
  std::sort(out.begin(), out.end(), before);
}

float max_logit(const std::vector<Cand>& c) {
  float m = kNegInf;
  for (const auto& x : c) m = std::max(m, x.logit);
  return m;
}

// Keeps the most likely tokens while the probability mass strictly above a token is < top_p.
// Leaves `c` sorted. When `c` is not sorted yet only a growing prefix is sorted.
void keep_top_p(std::vector<Cand>& c, double top_p, bool sorted) {
  if (top_p >= 1.0 || c.empty()) return;
  const float lmax = max_logit(c);
  double total = 0;
  for (const auto& x : c) total += std::exp(double(x.logit) - double(lmax));
  const double target = top_p * total;
  size_t m = sorted ? c.size() : std::min<size_t>(c.size(), 256);
  for (;;) {
    if (!sorted) std::partial_sort(c.begin(), c.begin() + ptrdiff_t(m), c.end(), before);
    double above = 0;
    for (size_t i = 0; i < m; ++i) {
      if (i > 0 && above >= target) {
        c.resize(i);
        return;
      }
      above += std::exp(double(c[i].logit) - double(lmax));
    }
    if (m == c.size()) return;
    m = std::min(c.size(), m * 4);
  }
}

// Removes tokens with probability < min_p * max probability, i.e. exp(l - lmax) < min_p, tested in
// log space (l < lmax + log(min_p)) to avoid an exp per token. The top token always stays.
void keep_min_p(std::vector<Cand>& c, double min_p) {
  if (c.empty()) return;
  const double cut = double(max_logit(c)) + std::log(min_p);
  std::erase_if(c, [cut](const Cand& x) { return double(x.logit) < cut; });
}

void mask_to(std::span<float> logits, const std::vector<Cand>& c) {
  std::fill(logits.begin(), logits.end(), kNegInf);
  for (const auto& x : c) logits[size_t(x.id)] = x.logit;
}

int32_t draw(const std::vector<Cand>& c, Rng& rng) {
  if (c.empty()) no_usable_logits();
  const float lmax = max_logit(c);
  double total = 0;
  for (const auto& x : c) total += std::exp(double(x.logit) - double(lmax));
  const double u = rng.uniform() * total;
  double acc = 0;
  int32_t last = c.front().id;
  for (const auto& x : c) {
    const double w = std::exp(double(x.logit) - double(lmax));
    if (w <= 0) continue;
    acc += w;
    last = x.id;
    if (u < acc) return x.id;
  }
  return last;  // u rounded up to total: the last token with weight
}

}  // namespace

Rng Rng::from_config(const GenerationConfig& cfg) {
  if (cfg.seed) return Rng(*cfg.seed);
  std::random_device rd;
  return Rng((uint64_t(rd()) << 32) ^ uint64_t(rd()));
}

void apply_repetition_penalty(std::span<float> logits,
                              std::span<const int32_t> previous_ids,
                              double penalty) {
  std::vector<uint8_t> seen;
  penalize(logits, previous_ids, penalty, seen);
}

void apply_temperature(std::span<float> logits, double temperature) {
  if (!(temperature > 0))
    throw Error("temperature", "must be positive, got " + std::to_string(temperature));
  divide(logits, temperature);
}

void apply_top_k(std::span<float> logits, int64_t top_k) {
  if (top_k < 0) throw Error("top_k", "must be >= 0, got " + std::to_string(top_k));
  if (top_k == 0) return;
  std::vector<Cand> c;
  collect_top_k(logits, top_k, c);
  mask_to(logits, c);
}

void apply_top_p(std::span<float> logits, double top_p) {
  if (!(top_p > 0 && top_p <= 1))
    throw Error("top_p", "must be in (0, 1], got " + std::to_string(top_p));
  std::vector<Cand> c;
  collect_usable(logits, c);
  keep_top_p(c, top_p, false);
  mask_to(logits, c);
}

void apply_min_p(std::span<float> logits, double min_p) {
  if (!(min_p >= 0 && min_p <= 1))
    throw Error("min_p", "must be in [0, 1], got " + std::to_string(min_p));
  std::vector<Cand> c;
  collect_usable(logits, c);
  keep_min_p(c, min_p);
  mask_to(logits, c);
}

int32_t argmax(std::span<const float> logits) {
  int64_t best = -1;
  float best_v = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_v) {  // strict: the first of equal maxima wins; NaN never compares true
      best_v = logits[i];
      best = int64_t(i);
    }
  }
  if (best < 0) no_usable_logits();
  return int32_t(best);
}

int32_t sample(std::span<const float> logits, Rng& rng) {
  std::vector<Cand> c;
  collect_usable(logits, c);
  return draw(c, rng);
}

LogitsProcessor::LogitsProcessor(const GenerationConfig& cfg) : cfg_(cfg) { cfg_.validate(); }

void LogitsProcessor::warp(std::span<float> logits) {
  if (cfg_.temperature != 1.0) divide(logits, cfg_.temperature);
  bool sorted = false;
  if (cfg_.top_k > 0) {
    collect_top_k(logits, cfg_.top_k, cand_);
    sorted = true;
  } else {
    collect_usable(logits, cand_);
  }
  if (cfg_.top_p < 1.0) keep_top_p(cand_, cfg_.top_p, sorted);
  if (cfg_.min_p) keep_min_p(cand_, *cfg_.min_p);
  if (cand_.empty()) no_usable_logits();
}

void LogitsProcessor::process(std::span<float> logits, std::span<const int32_t> previous_ids) {
  if (cfg_.repetition_penalty != 1.0) penalize(logits, previous_ids, cfg_.repetition_penalty, seen_);
  if (!cfg_.do_sample) return;
  warp(logits);
  mask_to(logits, cand_);
}

int32_t LogitsProcessor::next_token(std::span<float> logits,
                                    std::span<const int32_t> previous_ids,
                                    Rng& rng) {
  if (cfg_.repetition_penalty != 1.0) penalize(logits, previous_ids, cfg_.repetition_penalty, seen_);
  if (!cfg_.do_sample) return argmax(logits);
  warp(logits);
  // Draw in token-id order, as sample() over the processed scores does, so both give the same
  // token for the same Rng state. The kept set is small whenever it was sorted by score.
  if (cfg_.top_k > 0 || cfg_.top_p < 1.0)
    std::sort(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) { return a.id < b.id; });
  return draw(cand_, rng);
}

}  // namespace kiln::generation
