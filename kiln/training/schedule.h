// Learning-rate schedules, as Transformers' get_scheduler builds them (a LambdaLR over the base LR).
//
// lr(step) is the rate used by the optimizer step that follows `step` earlier scheduler steps, so
// the first optimizer step uses lr(0). With warmup W and T training steps:
//   linear:               step < W: step / W;  else max(0, (T - step) / max(1, T - W))
//   cosine:               step < W: step / W;  else max(0, 0.5 * (1 + cos(pi * 2 * 0.5 * p))),
//                         p = (step - W) / max(1, T - W)   (num_cycles = 0.5)
//   constant:             1
//   constant_with_warmup: step < W: step / max(1, W);  else 1
// (warmup factors divide by max(1, W), as Transformers does.)
//
// Example:
//   kiln::training::LrSchedule s("linear", 1e-3, /*warmup=*/0, /*total=*/3);
//   s.lr(0) == 1e-3;  s.lr(1) == 6.667e-4;  s.lr(2) == 3.333e-4
#pragma once

#include <cstdint>
#include <string>

#include "kiln/io/json.h"

namespace kiln::training {

class LrSchedule {
 public:
  LrSchedule() = default;
  // kiln::Error("lr_scheduler_type") for an unknown type.
  LrSchedule(std::string type, double base_lr, int64_t num_warmup_steps, int64_t num_training_steps);

  double lr(int64_t step) const { return base_lr_ * factor(step); }
  double factor(int64_t step) const;

  const std::string& type() const { return type_; }
  double base_lr() const { return base_lr_; }
  int64_t num_warmup_steps() const { return warmup_; }
  int64_t num_training_steps() const { return total_; }

  // scheduler.json: the schedule's parameters plus `last_epoch` (scheduler steps taken, as in
  // PyTorch's LambdaLR state) and `_last_lr`.
  io::OrderedJson to_json(int64_t steps_taken) const;
  // Reads scheduler.json; returns the schedule and sets steps_taken. Errors name `where`.
  static LrSchedule from_json(const io::Json& j, const std::string& where, int64_t& steps_taken);

 private:
  std::string type_ = "constant";
  double base_lr_ = 0;
  int64_t warmup_ = 0, total_ = 1;
};

}  // namespace kiln::training
