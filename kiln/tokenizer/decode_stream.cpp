#include "kiln/tokenizer/decode_stream.h"

#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

DecodeStream::DecodeStream(std::shared_ptr<const Tokenizer> tokenizer, DecodeOptions options)
    : tokenizer_(std::move(tokenizer)), options_(options) {}

void DecodeStream::reset() {
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
}

std::string DecodeStream::pending_text(const std::string& text) const {
  if (text.compare(0, prefix_.size(), prefix_) == 0) return text.substr(prefix_.size());
  // The context changed how the emitted text decodes (not possible with byte-level decoders):
  // emit the pending ids on their own rather than a wrong suffix.
  std::vector<int32_t> pending(ids_.begin() + std::ptrdiff_t(prefix_index_), ids_.end());
  return tokenizer_->decode(pending, options_);
}

std::string DecodeStream::step(int32_t id) {
  // The window keeps the ids already emitted (ids_[0, prefix_index_)) as context, so decoders that
  // treat the first token specially see the same tokens as a full decode would. A decode that ends
  // in U+FFFD is an incomplete character: wait for more ids.
  ids_.push_back(id);
  std::string text = tokenizer_->decode(ids_, options_);
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return {};
  std::string out = pending_text(text);
  // Slide the window: drop the old context; the ids just emitted become the new context.
  ids_.erase(ids_.begin(), ids_.begin() + std::ptrdiff_t(prefix_index_));
  prefix_index_ = ids_.size();
  prefix_ = tokenizer_->decode(ids_, options_);
  return out;
}

std::string DecodeStream::flush() {
  std::string text = tokenizer_->decode(ids_, options_);
  std::string out = text.size() > prefix_.size() ? pending_text(text) : std::string();
  reset();
  return out;
}

}  // namespace kiln::tokenizer
