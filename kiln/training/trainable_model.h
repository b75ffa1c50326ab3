// TrainableModel: the only thing the Trainer knows about a model. The Qwen3 model (kiln/models)
// implements it with its compiled forward+backward graph; tests implement it with a bigram model.
//
// Contract:
//  - parameters() lists the f32 master weights, in a fixed order, named and shaped as in
//    Transformers (model.layers.0.self_attn.q_proj.weight, ...). The optimizer updates these tensors
//    in place between steps; the model reads them on every forward (casting to bf16 is the model's
//    business). Tied weights appear once.
//  - forward_backward() runs the model on one batch and ADDS d(loss_sum * loss_scale)/d(param) into
//    grads[i] (f32, same shape and order as parameters()). loss_sum is the summed cross-entropy
//    over label tokens after the causal shift (position t predicts labels[:, t + 1]; -100 is
//    ignored), and num_tokens counts those tokens. The Trainer passes loss_scale =
//    1 / (label tokens of all micro-batches of the optimizer step), as Transformers' Trainer does
//    with num_items_in_batch, so the accumulated gradient is that of the step's mean token loss.
//  - evaluate() is the same forward without gradients.
//  - save_pretrained() writes a folder Transformers and kiln load (config.json,
//    generation_config.json, model.safetensors). load_parameters() reads such a folder back into
//    parameters(); the default reads tensors by parameter name (any dtype, converted to f32) and is
//    right for any model whose save_pretrained writes its parameters under their own names in f32.
//
// Example:
//   std::vector<kiln::Tensor> grads = zeros_like(model.parameters());
//   kiln::training::LossSum s = model.forward_backward(batch, 1.0f / batch_tokens, grads);
//   double mean_loss = s.loss_sum / s.num_tokens;
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::training {

struct Parameter {
  std::string name;
  Tensor value;  // f32 master weight, shape as in Transformers
};

// One padded batch, all i32 host tensors [B, L].
struct TrainBatch {
  Tensor input_ids, attention_mask, labels;
  int64_t batch_size() const { return input_ids.dim(0); }
  int64_t seq_len() const { return input_ids.dim(1); }
};

// Label tokens the loss sees after the causal shift: labels[:, 1:] != -100.
int64_t count_label_tokens(const TrainBatch& batch);

struct LossSum {
  double loss_sum = 0;
  int64_t num_tokens = 0;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;
  virtual std::vector<Parameter>& parameters() = 0;
  virtual LossSum forward_backward(const TrainBatch& batch, float loss_scale,
                                   std::vector<Tensor>& grads) = 0;
  virtual LossSum evaluate(const TrainBatch& batch) = 0;
  virtual void save_pretrained(const std::string& dir) = 0;
  virtual void load_parameters(const std::string& dir);
  // Compile-cache counters and the like, copied into the final log entry when not empty.
  virtual nlohmann::json compile_stats() const { return {}; }
};

// f32 zero tensors shaped like each parameter.
std::vector<Tensor> zeros_like(const std::vector<Parameter>& params);

}  // namespace kiln::training
