#include "kiln/generation/generate.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/generation/sampling.h"

namespace kiln::generation {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double GenerateStats::prefill_tokens_per_s() const {
  return prefill_seconds_ns > 0 ? double(batch * bucket) * 1e9 / double(prefill_seconds_ns) : 0;
}

double GenerateStats::decode_tokens_per_s() const {
  return decode_ns > 0 ? double(batch * decode_steps) * 1e9 / double(decode_ns) : 0;
}

std::vector<int64_t> default_buckets(int64_t max_position_embeddings) {
  std::vector<int64_t> b;
  for (int64_t n = 32; n < max_position_embeddings; n *= 2) b.push_back(n);
  b.push_back(max_position_embeddings);
  return b;
}

int64_t prompt_bucket(int64_t length, const std::vector<int64_t>& buckets,
                      int64_t max_position_embeddings) {
  const auto& list = buckets.empty() ? default_buckets(max_position_embeddings) : buckets;
  for (int64_t b : list)
    if (b >= length) return b;
  return length;  // longer than every bucket: its own shape
}

GenerateOutput generate(models::CausalLM& model, const Tensor& input_ids,
                        const Tensor& attention_mask, const GenerationConfig& config,
                        const GenerateOptions& options) {
  config.validate();
  const auto& mc = model.config();
  if (input_ids.ndim() != 2 || input_ids.dtype() != DType::i32)
    throw Error("input_ids", "expected i32 [batch, length], got " + shape_str(input_ids.shape()));
  if (attention_mask.shape() != input_ids.shape() || attention_mask.dtype() != DType::i32)
    throw Error("attention_mask", "expected i32 " + shape_str(input_ids.shape()));
  const int64_t B = input_ids.dim(0), T = input_ids.dim(1);
  if (B == 0 || T == 0) throw Error("input_ids", "empty prompt batch");
  const int32_t* ids = input_ids.data<int32_t>();
  const int32_t* mask = attention_mask.data<int32_t>();

  // Each row's real tokens (left padding only: a 0 after a 1 would be right padding).
  std::vector<std::vector<int32_t>> prompt(static_cast<size_t>(B));
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    bool seen = false;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t m = mask[b * T + t], id = ids[b * T + t];
      if (m != 0 && m != 1) throw Error("attention_mask", "values must be 0 or 1");
      if (m == 0 && seen)
        throw Error("attention_mask", "row " + std::to_string(b) +
                                          " is right-padded; generation needs left padding "
                                          "(padding_side=\"left\")");
      if (m == 1) {
        if (id < 0 || id >= mc.vocab_size)
          throw Error("input_ids", "token id " + std::to_string(id) + " in row " +
                                       std::to_string(b) + " is outside the vocabulary [0, " +
                                       std::to_string(mc.vocab_size) + ")");
        prompt[size_t(b)].push_back(id);
        seen = true;
      }
    }
    if (!seen) throw Error("input_ids", "row " + std::to_string(b) + " has no tokens");
    longest = std::max<int64_t>(longest, int64_t(prompt[size_t(b)].size()));
  }
  const int64_t max_new = config.max_new_tokens_for(longest);
  if (max_new <= 0) throw Error("max_new_tokens", "must be positive, got " + std::to_string(max_new));
  if (longest + max_new > mc.max_position_embeddings)
    throw Error("input_ids", "a prompt of " + std::to_string(longest) + " tokens plus " +
                                 std::to_string(max_new) +
                                 " new tokens exceeds max_position_embeddings (" +
                                 std::to_string(mc.max_position_embeddings) + ")");

  const int64_t bucket = prompt_bucket(longest, options.buckets, mc.max_position_embeddings);
  int64_t L = bucket + max_new;
  if (options.cache_len > 0) {
    if (options.cache_len < L)
      throw Error("max_length", "the cache holds " + std::to_string(options.cache_len) +
                                    " tokens but this call needs " + std::to_string(L) +
                                    " (prompt bucket " + std::to_string(bucket) + " + " +
                                    std::to_string(max_new) + " new tokens)");
    L = options.cache_len;
  }

  // Host tensors of fixed shape: prompt slots [0, bucket), new tokens after.
  Tensor pre_ids = Tensor::zeros({B, bucket}, DType::i32);
  Tensor pre_pos = Tensor::zeros({B, bucket}, DType::i32);
  Tensor kv_mask = Tensor::zeros({B, L}, DType::i32);
  std::vector<int32_t> next_pos(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompt[size_t(b)];
    const int64_t pad = bucket - int64_t(p.size());
    for (int64_t t = 0; t < bucket; ++t) {
      const bool real = t >= pad;
      pre_ids.data<int32_t>()[b * bucket + t] = real ? p[size_t(t - pad)] : 0;
      // Transformers: position_ids = cumsum(mask) - 1, with padding set to 1.
      pre_pos.data<int32_t>()[b * bucket + t] = real ? int32_t(t - pad) : 1;
      kv_mask.data<int32_t>()[b * L + t] = real ? 1 : 0;
    }
    next_pos[size_t(b)] = int32_t(p.size());
  }

  models::KVCache cache = model.make_cache(B, L);
  StoppingCriteria stop(config, B, max_new, options.decode);
  LogitsProcessor processor(config);
  Rng rng = Rng::from_config(config);
  GenerateOutput out;
  out.stats.batch = B;
  out.stats.bucket = bucket;
  out.stats.cache_len = L;
  for (const auto& p : prompt) out.stats.prompt_tokens += int64_t(p.size());

  int64_t t0 = now_ns();
  Tensor logits = model.forward("prefill", pre_ids, pre_pos, kv_mask, cache, 0);
  out.stats.prefill_seconds_ns = now_ns() - t0;

  // previous ids per row (prompt + generated) for the repetition penalty.
  std::vector<std::vector<int32_t>> history = prompt;
  std::vector<int32_t> next(static_cast<size_t>(B));
  Tensor step_ids = Tensor::empty({B, 1}, DType::i32);
  Tensor step_pos = Tensor::empty({B, 1}, DType::i32);
  const int64_t V = mc.vocab_size;
  int64_t slot = bucket;
  t0 = now_ns();
  while (true) {
    for (int64_t b = 0; b < B; ++b) {
      std::span<float> row(logits.data<float>() + b * V, size_t(V));
      next[size_t(b)] = stop.finished(b) ? stop.pad_token_id()
                                         : processor.next_token(row, history[size_t(b)], rng);
    }
    std::vector<bool> was_finished(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) was_finished[size_t(b)] = stop.finished(b);
    stop.update(next);
    for (int64_t b = 0; b < B; ++b) {
      if (was_finished[size_t(b)]) continue;
      history[size_t(b)].push_back(next[size_t(b)]);
      if (options.on_token) options.on_token(b, next[size_t(b)]);
    }
    if (stop.done()) break;
    // Feed the chosen tokens (pads for finished rows, as Transformers does) at the next slot.
    for (int64_t b = 0; b < B; ++b) {
      step_ids.data<int32_t>()[b] = next[size_t(b)];
      step_pos.data<int32_t>()[b] = next_pos[size_t(b)]++;
      kv_mask.data<int32_t>()[b * L + slot] = 1;
    }
    logits = model.forward("decode", step_ids, step_pos, kv_mask, cache, slot);
    ++slot;
    ++out.stats.decode_steps;
  }
  out.stats.decode_ns = now_ns() - t0;
  for (int64_t b = 0; b < B; ++b) {
    auto g = stop.generated(b);
    out.new_tokens.emplace_back(g.begin(), g.end());
    out.stop_reasons.push_back(stop.reason(b));
    out.stats.new_tokens += int64_t(g.size());
  }
  return out;
}

GenerateOutput generate(models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerationConfig& config, const GenerateOptions& options) {
  if (prompts.empty()) throw Error("prompts", "no prompts given");
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  if (longest == 0) throw Error("prompts", "empty prompt");
  const int64_t B = int64_t(prompts.size()), T = int64_t(longest);
  Tensor ids = Tensor::zeros({B, T}, DType::i32);
  Tensor mask = Tensor::zeros({B, T}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    if (p.empty()) throw Error("prompts", "prompt " + std::to_string(b) + " is empty");
    const int64_t pad = T - int64_t(p.size());
    for (size_t t = 0; t < p.size(); ++t) {
      ids.data<int32_t>()[b * T + pad + int64_t(t)] = p[t];
      mask.data<int32_t>()[b * T + pad + int64_t(t)] = 1;
    }
  }
  return generate(model, ids, mask, config, options);
}

}  // namespace kiln::generation
