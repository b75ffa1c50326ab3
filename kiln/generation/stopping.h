// When each row of a batch stops, as Transformers' generate() decides it:
//   - eos: the row's newest token is any of cfg.eos_token_id (EosTokenCriteria);
//   - stop string: a stop string occurs in the decoded text of the row's new tokens, found the
//     step it first appears, so one that spans several tokens, or ends inside a token, is caught
//     (StopStringCriteria). The tokens stay in the output, as in Transformers;
//   - max_new_tokens: every row stops after that many steps (MaxLengthCriteria; callers pass
//     GenerationConfig::max_new_tokens_for(prompt_length)).
// A row that has finished keeps emitting the pad id (pad_token_id, else the first eos id) until the
// whole batch stops, exactly like Transformers' `next_tokens * unfinished + pad * (1 - unfinished)`,
// so batched outputs line up with the unbatched ones followed by padding.
//
// Decoding is a callback so this layer does not depend on the tokenizer class; it is called only
// when there are stop strings, with the row's new tokens (pads after the stop never reach it).
//
// Example:
//   kiln::generation::StoppingCriteria stop(cfg, batch, cfg.max_new_tokens_for(prompt_len),
//                                           [&](std::span<const int32_t> ids) {
//                                             return tok.decode(ids);
//                                           });
//   while (!stop.done()) {
//     std::vector<int32_t> next = pick_tokens();  // one per row
//     stop.update(next);                          // finished rows' entries become pad
//     feed(next);
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/generation/generation_config.h"

namespace kiln::generation {

enum class StopReason { none, eos, stop_string, max_new_tokens };
const char* stop_reason_name(StopReason r);  // "none", "eos", "stop_string", "max_new_tokens"

class StoppingCriteria {
 public:
  using Decode = std::function<std::string(std::span<const int32_t>)>;

  // kiln::Error naming the argument when batch_size or max_new_tokens is not positive, when stop
  // strings are set without `decode`, or when rows could need padding but no pad id is known.
  StoppingCriteria(const GenerationConfig& cfg,
                   int64_t batch_size,
                   int64_t max_new_tokens,
                   Decode decode = {});

  // One step. next_tokens[b] is the token chosen for row b; rows that had already finished get
  // the pad id written over it. Records the tokens, then checks eos, stop strings and the length.
  // Returns done(). Calling it after done() is a kiln::Error.
  bool update(std::span<int32_t> next_tokens);

  bool done() const { return done_; }
  bool finished(int64_t row) const { return reasons_.at(size_t(row)) != StopReason::none; }
  StopReason reason(int64_t row) const { return reasons_.at(size_t(row)); }
  // The row's new tokens, pads after its stop included (all rows have the same length).
  const std::vector<int32_t>& tokens(int64_t row) const { return tokens_.at(size_t(row)); }
  // The row's new tokens up to and including the one that stopped it (no pads).
  std::span<const int32_t> generated(int64_t row) const;
  int64_t steps() const { return steps_; }
  int64_t batch_size() const { return int64_t(reasons_.size()); }
  int32_t pad_token_id() const { return pad_; }

 private:
  std::vector<int64_t> eos_;
  std::vector<std::string> stop_strings_;
  Decode decode_;
  int64_t max_new_tokens_;
  int32_t pad_ = 0;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<int64_t> lengths_;  // tokens up to and including the stop
  std::vector<StopReason> reasons_;
  int64_t steps_ = 0;
  bool done_ = false;
};

}  // namespace kiln::generation
