#include "kiln/tokenizer/tokenizer_json.h"

#include "kiln/core/error.h"
#include "kiln/io/json.h"

namespace kiln::tokenizer {

namespace {

using Json = nlohmann::json;

// Builds a DOM for everything but model.vocab (object) and model.merges (array), which go straight
// into TokenizerJson's vectors.
class Handler : public nlohmann::json_sax<Json> {
 public:
  Handler(TokenizerJson& out, const std::string& where) : out_(out), where_(where) {}

  bool null() override { return value(Json(nullptr)); }
  bool boolean(bool v) override { return value(Json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(Json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(static_cast<int64_t>(v));
    return value(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == Mode::kVocab) throw Error(where_ + ": model.vocab", "ids must be integers");
    return value(Json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
        throw Error(where_ + ": model.merges[" + std::to_string(merge_count()) + "]",
                    "a merge string must be two tokens separated by one space, got \"" + v + "\"");
      out_.merge_sides.push(std::string_view(v).substr(0, sp));
      out_.merge_sides.push(std::string_view(v).substr(sp + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ >= 2) bad_pair();
      out_.merge_sides.push(v);
      ++pair_size_;
      return true;
    }
    if (mode_ == Mode::kVocab) throw Error(where_ + ": model.vocab", "ids must be integers");
    return value(Json(std::move(v)));
  }
  bool binary(binary_t&) override { return false; }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) {
      if (mode_ == Mode::kPendingVocab) {
        mode_ = Mode::kVocab;
        out_.vocab_streamed = true;
        return true;
      }
      bad_model_entry();
    }
    return push(Json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      out_.vocab_tokens.push(k);
      return true;
    }
    key_ = std::move(k);
    // model.vocab / model.merges: the key is at depth 2 (root object, model object).
    if (stack_.size() == 2 && in_model_) {
      if (key_ == "vocab") mode_ = Mode::kPendingVocab;
      if (key_ == "merges") mode_ = Mode::kPendingMerges;
    }
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    return pop();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kPendingMerges) {
      mode_ = Mode::kMerges;
      out_.merges_streamed = true;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_size_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom && mode_ != Mode::kPendingVocab) bad_model_entry();
    if (mode_ == Mode::kPendingVocab) mode_ = Mode::kDom;  // e.g. Unigram's [token, score] list
    return push(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ != 2) bad_pair();
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    return pop();
  }
  bool parse_error(std::size_t byte, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_ = e.what();
    error_byte_ = byte;
    return false;
  }
  const std::string& error() const { return error_; }
  size_t error_byte() const { return error_byte_; }

 private:
  enum class Mode { kDom, kPendingVocab, kVocab, kPendingMerges, kMerges, kMergePair };

  size_t merge_count() const { return out_.merge_sides.size() / 2; }
  [[noreturn]] void bad_pair() {
    throw Error(where_ + ": model.merges[" + std::to_string(merge_count()) + "]",
                "a merge pair must hold exactly two strings");
  }
  [[noreturn]] void bad_model_entry() {
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair)
      throw Error(where_ + ": model.merges[" + std::to_string(merge_count()) + "]",
                  "expected a \"a b\" string or a [a, b] array");
    throw Error(where_ + ": model.vocab", "expected an object of token -> id");
  }
  bool vocab_id(int64_t id) {
    out_.vocab_ids.push_back(id);
    return true;
  }
  bool value(Json v) {
    if (mode_ == Mode::kVocab) throw Error(where_ + ": model.vocab", "ids must be integers");
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair) bad_model_entry();
    if (mode_ == Mode::kPendingVocab || mode_ == Mode::kPendingMerges) mode_ = Mode::kDom;
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return true;
    }
    Json& top = *stack_.back();
    if (top.is_object()) {
      top[key_] = std::move(v);
    } else {
      top.push_back(std::move(v));
    }
    return true;
  }
  bool push(Json container) {
    if (mode_ == Mode::kPendingMerges) mode_ = Mode::kDom;  // merges as an object: DOM, checked later
    Json* slot;
    if (stack_.empty()) {
      out_.doc = std::move(container);
      slot = &out_.doc;
    } else {
      Json& top = *stack_.back();
      if (top.is_object()) {
        slot = &(top[key_] = std::move(container));
      } else {
        top.push_back(std::move(container));
        slot = &top.back();
      }
    }
    bool entering_model = stack_.size() == 1 && key_ == "model" && slot->is_object();
    stack_.push_back(slot);
    if (entering_model) in_model_ = true;
    return true;
  }
  bool pop() {
    if (stack_.size() == 2 && in_model_) in_model_ = false;
    stack_.pop_back();
    return true;
  }

  TokenizerJson& out_;
  const std::string& where_;
  std::vector<Json*> stack_;
  std::string key_, error_;
  size_t error_byte_ = 0;
  size_t pair_size_ = 0;
  Mode mode_ = Mode::kDom;
  bool in_model_ = false;
};

}  // namespace

TokenizerJson parse_tokenizer_json(const std::string& text, const std::string& where) {
  TokenizerJson out;
  Handler handler(out, where);
  bool ok = Json::sax_parse(text, &handler, nlohmann::json::input_format_t::json, true);
  if (!ok) {
    throw Error(where, "invalid JSON at " + io::json_error_position(text, handler.error_byte()) +
                           ": " + handler.error());
  }
  return out;
}

}  // namespace kiln::tokenizer
