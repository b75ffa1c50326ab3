// DecodeStream: incremental detokenization for generation. Feed ids one at a time; each step
// returns the text that became final with this id, holding back an incomplete trailing UTF-8
// character (a byte-level token can end in the middle of one) until the ids that complete it
// arrive. Concatenating every step() and the final flush() gives decode(all ids) (exactly, for
// byte-level tokenizers; decoders that look at token position, like Metaspace, agree too because
// the stream re-decodes from a short context window, as HF's DecodeStream does).
// Not thread-safe (one stream per generation); the Tokenizer it uses may be shared.
//
// Example:
//   kiln::tokenizer::DecodeStream stream(tok, {.skip_special_tokens = true});
//   for (int32_t id : generated) std::cout << stream.step(id) << std::flush;
//   std::cout << stream.flush();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tokenizer/tokenizer.h"

namespace kiln::tokenizer {

class DecodeStream {
 public:
  explicit DecodeStream(std::shared_ptr<const Tokenizer> tokenizer, DecodeOptions options = {});

  // Adds one id; returns the newly completed text ("" when nothing is complete yet).
  std::string step(int32_t id);
  // Returns whatever is still held back (incomplete UTF-8 comes out as U+FFFD) and resets.
  std::string flush();
  void reset();

 private:
  std::string pending_text(const std::string& window_text) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  DecodeOptions options_;
  std::vector<int32_t> ids_;  // context window: ids_[0, prefix_index_) are already emitted
  std::string prefix_;        // decode(ids_[0, prefix_index_))
  size_t prefix_index_ = 0;
};

}  // namespace kiln::tokenizer
