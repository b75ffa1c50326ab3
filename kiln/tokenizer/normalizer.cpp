#include "kiln/tokenizer/normalizer.h"

#include <vector>

#include "kiln/core/error.h"
#include "kiln/tokenizer/components.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

namespace {

class UnicodeNorm : public Normalizer {
 public:
  explicit UnicodeNorm(NormForm f) : form_(f) {}
  std::string normalize(std::string_view s) const override {
    return kiln::tokenizer::normalize(s, form_);
  }

 private:
  NormForm form_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(std::string_view s) const override { return to_lower(s); }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  std::string normalize(std::string_view s) const override {
    if (s.empty()) return {};  // HF prepends only to non-empty strings
    return prepend_ + std::string(s);
  }

 private:
  std::string prepend_;
};

class Replace : public Normalizer {
 public:
  Replace(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view s) const override {
    return replace_all(s, pattern_, content_);
  }

 private:
  std::string pattern_, content_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!is_whitespace(utf8_next(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_whitespace(utf8_next(s, i))) break;
        e = start;
      }
    }
    return std::string(s.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class SequenceNorm : public Normalizer {
 public:
  explicit SequenceNorm(std::vector<std::unique_ptr<Normalizer>> items) : items_(std::move(items)) {}
  std::string normalize(std::string_view s) const override {
    std::string cur(s);
    for (const auto& n : items_) cur = n->normalize(cur);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, where);
  if (type == "NFC") return std::make_unique<UnicodeNorm>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNorm>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNorm>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNorm>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(json_string(j, "prepend", where));
  if (type == "Replace")
    return std::make_unique<Replace>(string_pattern(j, where), json_string(j, "content", where));
  if (type == "Strip")
    return std::make_unique<Strip>(json_bool_or(j, "strip_left", false, where),
                                   json_bool_or(j, "strip_right", false, where));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      throw Error(where + ".normalizers", "expected an array of normalizers");
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto n = make_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (n) items.push_back(std::move(n));
    }
    return std::make_unique<SequenceNorm>(std::move(items));
  }
  throw Error(where, "normalizer type \"" + type + "\" is not supported by kiln");
}

}  // namespace kiln::tokenizer
