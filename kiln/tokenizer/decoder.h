// Decoders ("decoder": {...}) and post-processors ("post_processor": {...}) of tokenizer.json.
// Decoders turn token strings back into text: ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace (String pattern), Sequence. Post-processors add special tokens around an encoding:
// TemplateProcessing (single sequences), RobertaProcessing, BertProcessing, ByteLevel (ids
// unchanged), Sequence. Unknown types are a kiln::Error naming the type and the file.
//
// Example:
//   auto dec = make_decoder(j["decoder"], "tokenizer.json: decoder");
//   std::vector<std::string> toks{"Hello", "Ġworld"};
//   dec->decode_chain(toks);   // toks == {"Hello world"}
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings in place; the caller concatenates what is left.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds special tokens around the ids of a single sequence (when add_special_tokens is on).
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // How many ids process() adds (for truncation before post-processing).
  virtual size_t added_tokens() const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& where);

// A TemplateProcessing equivalent to "bos? $A eos?" (Transformers' LlamaTokenizerFast rebuilds its
// post-processor this way from add_bos_token / add_eos_token).
std::unique_ptr<PostProcessor> make_bos_eos_processor(std::optional<int32_t> bos,
                                                      std::optional<int32_t> eos);

}  // namespace kiln::tokenizer
