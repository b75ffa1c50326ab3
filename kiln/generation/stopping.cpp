#include "kiln/generation/stopping.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln::generation {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::none:
      return "none";
    case StopReason::eos:
      return "eos";
    case StopReason::stop_string:
      return "stop_string";
    case StopReason::max_new_tokens:
      return "max_new_tokens";
  }
  return "none";
}

StoppingCriteria::StoppingCriteria(const GenerationConfig& cfg,
                                   int64_t batch_size,
                                   int64_t max_new_tokens,
                                   Decode decode)
    : eos_(cfg.eos_token_id),
      stop_strings_(cfg.stop_strings),
      decode_(std::move(decode)),
      max_new_tokens_(max_new_tokens) {
  if (batch_size <= 0)
    throw Error("batch_size", "must be positive, got " + std::to_string(batch_size));
  if (max_new_tokens <= 0)
    throw Error("max_new_tokens", "must be positive, got " + std::to_string(max_new_tokens));
  for (const auto& s : stop_strings_)
    if (s.empty()) throw Error("stop_strings", "an empty stop string would stop at once");
  if (!stop_strings_.empty() && !decode_)
    throw Error("stop_strings", "stop strings need a tokenizer to decode the generated tokens");
  auto pad = cfg.effective_pad_token_id();
  if (pad) {
    pad_ = int32_t(*pad);
  } else if (batch_size > 1 && !stop_strings_.empty()) {
    throw Error("pad_token_id",
                "rows that stop early are padded, but neither pad_token_id nor eos_token_id is "
                "set");
  }
  tokens_.resize(size_t(batch_size));
  for (auto& t : tokens_) t.reserve(size_t(std::min<int64_t>(max_new_tokens, 4096)));
  lengths_.assign(size_t(batch_size), 0);
  reasons_.assign(size_t(batch_size), StopReason::none);
}

bool StoppingCriteria::update(std::span<int32_t> next_tokens) {
  if (done_) throw Error("generate", "update() called after generation already stopped");
  if (int64_t(next_tokens.size()) != batch_size())
    throw Error("next_tokens", "expected " + std::to_string(batch_size()) + " tokens, one per row, got " +
                                   std::to_string(next_tokens.size()));
  ++steps_;
  bool all = true;
  for (size_t b = 0; b < next_tokens.size(); ++b) {
    if (reasons_[b] != StopReason::none) {
      next_tokens[b] = pad_;
      tokens_[b].push_back(pad_);
      continue;
    }
    const int32_t tok = next_tokens[b];
    tokens_[b].push_back(tok);
    lengths_[b] = int64_t(tokens_[b].size());
    if (std::find(eos_.begin(), eos_.end(), int64_t(tok)) != eos_.end()) {
      reasons_[b] = StopReason::eos;
    } else if (!stop_strings_.empty()) {
      // The whole new text is decoded each step: a token that completes a multi-byte character
      // can change earlier text, so a suffix alone is not reliable. Any match is new, because
      // the row would have stopped at an earlier one.
      const std::string text = decode_(std::span<const int32_t>(tokens_[b]));
      for (const auto& s : stop_strings_) {
        if (text.find(s) != std::string::npos) {
          reasons_[b] = StopReason::stop_string;
          break;
        }
      }
    }
    if (reasons_[b] == StopReason::none) all = false;
  }
  if (!all && steps_ >= max_new_tokens_) {
    for (size_t b = 0; b < reasons_.size(); ++b)
      if (reasons_[b] == StopReason::none) reasons_[b] = StopReason::max_new_tokens;
    all = true;
  }
  done_ = all;
  return done_;
}

std::span<const int32_t> StoppingCriteria::generated(int64_t row) const {
  const auto& t = tokens_.at(size_t(row));
  return std::span<const int32_t>(t.data(), size_t(lengths_[size_t(row)]));
}

}  // namespace kiln::generation
