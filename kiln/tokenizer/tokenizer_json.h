// Fast reader for tokenizer.json. The file is ~11 MB, almost all of it model.vocab (150k entries)
// and model.merges (150k pairs); building a DOM for those alone takes ~300 ms with nlohmann, so a SAX
// pass streams them into flat vectors and builds a DOM only for the small rest of the document.
//
// Example:
//   TokenizerJson tj = parse_tokenizer_json(kiln::io::read_file(path), path);
//   tj.doc["normalizer"]; tj.vocab.size(); tj.merges[0].first;
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kiln::tokenizer {

struct TokenizerJson {
  nlohmann::json doc;  // the whole document except model.vocab / model.merges when streamed
  bool vocab_streamed = false;   // model.vocab was an object of token -> id, now in `vocab`
  bool merges_streamed = false;  // model.merges was an array, now in `merges`
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
};

// Throws kiln::Error naming `where` (with line and column) on malformed JSON, and naming the merge
// index for merges that are neither "a b" strings nor [a, b] arrays.
TokenizerJson parse_tokenizer_json(const std::string& text, const std::string& where);

}  // namespace kiln::tokenizer
