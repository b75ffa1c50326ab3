// Trainer: the training loop of Transformers' Trainer for a TrainableModel: epochs or max_steps,
// gradient accumulation, global-norm clipping, AdamW with the LR schedule, logging, evaluation,
// checkpoints and exact resume.
//
// Step accounting (as Transformers' Trainer, recent versions):
//  - batches per epoch N from the DataLoader (drop_last honoured); updates per epoch =
//    max(ceil(N / gradient_accumulation_steps), 1), the last update of an epoch taking the leftover
//    micro-batches; max_steps = ceil(num_train_epochs * updates per epoch) unless max_steps > 0.
//  - One update: every micro-batch's label tokens (after the shift) are counted first; each
//    forward_backward gets loss_scale = 1 / that total, so the step loss is the mean token loss of
//    the whole accumulated batch (num_items_in_batch). The grad norm before clipping is logged.
//  - The learning rate logged with a step is the one that step used (Transformers reads it before
//    lr_scheduler.step()). Logged `loss` is the mean of the step losses since the previous log.
//  - Callbacks' order at the end of a step: log, evaluate, save; the run stops at max_steps (with a
//    final checkpoint when save_strategy is "steps").
//  - log_history entries: {loss, grad_norm, learning_rate, epoch, step}; evaluation
//    {eval_loss, eval_runtime, eval_samples_per_second, eval_steps_per_second, epoch, step}; the final
//    {train_runtime, train_samples_per_second, train_steps_per_second, train_loss, epoch, step}.
//    Each entry is also a line of output_dir/train_log.jsonl and a line (or progress bar update) on
//    stderr. Values are not rounded (Transformers rounds the loss to 4 decimals for display only).
//  - A non-finite loss or gradient norm stops training with a kiln::Error before the optimizer step;
//    checkpoints already written stay as they are.
//
// Threading: one Trainer runs on the calling thread; parallel work goes through kiln::parallel_for.
//
// Example:
//   auto train = std::make_shared<const kiln::training::Dataset>(
//       kiln::training::Dataset::from_file("train.jsonl", tokenize, data_options));
//   kiln::TrainingArguments args;  args.output_dir = "out";  args.max_steps = 100;
//   kiln::Trainer trainer(model, args, train);
//   kiln::training::TrainOutput result = trainer.train();
//   trainer.save_model("out/final");
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "kiln/io/json.h"
#include "kiln/training/data.h"
#include "kiln/training/optimizer.h"
#include "kiln/training/schedule.h"
#include "kiln/training/trainable_model.h"
#include "kiln/training/training_args.h"

namespace kiln::training {

// Transformers' TrainerState, the part kiln fills in.
struct TrainerState {
  int64_t global_step = 0;
  double epoch = 0;
  int64_t max_steps = 0;
  int64_t num_train_epochs = 0;
  int64_t logging_steps = 500, eval_steps = 500, save_steps = 500;
  int64_t train_batch_size = 0;
  int64_t num_input_tokens_seen = 0;
  io::Json log_history = io::Json::array();

  io::Json to_json(bool should_training_stop = false) const;  // trainer_state.json
  static TrainerState from_json(const io::Json& j, const std::string& where);
};

struct TrainOutput {
  int64_t global_step = 0;
  double training_loss = 0;
  io::Json metrics;  // the final log entry
};

class Trainer {
 public:
  // args are validated here (kiln::Error naming the field). tokenizer_dir, when given, is the folder
  // whose tokenizer files are copied into checkpoints and saved models.
  Trainer(std::shared_ptr<TrainableModel> model, TrainingArguments args,
          std::shared_ptr<const Dataset> train_dataset,
          std::shared_ptr<const Dataset> eval_dataset = nullptr, std::string tokenizer_dir = "");

  TrainOutput train();
  // Mean eval loss as Transformers computes it (per-batch token means, weighted by batch size);
  // appends {eval_loss, ..., epoch, step} to the log history and returns it.
  io::Json evaluate();
  // Writes the model (save_pretrained), the tokenizer files and training_args.json into dir
  // (default: output_dir); each file lands atomically.
  void save_model(const std::string& dir = "");

  const TrainerState& state() const { return state_; }
  const TrainingArguments& args() const { return args_; }
  // Where progress and log lines go (default std::cerr); nullptr silences them.
  void set_progress_stream(std::ostream* os) { progress_ = os; }
  // Folder of the last checkpoint written or resumed from ("" when none).
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  struct RunPlan;
  void save_checkpoint(const RunPlan& plan, bool final_step);
  void resume(const std::string& dir, RunPlan& plan);
  void log(io::OrderedJson entry);
  void append_log_file(const io::OrderedJson& entry);

  std::shared_ptr<TrainableModel> model_;
  TrainingArguments args_;
  std::shared_ptr<const Dataset> train_, eval_;
  std::string tokenizer_dir_;
  std::unique_ptr<AdamW> optimizer_;
  LrSchedule schedule_;
  TrainerState state_;
  std::ostream* progress_;
  std::string last_checkpoint_;
  // Running sums for logging (saved in rng_state.json so resume logs the same values).
  double loss_since_log_ = 0, total_loss_ = 0;
  int64_t last_logged_step_ = 0, first_step_of_run_ = 0;
  bool tty_ = false;
};

}  // namespace kiln::training

namespace kiln {
using Trainer = training::Trainer;
}
