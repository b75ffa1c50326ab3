// Helpers shared by the kiln subcommands: argument parsing that names the argument at fault,
// model loading from CLI flags, and the stats object printed by --stats / --json.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/generation/generation_config.h"
#include "kiln/models/causal_lm.h"
#include "kiln/tokenizer/tokenizer.h"

namespace kiln::cli {

// "1,2,3" -> {1, 2, 3}; anything else is kiln::Error naming `argument`.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& argument);

struct ModelFlags {
  std::string dtype = "bf16";
  std::string device = "auto";
  bool no_compile = false;
};
void add_model_flags(CLI::App& cmd, ModelFlags& flags);
std::shared_ptr<models::CausalLM> load_model(const std::string& dir, const ModelFlags& flags);

// Generation flags shared by `generate` and `chat`: greedy unless --do-sample.
struct SamplingFlags {
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
};
void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags);
// The model folder's generation_config.json with the flags applied over it.
GenerationConfig generation_config_from_flags(const std::string& model_dir,
                                              const models::CausalLM& model,
                                              const SamplingFlags& flags);

// The folder's tokenizer, or null when it has no tokenizer.json.
std::shared_ptr<tokenizer::Tokenizer> load_tokenizer_if_present(const std::string& dir);

// {"prefill": {"compiles": 1, "hits": 0, "compile_ms": 12.3}, ...}
nlohmann::json compile_stats_json(models::CausalLM& model);

// For the bench commands: seconds since t0, and the median of timings.
double seconds_since(std::chrono::steady_clock::time_point t0);
double median(std::vector<double> v);

}  // namespace kiln::cli
