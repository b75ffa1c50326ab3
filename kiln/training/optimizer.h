// AdamW over f32 master weights, as torch.optim.AdamW (amsgrad off), and global-norm clipping as
// torch.nn.utils.clip_grad_norm_. Runs eagerly on the host, vectorised by the compiler and split
// across kiln::parallel_for.
//
// Update per element, with t the step count after increment (torch 1.13's single-tensor path):
//   p   *= 1 - lr * wd                       (decoupled weight decay, before the Adam update)
//   m    = beta1 * m + (1 - beta1) * g
//   v    = beta2 * v + (1 - beta2) * g * g
//   p   -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Parameter groups follow Transformers' get_decay_parameter_names: no weight decay for any
// parameter whose lower-cased name matches bias, layernorm, rmsnorm, (^|.)norm($|.) or _norm($|.)
// (applies_weight_decay()).
//
// Example:
//   kiln::training::AdamW opt(model.parameters(), {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
//                                                   .weight_decay = 0.01});
//   double norm = kiln::training::clip_grad_norm(grads, 1.0);
//   opt.step(model.parameters(), grads, /*lr=*/1e-3);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/training/trainable_model.h"

namespace kiln::training {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// True unless the name marks a bias or a norm layer's parameter (Transformers' default grouping).
bool applies_weight_decay(const std::string& name);

class AdamW {
 public:
  AdamW(const std::vector<Parameter>& params, AdamWOptions options);

  // One update of every parameter with its gradient (same order and shapes as at construction),
  // each gradient multiplied by grad_scale first: the clipping coefficient, applied in the same pass
  // (the same arithmetic as scaling the gradients in place, without another pass over them).
  void step(std::vector<Parameter>& params, const std::vector<Tensor>& grads, double lr,
            float grad_scale = 1.0f);

  int64_t step_count() const { return step_; }
  const std::vector<bool>& decay_mask() const { return decay_; }
  const std::vector<Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<Tensor>& exp_avg_sq() const { return exp_avg_sq_; }

  // optimizer.safetensors: "<name>.exp_avg" and "<name>.exp_avg_sq" (f32) per parameter, and the
  // step count in the metadata. load() checks every tensor before changing any state.
  void save(const std::string& path, const std::vector<Parameter>& params) const;
  void load(const std::string& path, const std::vector<Parameter>& params);

 private:
  AdamWOptions opt_;
  int64_t step_ = 0;
  std::vector<bool> decay_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

// Global L2 norm over all gradients (accumulated in f64 in fixed-size blocks, so the result does not
// depend on the number of threads).
double global_grad_norm(const std::vector<Tensor>& grads);

// What clip_grad_norm_ multiplies the gradients by: min(1, max_norm / (norm + 1e-6)) as an f32, or 1
// when max_norm <= 0 or the norm is not finite.
float clip_coefficient(double norm, double max_norm);

// Returns the norm before clipping (what Trainer logs as grad_norm) and scales every gradient by
// clip_coefficient in place, as clip_grad_norm_ does. Trainer instead passes the coefficient to
// AdamW::step, which saves a pass over the gradients.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm);

}  // namespace kiln::training
