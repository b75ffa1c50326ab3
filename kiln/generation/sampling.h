// Choosing the next token from one row of logits, in the order Transformers' generate() applies
// its processors (GenerationMixin._get_logits_processor):
//   1. repetition_penalty over every id in the row so far, prompt included: each distinct id's
//      score becomes score * p when negative, score / p otherwise;
//   then, only when do_sample:
//   2. temperature (scores / t), 3. top_k, 4. top_p, 5. min_p, each removing tokens by setting their
//      score to -inf, at least one token always kept;
//   6. softmax and one draw. Without do_sample: argmax, the first index among equal maxima.
// Semantics per warper, as Transformers' logits_process.py:
//   top_k  keeps every token whose score is >= the k-th largest (ties at the cut all stay);
//   top_p  sorts by score, keeps the most likely tokens while the mass strictly above a token is
//          < top_p (the smallest set reaching top_p); ties in score are ordered by token id;
//   min_p  removes tokens whose probability is < min_p * (largest probability).
// At exact float boundaries (a cumulative mass equal to top_p) rounding may decide differently from
// PyTorch's float32 cumsum; away from them the kept sets are identical.
//
// Randomness: Rng is std::mt19937_64, and a draw takes 53 bits of one output as a uniform in [0, 1)
// then walks the kept tokens in token-id order (so next_token() and sample() of the processed
// scores agree). The same seed and inputs give the same tokens on every machine and thread count;
// they are kiln's own sequence, not PyTorch's.
//
// Cost per call for V = 151,936: O(V) passes; top_k selects with a k-sized heap; top_p without top_k
// sorts only a growing prefix (partial_sort of 256, 1024, ... entries) until the mass is reached.
// A LogitsProcessor keeps its scratch buffers between calls; it is not safe to share one between
// threads.
//
// Example:
//   kiln::generation::LogitsProcessor proc(cfg);          // validates cfg
//   kiln::generation::Rng rng = kiln::generation::Rng::from_config(cfg);
//   int32_t id = proc.next_token(logits_row, ids_so_far, rng);  // logits_row is modified
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kiln/generation/generation_config.h"

namespace kiln::generation {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // cfg.seed when set, otherwise a seed from std::random_device (not reproducible).
  static Rng from_config(const GenerationConfig& cfg);
  // Uniform in [0, 1) with 53 random bits (implementation-independent, unlike
  // std::uniform_real_distribution).
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
  uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// The single steps, on a full row of logits [V] f32, in place. Removed tokens become -inf.
// previous_ids outside [0, V) are a kiln::Error naming "input_ids".
void apply_repetition_penalty(std::span<float> logits,
                              std::span<const int32_t> previous_ids,
                              double penalty);
void apply_temperature(std::span<float> logits, double temperature);
void apply_top_k(std::span<float> logits, int64_t top_k);
void apply_top_p(std::span<float> logits, double top_p);
void apply_min_p(std::span<float> logits, double min_p);
// First index of the largest logit (NaN never wins). kiln::Error("logits") if none is finite.
int32_t argmax(std::span<const float> logits);
// softmax(logits) and one draw; -inf entries have probability 0.
int32_t sample(std::span<const float> logits, Rng& rng);

class LogitsProcessor {
 public:
  // Copies and validates cfg (kiln::Error naming the field).
  explicit LogitsProcessor(const GenerationConfig& cfg);

  // Steps 1-5 in place; afterwards `logits` equals the scores Transformers would sample from.
  void process(std::span<float> logits, std::span<const int32_t> previous_ids);
  // Steps 1-6: the next token. `logits` is used as scratch and left processed only for the
  // penalty and temperature (the token sets of top_k/top_p/min_p are kept internally, which avoids
  // a full pass per warper); call process() when the processed scores themselves are wanted.
  int32_t next_token(std::span<float> logits, std::span<const int32_t> previous_ids, Rng& rng);

  const GenerationConfig& config() const { return cfg_; }

  struct Candidate {
    int32_t id;
    float logit;
  };

 private:
  // The kept tokens after steps 2-5, sorted when top_k or top_p ran.
  void warp(std::span<float> logits);

  GenerationConfig cfg_;
  std::vector<Candidate> cand_;
  std::vector<uint8_t> seen_;
};

}  // namespace kiln::generation
