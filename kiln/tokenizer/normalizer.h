// Normalizers of tokenizer.json ("normalizer": {...}): NFC, NFD, NFKC, NFKD, Lowercase, Prepend,
// Replace (String pattern), Strip, Sequence. Any other type, or a Replace with a Regex pattern, is a
// kiln::Error naming it and the file: kiln never approximates a component it does not implement.
//
// Example:
//   auto norm = make_normalizer(j["normalizer"], "tokenizer.json: normalizer");  // null -> nullptr
//   std::string s = norm->normalize("cafe\u0301");
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `s` is valid UTF-8; so is the result.
  virtual std::string normalize(std::string_view s) const = 0;
};

// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

}  // namespace kiln::tokenizer
