// generate(): the host-side generation loop over a static KV cache.
//
// Inputs and outputs live on the host. Prompts are left-padded up to a length bucket (powers of two
// from 32 by default), the cache is sized to the bucket plus max_new_tokens (or to a fixed
// `cache_len`), and the model runs one prefill graph per (batch, bucket, cache) and one decode graph
// per (batch, cache): a 50-token generation compiles exactly two graphs, and a second identical call
// compiles none. Rows of a batch equal their unbatched results (left padding is masked out exactly).
//
// Example:
//   auto model = kiln::AutoModelForCausalLM::from_pretrained(dir);
//   kiln::GenerationConfig cfg = kiln::GenerationConfig::from_pretrained(dir, model->config());
//   cfg.max_new_tokens = 50;
//   auto out = kiln::generation::generate(*model, ids, mask, cfg);
//   out.new_tokens[0]  // the new ids of row 0, up to and including the stop token
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/generation/generation_config.h"
#include "kiln/generation/stopping.h"
#include "kiln/models/causal_lm.h"

namespace kiln::generation {

struct GenerateOptions {
  // Prompt length buckets; empty = powers of two from 32 up to max_position_embeddings.
  std::vector<int64_t> buckets;
  // Fixed cache length for every call (a service plans one decode graph); 0 = bucket + new tokens.
  int64_t cache_len = 0;
  // Called for every new token of every unfinished row, in order (streaming).
  std::function<void(int64_t row, int32_t token)> on_token;
  // Decodes ids to text, for stop strings.
  StoppingCriteria::Decode decode;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;       // real (unpadded) prompt tokens over all rows
  int64_t new_tokens = 0;          // generated tokens over all rows (pads excluded)
  int64_t prefill_seconds_ns = 0;  // wall time of the prefill call
  int64_t decode_steps = 0;        // decode graph calls
  int64_t decode_ns = 0;           // wall time of all decode steps (incl. sampling)
  int64_t bucket = 0, cache_len = 0;
  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;  // per row-step: batch * steps / time
  int64_t batch = 0;
};

struct GenerateOutput {
  std::vector<std::vector<int32_t>> new_tokens;  // per row, up to and including the stop token
  std::vector<StopReason> stop_reasons;
  GenerateStats stats;
};

// The bucket a prompt of `length` tokens is padded to.
int64_t prompt_bucket(int64_t length, const std::vector<int64_t>& buckets,
                      int64_t max_position_embeddings);
std::vector<int64_t> default_buckets(int64_t max_position_embeddings);

// input_ids, attention_mask: i32 [B, T] on the host, left-padded (mask 0 before the prompt).
GenerateOutput generate(models::CausalLM& model, const Tensor& input_ids,
                        const Tensor& attention_mask, const GenerationConfig& config,
                        const GenerateOptions& options = {});

// Convenience for unpadded prompts given as id lists (padded on the left here).
GenerateOutput generate(models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerationConfig& config, const GenerateOptions& options = {});

}  // namespace kiln::generation
