// CausalLMTrainable: a Hugging Face checkpoint (Qwen3, Qwen2 and Llama, biases included) as a
// TrainableModel. The train step is one graph per (batch, seq): the decoder built in training mode
// (weights bound per run), with the backward pass appended by graph autodiff, compiled and
// memory-planned through the model's CompileCache; `compile = false` runs the same graph eagerly.
// bf16 mixed precision keeps f32 master weights (parameters()) that the graph casts to bf16 where a
// matmul or norm reads them, as Transformers' autocast does (no bf16 copy of the model stays
// resident); embeddings are looked up in f32; gradients are f32.
//
// Example:
//   auto model = kiln::training::CausalLMTrainable::from_pretrained(dir, {.bf16 = true});
//   kiln::Trainer trainer(model, args, dataset);
#pragma once

#include <memory>
#include <string>

#include "kiln/graph/compile_cache.h"
#include "kiln/models/config.h"
#include "kiln/training/trainable_model.h"

namespace kiln::training {

struct TrainableOptions {
  bool bf16 = false;    // bf16 compute, f32 master weights
  bool compile = true;  // false: eager
};

class CausalLMTrainable final : public TrainableModel {
 public:
  static std::shared_ptr<CausalLMTrainable> from_pretrained(const std::string& dir,
                                                            const TrainableOptions& options = {});
  ~CausalLMTrainable() override;

  std::vector<Parameter>& parameters() override { return params_; }
  LossSum forward_backward(const TrainBatch& batch, float loss_scale,
                           std::vector<Tensor>& grads) override;
  LossSum evaluate(const TrainBatch& batch) override;
  void save_pretrained(const std::string& dir) override;
  nlohmann::json compile_stats() const override;

  const models::ModelConfig& config() const { return config_; }
  graph::CompileCache& compile_cache() { return cache_; }

 private:
  CausalLMTrainable() = default;
  LossSum run(const std::string& function, const TrainBatch& batch, float loss_scale,
              std::vector<Tensor>* grads);

  std::string dir_;
  models::ModelConfig config_;
  TrainableOptions options_;
  std::vector<Parameter> params_;
  std::unique_ptr<graph::WeightStore> constants_;  // the RoPE table
  graph::CompileCache cache_;
  std::map<std::string, std::shared_ptr<graph::Executable>> eager_;
};

}  // namespace kiln::training
