// CausalLM: a loaded decoder-only model (Qwen3, Qwen2, Llama) that runs compiled graphs over a
// static KV cache.
//
// The model is written once against the graph builder (decoder.cpp) and compiled per function and
// shape through the model's CompileCache:
//   prefill  ids [B, T] into a cache of L slots -> logits of the last position, f32 [B, V]
//   decode   the same with T = 1 (one graph per (B, L))
//   score    ids [B, T] -> logits of every position, f32 [B*T, V] (perplexity)
// Inputs are host tensors; only these fixed-shape tensors reach the backend.
//
// Example:
//   auto model = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = kiln::DType::bf16});
//   kiln::models::KVCache cache = model->make_cache(1, 64);
//   kiln::Tensor logits = model->forward("prefill", ids, positions, kv_mask, cache, 0);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"
#include "kiln/graph/backend.h"
#include "kiln/graph/compile_cache.h"
#include "kiln/graph/graph.h"
#include "kiln/models/config.h"

namespace kiln::models {

struct FromPretrainedOptions {
  DType dtype = DType::bf16;         // weights and activations (f32 for checking against references)
  std::string device_map = "auto";  // cpu | cuda[:N] | auto
  bool disable_compile = false;     // eager: unfused ops, no memory plan (same numbers)
  bool strict_compile = false;      // also KILN_STRICT_COMPILE=1: unplanned shapes are errors
};

// The static KV cache: per layer, k and v of shape [B, L, Hkv, D] in the model dtype, views of one
// allocation (so it is mapped in huge pages).
struct KVCache {
  int64_t batch = 0, max_len = 0;
  std::vector<Tensor> k, v;
  size_t bytes() const;
};

class ModelWeights;

class CausalLM {
 public:
  static std::shared_ptr<CausalLM> from_pretrained(const std::string& dir,
                                                   const FromPretrainedOptions& options = {});
  ~CausalLM();

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::string& dir() const { return dir_; }
  bool compile_enabled() const { return !options_.disable_compile; }
  void set_disable_compile(bool disable) { options_.disable_compile = disable; }

  KVCache make_cache(int64_t batch, int64_t max_len) const;

  // Runs `function` (prefill | decode | score) on host inputs:
  //   input_ids i32 [B, T], positions i32 [B, T] (rope positions), kv_mask i32 [B, L] (1 = real
  //   token in that cache slot), cache of L slots; the T tokens go to slots [slot_offset, +T).
  // Returns a host f32 tensor the caller owns: [B, V] for prefill/decode, [B*T, V] for score.
  Tensor forward(const std::string& function, const Tensor& input_ids, const Tensor& positions,
                 const Tensor& kv_mask, KVCache& cache, int64_t slot_offset);

  // Compiles (or finds) the graph for a function and shape without running it; also marks it as
  // planned for strict mode.
  void warmup(const std::string& function, int64_t batch, int64_t seq, int64_t cache_len);

  // The graph model code builds for a function and shape (before any pass).
  graph::Graph build_graph(const std::string& function, int64_t batch, int64_t seq,
                           int64_t cache_len) const;

  graph::CompileCache& compile_cache() { return cache_; }
  // A loaded weight by Transformers name, in the model dtype (training copies its master weights).
  Tensor weight(const std::string& name) const;
  size_t weight_bytes() const;    // parameter bytes in the model dtype (embeddings once when tied)
  size_t packed_bytes() const;    // backend-prepared weight bytes

 private:
  CausalLM() = default;
  graph::CompileKey key_for(const std::string& function, int64_t batch, int64_t seq,
                            int64_t cache_len) const;
  std::shared_ptr<graph::Executable> executable(const std::string& function, int64_t batch,
                                                int64_t seq, int64_t cache_len);

  std::string dir_;
  ModelConfig config_;
  DType dtype_ = DType::bf16;
  Device device_;
  FromPretrainedOptions options_;
  std::unique_ptr<ModelWeights> weights_;
  graph::Backend* backend_ = nullptr;
  graph::CompileCache cache_;
  std::map<std::string, std::shared_ptr<graph::Executable>> eager_;
};

}  // namespace kiln::models

namespace kiln {
struct AutoModelForCausalLM {
  static std::shared_ptr<models::CausalLM> from_pretrained(
      const std::string& dir, const models::FromPretrainedOptions& options = {}) {
    return models::CausalLM::from_pretrained(dir, options);
  }
};
}  // namespace kiln
