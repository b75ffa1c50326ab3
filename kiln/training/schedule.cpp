#include "kiln/training/schedule.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"

namespace kiln::training {

LrSchedule::LrSchedule(std::string type, double base_lr, int64_t num_warmup_steps,
                       int64_t num_training_steps)
    : type_(std::move(type)), base_lr_(base_lr), warmup_(num_warmup_steps), total_(num_training_steps) {
  if (type_ != "linear" && type_ != "cosine" && type_ != "constant" &&
      type_ != "constant_with_warmup")
    throw Error("lr_scheduler_type", "unknown schedule '" + type_ +
                                         "' (linear, cosine, constant, constant_with_warmup)");
}

double LrSchedule::factor(int64_t step) const {
  if (type_ == "constant") return 1.0;
  if (step < warmup_) return double(step) / double(std::max<int64_t>(1, warmup_));
  if (type_ == "constant_with_warmup") return 1.0;
  if (type_ == "linear")
    return std::max(0.0, double(total_ - step) / double(std::max<int64_t>(1, total_ - warmup_)));
  // cosine, num_cycles = 0.5
  double progress = double(step - warmup_) / double(std::max<int64_t>(1, total_ - warmup_));
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 2.0 * 0.5 * progress)));
}

io::OrderedJson LrSchedule::to_json(int64_t steps_taken) const {
  io::OrderedJson j;
  j["lr_scheduler_type"] = type_;
  j["base_lr"] = base_lr_;
  j["num_warmup_steps"] = warmup_;
  j["num_training_steps"] = total_;
  j["last_epoch"] = steps_taken;
  j["_last_lr"] = io::OrderedJson::array({lr(steps_taken)});
  return j;
}

LrSchedule LrSchedule::from_json(const io::Json& j, const std::string& where,
                                 int64_t& steps_taken) {
  LrSchedule s(io::get_string(j, "lr_scheduler_type", where), io::get_double(j, "base_lr", where),
               io::get_int(j, "num_warmup_steps", where), io::get_int(j, "num_training_steps", where));
  steps_taken = io::get_int(j, "last_epoch", where);
  return s;
}

}  // namespace kiln::training
