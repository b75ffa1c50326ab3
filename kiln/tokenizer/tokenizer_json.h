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
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::tokenizer {

struct TokenizerJson {
  nlohmann::json doc;  // the whole document except model.vocab / model.merges when streamed
  bool vocab_streamed = false;   // model.vocab was an object of token -> id, now in `vocab`
  bool merges_streamed = false;  // model.merges was an array, now in `merges`
  // Streamed entries live in flat arenas (no allocation per entry): entry i is
  // arena.substr(offsets[i], offsets[i + 1] - offsets[i]).
  struct Strings {
    std::string arena;
    std::vector<uint32_t> offsets{0};
    size_t size() const { return offsets.size() - 1; }
    std::string_view operator[](size_t i) const {
      return std::string_view(arena).substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
    void push(std::string_view s) {
      arena.append(s);
      offsets.push_back(uint32_t(arena.size()));
    }
  };
  Strings vocab_tokens;           // model.vocab keys, in file order
  std::vector<int64_t> vocab_ids; // their ids
  Strings merge_sides;            // model.merges: entry 2k is the left side of merge k, 2k+1 the right
};

// Throws kiln::Error naming `where` (with line and column) on malformed JSON, and naming the merge
// index for merges that are neither "a b" strings nor [a, b] arrays.
TokenizerJson parse_tokenizer_json(const std::string& text, const std::string& where);

}  // namespace kiln::tokenizer
