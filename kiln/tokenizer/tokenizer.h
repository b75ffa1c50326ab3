// Tokenizer: Hugging Face tokenizer.json (+ tokenizer_config.json) in C++, producing exactly the ids
// of Hugging Face `tokenizers` for byte-level BPE tokenizers (Qwen2/Qwen3, Llama 3, GPT-2) and
// SentencePiece-style BPE ones (Llama 2, Mistral: Metaspace/Prepend/Replace, byte_fallback,
// TemplateProcessing with BOS).
//
// Pipeline of encode(), as HF runs it:
//   1. added tokens are found in the raw text (leftmost-longest; lstrip/rstrip/single_word) and
//      never split; normalized=true ones are then looked for in the normalized text;
//   2. normalizer (NFC, ...) on each remaining segment;  3. pre-tokenizer (Split regex, ByteLevel,
//   Metaspace, ...);  4. BPE per piece;  5. post-processor (BOS/EOS) when add_special_tokens.
// Anything in tokenizer.json that kiln does not implement is a kiln::Error naming the component type
// and the file, never a silent approximation. Input text must be valid UTF-8 (else kiln::Error).
//
// Threading: a Tokenizer is immutable after loading; encode/decode/encode_batch may be called from
// any number of threads at once. encode_batch itself runs on kiln::parallel_for.
//
// Example:
//   auto tok = kiln::AutoTokenizer::from_pretrained("/models/Qwen3-0.6B");
//   std::vector<int32_t> ids = tok->encode("Hello world");          // {9707, 1879}
//   std::string text = tok->decode(ids);                             // "Hello world"
//   auto batch = tok->encode_batch({"a", "b c"}, {.padding = kiln::tokenizer::Padding::kLongest});
//   batch.input_ids;        // i32 [2, L] host tensor; batch.attention_mask likewise
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::tokenizer {

class BpeModel;
class Normalizer;
class PreTokenizer;
class Decoder;
class PostProcessor;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // removed by skip_special_tokens
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // matched in the normalized text instead of the raw text
  bool single_word = false;  // only matched when not inside a word
};

struct EncodeOptions {
  bool add_special_tokens = true;  // run the post-processor (BOS/EOS); Qwen3 adds nothing
};

enum class Padding { kNone, kLongest, kMaxLength };
enum class Side { kLeft, kRight };

struct BatchEncodeOptions {
  bool add_special_tokens = true;
  Padding padding = Padding::kLongest;
  bool truncation = false;
  std::optional<int64_t> max_length;  // default: model_max_length (for kMaxLength / truncation)
  std::optional<int64_t> pad_to_multiple_of;
  std::optional<Side> padding_side;     // default: tokenizer_config padding_side, else right
  std::optional<Side> truncation_side;  // default: tokenizer_config truncation_side, else right
};

struct BatchEncoding {
  Tensor input_ids;       // i32 [B, L], host
  Tensor attention_mask;  // i32 [B, L], host: 1 for tokens, 0 for padding
  std::vector<std::vector<int32_t>> ids;  // per text, truncated, unpadded
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // Transformers' clean_up_tokenization_spaces; default: the tokenizer_config value (else false).
  std::optional<bool> clean_up_tokenization_spaces;
};

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and, when present, dir/tokenizer_config.json (and
  // special_tokens_map.json as a fallback for the special-token strings).
  static std::shared_ptr<Tokenizer> from_pretrained(const std::string& dir);
  // From in-memory file contents; `config_json` may be empty. `where` names the source in errors.
  static std::shared_ptr<Tokenizer> from_json(const std::string& tokenizer_json,
                                              const std::string& config_json = "",
                                              const std::string& where = "tokenizer.json");
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  BatchEncoding encode_batch(const std::vector<std::string>& texts,
                             const BatchEncodeOptions& options = {}) const;
  // Ids outside the tokenizer are silently dropped; invalid UTF-8 becomes U+FFFD per maximal
  // invalid subpart.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // Token strings as stored in the vocabulary ("Ġworld"); kiln::Error for an unknown id.
  std::vector<std::string> convert_ids_to_tokens(std::span<const int32_t> ids) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Like len(tokenizer) in Transformers: model vocabulary plus added tokens not in it.
  int64_t vocab_size() const { return vocab_size_; }
  // One past the largest id the tokenizer knows.
  int64_t id_limit() const { return id_limit_; }
  bool is_special_id(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  std::optional<std::string> bos_token() const { return bos_token_; }
  std::optional<std::string> eos_token() const { return eos_token_; }
  std::optional<std::string> pad_token() const { return pad_token_; }
  std::optional<std::string> unk_token() const { return unk_token_; }
  std::optional<int32_t> bos_token_id() const { return id_of(bos_token_); }
  std::optional<int32_t> eos_token_id() const { return id_of(eos_token_); }
  std::optional<int32_t> pad_token_id() const { return id_of(pad_token_); }
  std::optional<int32_t> unk_token_id() const { return id_of(unk_token_); }
  int64_t model_max_length() const { return model_max_length_; }
  Side padding_side() const { return padding_side_; }

 private:
  Tokenizer();
  std::optional<int32_t> id_of(const std::optional<std::string>& token) const {
    return token ? token_to_id(*token) : std::nullopt;
  }
  // Encodes one text segment free of raw-matched added tokens.
  void encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& ids) const;
  void load_config(const std::string& config_json, const std::string& where);

  struct AddedMatcher;  // leftmost-longest matcher over added-token contents

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::vector<AddedToken> added_;
  std::unique_ptr<AddedMatcher> raw_matcher_, normalized_matcher_;
  // Content matched per added token: raw for normalized=false, normalized content otherwise ("").
  std::vector<std::string> patterns_raw_, patterns_norm_;
  std::vector<int32_t> added_index_by_id_;  // id -> index in added_, or -1
  std::vector<uint8_t> skip_id_;            // ids removed by skip_special_tokens
  std::optional<std::string> bos_token_, eos_token_, pad_token_, unk_token_;
  int64_t vocab_size_ = 0, id_limit_ = 0;
  int64_t model_max_length_ = int64_t(1) << 30;
  Side padding_side_ = Side::kRight, truncation_side_ = Side::kRight;
  bool clean_up_spaces_ = false;
};

}  // namespace kiln::tokenizer

namespace kiln {
using AutoTokenizer = tokenizer::Tokenizer;
}  // namespace kiln
