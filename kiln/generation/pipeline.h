// pipeline("text-generation", ...): tokenizer + model + generate() behind one call, like
// Transformers' pipeline("text-generation", return_full_text=False).
//
// A call encodes the text with the folder's tokenizer (tokenizer.json), generates, and returns the
// new text (decoded with skip_special_tokens) and the new ids. A batch of texts runs as one batch,
// left-padded (generate() pads on the left; every row equals its unbatched result). Token ids are
// accepted directly too, for folders without a tokenizer.
//
// For a service that must never compile while serving, fix the cache length
// (PipelineOptions::generate.cache_len = L) and call warmup(batch): it compiles exactly the planned
// set (one prefill graph per prompt bucket <= L - 1, one decode graph at (batch, L)); with strict
// compilation on (FromPretrainedOptions::strict_compile or KILN_STRICT_COMPILE=1) any other shape is
// then a kiln::Error naming the input and dimension instead of a compile.
//
// Example:
//   auto pipe = kiln::pipeline("text-generation", "/models/Qwen3-0.6B");
//   auto cfg = pipe.generation_config();
//   cfg.max_new_tokens = 32;
//   kiln::generation::GeneratedText out = pipe("The capital of France is", cfg);
//   out.generated_text;  // the continuation only
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/generation/generate.h"
#include "kiln/generation/generation_config.h"
#include "kiln/models/causal_lm.h"
#include "kiln/tokenizer/tokenizer.h"

namespace kiln::generation {

struct PipelineOptions {
  models::FromPretrainedOptions model;  // dtype, device_map, disable_compile, strict_compile
  GenerateOptions generate;             // buckets, cache_len, on_token (decode is set by the pipeline)
};

struct GeneratedText {
  std::string generated_text;        // the new tokens decoded, special tokens skipped
  std::vector<int32_t> prompt_ids;   // what the text encoded to
  std::vector<int32_t> output_ids;   // new ids, up to and including the stop token
  StopReason stop_reason = StopReason::none;
};

// One graph that warmup compiled (or found compiled).
struct WarmupEntry {
  std::string function;  // prefill | decode
  int64_t batch = 0, seq = 0, cache_len = 0;
  double compile_ms = 0;  // 0 when it was compiled already
};

// The prompt buckets a service with a cache of `max_length` slots can use: `buckets` (default: the
// default buckets) that are <= max_length - 1. kiln::Error("--max-length") when none fits.
std::vector<int64_t> service_buckets(const models::ModelConfig& config, int64_t max_length,
                                     const std::vector<int64_t>& buckets = {});

// Plans and compiles one prefill graph per service bucket and one decode graph at
// (batch, max_length), through CausalLM::warmup (which also marks them planned for strict mode).
std::vector<WarmupEntry> warmup_service(models::CausalLM& model, int64_t batch,
                                        int64_t max_length,
                                        const std::vector<int64_t>& buckets = {});

class TextGenerationPipeline {
 public:
  TextGenerationPipeline(std::shared_ptr<models::CausalLM> model,
                         std::shared_ptr<tokenizer::Tokenizer> tokenizer, GenerationConfig config,
                         GenerateOptions options);

  GeneratedText operator()(const std::string& text) { return (*this)(text, config_); }
  GeneratedText operator()(const std::string& text, const GenerationConfig& config);
  std::vector<GeneratedText> operator()(const std::vector<std::string>& texts) {
    return (*this)(texts, config_);
  }
  std::vector<GeneratedText> operator()(const std::vector<std::string>& texts,
                                        const GenerationConfig& config);
  // Prompts as token ids (no tokenizer needed; generated_text is empty without one).
  std::vector<GeneratedText> generate_ids(const std::vector<std::vector<int32_t>>& prompts,
                                          const GenerationConfig& config);

  // Compiles the service set for `batch` rows at the fixed cache length options.cache_len.
  std::vector<WarmupEntry> warmup(int64_t batch);

  // The folder's generation_config.json (or the model config's defaults): a starting point.
  const GenerationConfig& generation_config() const { return config_; }
  models::CausalLM& model() { return *model_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  GenerateOptions& options() { return options_; }

 private:
  std::shared_ptr<models::CausalLM> model_;
  std::shared_ptr<tokenizer::Tokenizer> tokenizer_;
  GenerationConfig config_;
  GenerateOptions options_;
};

// task: "text-generation" (the only task so far; anything else is kiln::Error naming it).
// The tokenizer is optional: without tokenizer.json only generate_ids works.
TextGenerationPipeline pipeline(const std::string& task, const std::string& model_dir,
                                const PipelineOptions& options = {});

}  // namespace kiln::generation

namespace kiln {
using generation::pipeline;
using generation::TextGenerationPipeline;
}  // namespace kiln
