// GenerationConfig: how generate() picks and stops, with Transformers' field names and defaults.
//
// Read from generation_config.json (from_json / from_pretrained). Fields Transformers writes that do
// not change the produced tokens (transformers_version, output_*, cache settings, ...) are accepted
// and ignored; a field that would change generation and that kiln does not implement (num_beams > 1,
// no_repeat_ngram_size, typical_p < 1, ...) is a kiln::Error naming the field, never silently
// dropped. Defaults equal Transformers' GenerationConfig(), with two documented differences:
//   - max_new_tokens defaults to 20. Transformers' default is max_length = 20 counting the prompt;
//     kiln budgets new tokens, which is what callers nearly always mean. A max_length read from a
//     file still caps prompt + new tokens (see max_new_tokens_for).
//   - seed is kiln's own: sampling draws from std::mt19937_64 seeded with it, so the same seed gives
//     the same tokens in kiln, but not the tokens PyTorch would draw with torch.manual_seed(seed).
// top_k, top_p, min_p and temperature act only when do_sample is true, as in Transformers;
// repetition_penalty acts in greedy mode too.
//
// Example:
//   auto model_cfg = kiln::models::ModelConfig::from_pretrained(dir);
//   auto gen = kiln::GenerationConfig::from_pretrained(dir, model_cfg);
//   gen.max_new_tokens = 64;
//   gen.validate();
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/json.h"

namespace kiln::models {
struct ModelConfig;
}

namespace kiln::generation {

struct GenerationConfig {
  int64_t max_new_tokens = 20;
  // Cap on prompt + new tokens, as Transformers' max_length; unset unless a file or caller sets it.
  std::optional<int64_t> max_length;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;  // 0 disables
  double top_p = 1.0;  // 1 disables
  std::optional<double> min_p;
  double repetition_penalty = 1.0;  // 1 disables
  std::optional<uint64_t> seed;     // unset: a fresh random seed per generate() call
  std::vector<int64_t> eos_token_id;  // one id or a list; any of them ends a row
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;
  std::vector<std::string> stop_strings;
  bool disable_compile = false;

  // Parses a generation_config.json object; `where` names the file in errors.
  static GenerationConfig from_json(const io::Json& j, const std::string& where);
  // dir/generation_config.json when present; otherwise defaults with bos/eos/pad from the model's
  // config.json, as Transformers' GenerationConfig.from_model_config does.
  static GenerationConfig from_pretrained(const std::string& dir,
                                          const models::ModelConfig& model_config);
  static GenerationConfig from_model_config(const models::ModelConfig& model_config);

  // The config as Transformers would write it (only fields that differ from defaults, plus ids).
  io::Json to_json() const;

  // kiln::Error naming the first field out of range.
  void validate() const;

  // New tokens to generate for a prompt of `prompt_length`: max_new_tokens, capped by max_length
  // when that is set. kiln::Error("max_length") when the prompt already reaches max_length.
  int64_t max_new_tokens_for(int64_t prompt_length) const;

  // The id written into rows that have finished: pad_token_id, else the first eos id (Transformers
  // does the same, with a warning), else none.
  std::optional<int64_t> effective_pad_token_id() const;

  bool is_eos(int64_t id) const;
};

}  // namespace kiln::generation

namespace kiln {
using GenerationConfig = generation::GenerationConfig;
}
