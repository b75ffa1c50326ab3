#include "kiln/generation/pipeline.h"

#include <chrono>
#include <filesystem>

#include "kiln/core/error.h"

namespace kiln::generation {

std::vector<int64_t> service_buckets(const models::ModelConfig& config, int64_t max_length,
                                     const std::vector<int64_t>& buckets) {
  if (max_length < 2 || max_length > config.max_position_embeddings)
    throw Error("--max-length", "must be in [2, max_position_embeddings = " +
                                    std::to_string(config.max_position_embeddings) + "], got " +
                                    std::to_string(max_length));
  const auto all = buckets.empty() ? default_buckets(config.max_position_embeddings) : buckets;
  std::vector<int64_t> out;
  for (int64_t b : all) {
    if (b <= 0) throw Error("--buckets", "bucket lengths must be positive, got " + std::to_string(b));
    // A prompt bucket needs at least one free slot for the first new token.
    if (b <= max_length - 1) out.push_back(b);
  }
  if (out.empty())
    throw Error("--max-length", "a cache of " + std::to_string(max_length) +
                                    " slots holds no prompt bucket plus one new token (smallest "
                                    "bucket: " + std::to_string(all.front()) + ")");
  return out;
}

std::vector<WarmupEntry> warmup_service(models::CausalLM& model, int64_t batch,
                                        int64_t max_length, const std::vector<int64_t>& buckets) {
  if (batch <= 0) throw Error("--batch", "must be positive, got " + std::to_string(batch));
  std::vector<WarmupEntry> out;
  auto run = [&](const std::string& fn, int64_t seq) {
    auto before = model.compile_cache().stats()[fn];
    auto t0 = std::chrono::steady_clock::now();
    model.warmup(fn, batch, seq, max_length);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    // Report compile time only for a graph that was compiled now (eager mode compiles nothing).
    auto after = model.compile_cache().stats()[fn];
    out.push_back({fn, batch, seq, max_length, after.compiles > before.compiles ? ms : 0.0});
  };
  for (int64_t b : service_buckets(model.config(), max_length, buckets)) run("prefill", b);
  run("decode", 1);
  return out;
}

TextGenerationPipeline::TextGenerationPipeline(std::shared_ptr<models::CausalLM> model,
                                               std::shared_ptr<tokenizer::Tokenizer> tokenizer,
                                               GenerationConfig config, GenerateOptions options)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(std::move(config)),
      options_(std::move(options)) {
  if (tokenizer_) {
    auto tok = tokenizer_;
    options_.decode = [tok](std::span<const int32_t> ids) { return tok->decode(ids); };
  }
}

GeneratedText TextGenerationPipeline::operator()(const std::string& text,
                                                 const GenerationConfig& config) {
  return (*this)(std::vector<std::string>{text}, config).front();
}

std::vector<GeneratedText> TextGenerationPipeline::operator()(
    const std::vector<std::string>& texts, const GenerationConfig& config) {
  if (!tokenizer_)
    throw Error(model_->dir() + "/tokenizer.json",
                "text input needs a tokenizer; pass token ids to generate_ids instead");
  if (texts.empty()) throw Error("texts", "no prompts given");
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    prompts.push_back(tokenizer_->encode(texts[i]));
    if (prompts.back().empty())
      throw Error("texts[" + std::to_string(i) + "]", "the prompt encodes to no tokens");
  }
  return generate_ids(prompts, config);
}

std::vector<GeneratedText> TextGenerationPipeline::generate_ids(
    const std::vector<std::vector<int32_t>>& prompts, const GenerationConfig& config) {
  auto out = generate(*model_, prompts, config, options_);
  std::vector<GeneratedText> results;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GeneratedText r;
    r.prompt_ids = prompts[i];
    r.output_ids = out.new_tokens[i];
    r.stop_reason = out.stop_reasons[i];
    if (tokenizer_) r.generated_text = tokenizer_->decode(r.output_ids, {.skip_special_tokens = true});
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<WarmupEntry> TextGenerationPipeline::warmup(int64_t batch) {
  if (options_.cache_len <= 0)
    throw Error("cache_len", "warmup needs a fixed cache length (PipelineOptions.generate.cache_len)");
  return warmup_service(*model_, batch, options_.cache_len, options_.buckets);
}

TextGenerationPipeline pipeline(const std::string& task, const std::string& model_dir,
                                const PipelineOptions& options) {
  if (task != "text-generation")
    throw Error("task", "unsupported pipeline task '" + task + "' (supported: text-generation)");
  auto model = models::CausalLM::from_pretrained(model_dir, options.model);
  std::shared_ptr<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(model_dir + "/tokenizer.json"))
    tok = tokenizer::Tokenizer::from_pretrained(model_dir);
  auto config = GenerationConfig::from_pretrained(model_dir, model->config());
  return TextGenerationPipeline(std::move(model), std::move(tok), std::move(config),
                                options.generate);
}

}  // namespace kiln::generation
