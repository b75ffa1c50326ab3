#include "tools/cli/common.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>

#include "kiln/core/error.h"

namespace kiln::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& argument) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument("");
      ids.push_back(int32_t(v));
    } catch (const std::exception&) {
      throw Error(argument, "expected comma-separated token ids, got '" + item + "'");
    }
    i = j + 1;
  }
  if (ids.empty()) throw Error(argument, "no token ids given");
  return ids;
}

void add_model_flags(CLI::App& cmd, ModelFlags& flags) {
  cmd.add_option("--dtype", flags.dtype, "Weights and activations: bf16 or f32")
      ->capture_default_str();
  cmd.add_option("--device", flags.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  cmd.add_flag("--no-compile", flags.no_compile, "Run eagerly (unfused ops, same results)");
}

std::shared_ptr<models::CausalLM> load_model(const std::string& dir, const ModelFlags& flags) {
  models::FromPretrainedOptions o;
  o.dtype = parse_dtype(flags.dtype, "--dtype");
  o.device_map = flags.device;
  o.disable_compile = flags.no_compile;
  return models::CausalLM::from_pretrained(dir, o);
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags) {
  cmd.add_option("--max-new-tokens", flags.max_new_tokens, "Tokens to generate")
      ->capture_default_str();
  cmd.add_flag("--do-sample", flags.do_sample, "Sample instead of greedy decoding");
  cmd.add_option("--temperature", flags.temperature);
  cmd.add_option("--top-k", flags.top_k);
  cmd.add_option("--top-p", flags.top_p);
  cmd.add_option("--min-p", flags.min_p);
  cmd.add_option("--repetition-penalty", flags.repetition_penalty);
  cmd.add_option("--seed", flags.seed, "Seed for sampling (same seed, same output)");
}

GenerationConfig generation_config_from_flags(const std::string& model_dir,
                                              const models::CausalLM& model,
                                              const SamplingFlags& flags) {
  auto cfg = GenerationConfig::from_pretrained(model_dir, model.config());
  cfg.max_new_tokens = flags.max_new_tokens;
  cfg.do_sample = flags.do_sample;
  if (flags.temperature) cfg.temperature = *flags.temperature;
  if (flags.top_k) cfg.top_k = *flags.top_k;
  if (flags.top_p) cfg.top_p = *flags.top_p;
  if (flags.min_p) cfg.min_p = *flags.min_p;
  if (flags.repetition_penalty) cfg.repetition_penalty = *flags.repetition_penalty;
  if (flags.seed) cfg.seed = *flags.seed;
  return cfg;
}

std::shared_ptr<tokenizer::Tokenizer> load_tokenizer_if_present(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  return tokenizer::Tokenizer::from_pretrained(dir);
}

nlohmann::json compile_stats_json(models::CausalLM& model) {
  return model.compile_cache().stats_json();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kiln::cli
