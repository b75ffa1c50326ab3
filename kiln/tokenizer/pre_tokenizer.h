// Pre-tokenizers of tokenizer.json ("pre_tokenizer": {...}): Split, ByteLevel, Metaspace, Digits,
// Punctuation, WhitespaceSplit, Sequence. They cut normalized text into pieces that the model
// encodes independently.
//
// Split regexes: tokenizer.json regexes are Oniguruma patterns (backtracking, first alternative
// wins). kiln does not ship a regex engine; it recognises the patterns real tokenizers use and runs a
// hand-coded matcher for each (see Note [Split regexes] in pre_tokenizer.cpp). Any other regex is a
// kiln::Error that quotes the pattern.
//
// Example:
//   auto pre = make_pre_tokenizer(j["pre_tokenizer"], "tokenizer.json: pre_tokenizer");
//   std::vector<Piece> pieces{{"Hello world", true}};
//   pre->pre_tokenize(pieces);   // {"Hello", "Ġworld"} for Qwen3
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::tokenizer {

struct Piece {
  std::string text;
  bool at_start = false;  // starts at offset 0 of the original input (Metaspace prepend "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, in order. Empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// nullptr for a JSON null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// Known Split regexes (exposed for tests).
enum class KnownRegex { kQwen2, kLlama3, kGpt2 };
// Byte ranges [begin, end) of the matches of `re` in `text` (valid UTF-8), in order.
std::vector<std::pair<size_t, size_t>> find_regex_matches(KnownRegex re, std::string_view text);

}  // namespace kiln::tokenizer
