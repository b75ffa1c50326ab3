#include "kiln/training/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/training/checkpoint.h"

namespace fs = std::filesystem;

namespace kiln::training {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600),
                  (long long)(t / 60 % 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

int64_t count_real_tokens(const TrainBatch& b) {
  const int32_t* m = b.attention_mask.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < b.attention_mask.numel(); ++i) n += m[i] != 0;
  return n;
}

void write_json_file(const std::string& path, const io::Json& j) {
  io::write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TrainerState

io::Json TrainerState::to_json(bool should_training_stop) const {
  io::Json j;
  j["best_global_step"] = nullptr;
  j["best_metric"] = nullptr;
  j["best_model_checkpoint"] = nullptr;
  j["epoch"] = epoch;
  j["eval_steps"] = eval_steps;
  j["global_step"] = global_step;
  j["is_hyper_param_search"] = false;
  j["is_local_process_zero"] = true;
  j["is_world_process_zero"] = true;
  j["log_history"] = log_history;
  j["logging_steps"] = logging_steps;
  j["max_steps"] = max_steps;
  j["num_input_tokens_seen"] = num_input_tokens_seen;
  j["num_train_epochs"] = num_train_epochs;
  j["save_steps"] = save_steps;
  j["stateful_callbacks"] = {
      {"TrainerControl",
       {{"args",
         {{"should_epoch_stop", false},
          {"should_evaluate", false},
          {"should_log", false},
          {"should_save", true},
          {"should_training_stop", should_training_stop}}},
        {"attributes", io::Json::object()}}}};
  j["total_flos"] = 0;
  j["train_batch_size"] = train_batch_size;
  j["trial_name"] = nullptr;
  j["trial_params"] = nullptr;
  return j;
}

TrainerState TrainerState::from_json(const io::Json& j, const std::string& where) {
  TrainerState s;
  s.global_step = io::get_int(j, "global_step", where);
  s.epoch = io::get_double(j, "epoch", where);
  s.max_steps = io::get_int(j, "max_steps", where);
  s.num_train_epochs = io::get_int_or(j, "num_train_epochs", 0, where);
  s.logging_steps = io::get_int_or(j, "logging_steps", 500, where);
  s.eval_steps = io::get_int_or(j, "eval_steps", 500, where);
  s.save_steps = io::get_int_or(j, "save_steps", 500, where);
  s.train_batch_size = io::get_int_or(j, "train_batch_size", 0, where);
  s.num_input_tokens_seen = io::get_int_or(j, "num_input_tokens_seen", 0, where);
  if (!j.contains("log_history") || !j["log_history"].is_array())
    throw Error(where + ": log_history", "missing or not an array");
  s.log_history = j["log_history"];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Trainer

struct Trainer::RunPlan {
  std::unique_ptr<DataLoader> loader;
  int64_t batches_per_epoch = 0;
  int64_t updates_per_epoch = 0;
  int64_t max_steps = 0;
  int64_t num_epochs = 0;
  int64_t logging_steps = 0, save_steps = 0, eval_steps = 0;
  // Where the loop starts (non-zero after resume).
  int64_t start_epoch = 0, start_batch = 0;
};

Trainer::Trainer(std::shared_ptr<TrainableModel> model, TrainingArguments args,
                 std::shared_ptr<const Dataset> train_dataset,
                 std::shared_ptr<const Dataset> eval_dataset, std::string tokenizer_dir)
    : model_(std::move(model)),
      args_(std::move(args)),
      train_(std::move(train_dataset)),
      eval_(std::move(eval_dataset)),
      tokenizer_dir_(std::move(tokenizer_dir)),
      progress_(&std::cerr) {
  if (!model_) throw Error("Trainer", "no model given");
  args_.validate();
  if (args_.eval_strategy != "no" && !eval_)
    throw Error("eval_strategy", "is '" + args_.eval_strategy + "' but no eval dataset was given");
}

void Trainer::append_log_file(const io::OrderedJson& entry) {
  std::string path = (fs::path(args_.output_dir) / kTrainLogFile).string();
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error(path, "cannot append to the training log");
  out << entry.dump() << "\n";
  out.flush();
  if (!out) throw Error(path, "write failed");
}

void Trainer::log(io::OrderedJson entry) {
  entry["step"] = state_.global_step;
  state_.log_history.push_back(io::Json::parse(entry.dump()));
  append_log_file(entry);
  if (progress_) {
    if (tty_) *progress_ << "\r\033[K";
    *progress_ << entry.dump() << "\n";
    progress_->flush();
  }
}

io::Json Trainer::evaluate() {
  if (!eval_) throw Error("eval_dataset", "evaluate() needs an eval dataset");
  auto t0 = Clock::now();
  DataLoader loader(eval_, args_.per_device_eval_batch_size, /*shuffle=*/false, 0,
                    args_.dataloader_drop_last);
  int64_t n = loader.num_batches();
  if (n == 0)
    throw Error(eval_->source(), "no full eval batch (dataloader_drop_last with " +
                                     std::to_string(eval_->size()) + " examples)");
  auto order = loader.epoch_order(0);
  double weighted = 0;
  int64_t samples = 0;
  for (int64_t i = 0; i < n; ++i) {
    TrainBatch b = loader.batch(order, i);
    LossSum s = model_->evaluate(b);
    // Transformers: each batch's loss is its mean token loss, repeated batch-size times.
    double mean = s.num_tokens > 0 ? s.loss_sum / double(s.num_tokens) : 0.0;
    weighted += mean * double(b.batch_size());
    samples += b.batch_size();
  }
  double runtime = seconds_since(t0);
  io::OrderedJson entry;
  entry["eval_loss"] = weighted / double(samples);
  entry["eval_runtime"] = runtime;
  entry["eval_samples_per_second"] = runtime > 0 ? double(samples) / runtime : 0.0;
  entry["eval_steps_per_second"] = runtime > 0 ? double(n) / runtime : 0.0;
  entry["epoch"] = state_.epoch;
  std::error_code ec;
  fs::create_directories(args_.output_dir, ec);
  log(entry);
  return state_.log_history.back();
}

void Trainer::save_checkpoint(const RunPlan& plan, bool final_step) {
  std::string dir = (fs::path(args_.output_dir) / checkpoint_name(state_.global_step)).string();
  int64_t epoch_index = state_.global_step / plan.updates_per_epoch;
  int64_t batch_in_epoch = (state_.global_step % plan.updates_per_epoch) *
                           args_.gradient_accumulation_steps;
  write_folder_atomic(dir, [&](const std::string& tmp) {
    model_->save_pretrained(tmp);
    optimizer_->save((fs::path(tmp) / kOptimizerFile).string(), model_->parameters());
    write_json_file((fs::path(tmp) / kSchedulerFile).string(),
                    io::Json::parse(schedule_.to_json(state_.global_step).dump()));
    write_json_file((fs::path(tmp) / kTrainerStateFile).string(), state_.to_json(final_step));
    io::Json rng = {{"generator", "mt19937_64 Fisher-Yates, seeded with seed + epoch"},
                    {"seed", args_.seed},
                    {"epoch", epoch_index},
                    {"batch_in_epoch", batch_in_epoch},
                    {"loss_since_last_log", loss_since_log_},
                    {"last_logged_step", last_logged_step_},
                    {"total_loss", total_loss_}};
    write_json_file((fs::path(tmp) / kRngStateFile).string(), rng);
    io::write_file_atomic((fs::path(tmp) / kTrainingArgsFile).string(),
                          args_.to_json().dump(2) + "\n");
    if (!tokenizer_dir_.empty()) copy_tokenizer_files(tokenizer_dir_, tmp);
  });
  last_checkpoint_ = dir;
  if (args_.save_total_limit) prune_checkpoints(args_.output_dir, *args_.save_total_limit);
}

void Trainer::resume(const std::string& dir, RunPlan& plan) {
  require_complete_checkpoint(dir);
  // Read and check every file before changing any state.
  std::string state_path = (fs::path(dir) / kTrainerStateFile).string();
  TrainerState st = TrainerState::from_json(io::load_json(state_path), state_path);
  std::string sched_path = (fs::path(dir) / kSchedulerFile).string();
  int64_t sched_steps = 0;
  LrSchedule::from_json(io::load_json(sched_path), sched_path, sched_steps);
  std::string rng_path = (fs::path(dir) / kRngStateFile).string();
  io::Json rng = io::load_json(rng_path);
  int64_t seed = io::get_int(rng, "seed", rng_path);
  double loss_since_log = io::get_double(rng, "loss_since_last_log", rng_path);
  int64_t last_logged = io::get_int(rng, "last_logged_step", rng_path);
  double total_loss = io::get_double(rng, "total_loss", rng_path);
  if (sched_steps != st.global_step)
    throw Error(sched_path, "last_epoch " + std::to_string(sched_steps) + " disagrees with " +
                                "global_step " + std::to_string(st.global_step) +
                                " in trainer_state.json");
  if (seed != args_.seed && progress_)
    *progress_ << "kiln: warning: [" << rng_path << "] the checkpoint was trained with seed "
               << seed << ", this run uses " << args_.seed << "; the data order changes\n";
  if (st.train_batch_size != args_.per_device_train_batch_size && progress_)
    *progress_ << "kiln: warning: [" << state_path << "] train_batch_size was "
               << st.train_batch_size << ", this run uses " << args_.per_device_train_batch_size
               << "\n";
  optimizer_->load((fs::path(dir) / kOptimizerFile).string(), model_->parameters());
  if (optimizer_->step_count() != st.global_step)
    throw Error(dir, "optimizer.safetensors has step " + std::to_string(optimizer_->step_count()) +
                         " but trainer_state.json has global_step " +
                         std::to_string(st.global_step));
  model_->load_parameters(dir);

  state_.global_step = st.global_step;
  state_.epoch = st.epoch;
  state_.log_history = st.log_history;
  state_.num_input_tokens_seen = st.num_input_tokens_seen;
  loss_since_log_ = loss_since_log;
  last_logged_step_ = last_logged;
  total_loss_ = total_loss;
  plan.start_epoch = st.global_step / plan.updates_per_epoch;
  plan.start_batch = (st.global_step % plan.updates_per_epoch) * args_.gradient_accumulation_steps;
  last_checkpoint_ = dir;
}

TrainOutput Trainer::train() {
  const TrainingArguments& a = args_;
  auto t_start = Clock::now();
  std::error_code ec;
  fs::create_directories(a.output_dir, ec);
  if (ec) throw Error(a.output_dir, "cannot create output_dir: " + ec.message());
  tty_ = progress_ == &std::cerr && !a.disable_tqdm && ::isatty(STDERR_FILENO);

  RunPlan plan;
  plan.loader = std::make_unique<DataLoader>(train_, a.per_device_train_batch_size,
                                             /*shuffle=*/true, uint64_t(a.seed),
                                             a.dataloader_drop_last);
  plan.batches_per_epoch = plan.loader->num_batches();
  if (plan.batches_per_epoch == 0)
    throw Error(train_->source(), "no full batch: " + std::to_string(train_->size()) +
                                      " examples, per_device_train_batch_size " +
                                      std::to_string(a.per_device_train_batch_size) +
                                      " and dataloader_drop_last");
  const int64_t ga = a.gradient_accumulation_steps;
  plan.updates_per_epoch =
      std::max<int64_t>((plan.batches_per_epoch + ga - 1) / ga, 1);
  if (a.max_steps > 0) {
    plan.max_steps = a.max_steps;
    plan.num_epochs = a.max_steps / plan.updates_per_epoch +
                      int64_t(a.max_steps % plan.updates_per_epoch > 0);
  } else {
    plan.max_steps = int64_t(std::ceil(a.num_train_epochs * double(plan.updates_per_epoch)));
    plan.num_epochs = int64_t(std::ceil(a.num_train_epochs));
  }
  plan.logging_steps = TrainingArguments::resolve_steps(a.logging_steps, plan.max_steps);
  plan.save_steps = TrainingArguments::resolve_steps(a.save_steps, plan.max_steps);
  plan.eval_steps = TrainingArguments::resolve_steps(a.effective_eval_steps(), plan.max_steps);

  state_ = TrainerState();
  state_.max_steps = plan.max_steps;
  state_.num_train_epochs = plan.num_epochs;
  state_.logging_steps = plan.logging_steps;
  state_.save_steps = plan.save_steps;
  state_.eval_steps = plan.eval_steps;
  state_.train_batch_size = a.per_device_train_batch_size;
  loss_since_log_ = total_loss_ = 0;
  last_logged_step_ = 0;
  last_checkpoint_.clear();

  auto& params = model_->parameters();
  optimizer_ = std::make_unique<AdamW>(
      params, AdamWOptions{a.adam_beta1, a.adam_beta2, a.adam_epsilon, a.weight_decay});
  schedule_ = LrSchedule(a.lr_scheduler_type, a.learning_rate, a.get_warmup_steps(plan.max_steps),
                         plan.max_steps);

  if (!a.resume_from_checkpoint.empty()) {
    std::string dir = a.resume_from_checkpoint;
    if (dir == "last") {
      dir = training::last_checkpoint(a.output_dir);
      if (dir.empty())
        throw Error("resume_from_checkpoint", "'last': no checkpoint-N folder in " + a.output_dir);
    }
    resume(dir, plan);
  }
  first_step_of_run_ = state_.global_step;
  // The log file mirrors log_history: rewritten from it at the start, then appended to.
  {
    std::string text;
    for (const auto& e : state_.log_history) text += e.dump() + "\n";
    io::write_file_atomic((fs::path(a.output_dir) / kTrainLogFile).string(), text);
  }

  std::vector<Tensor> grads = zeros_like(params);
  int64_t tokens_this_run = 0;
  auto t_loop = Clock::now();
  bool stop = state_.global_step >= plan.max_steps;
  if (progress_ && !stop)
    *progress_ << "kiln: training " << plan.max_steps << " steps (" << plan.num_epochs
               << " epochs of " << plan.updates_per_epoch << " updates, " << train_->size()
               << " examples, batch " << a.per_device_train_batch_size << " x " << ga
               << " accumulation)" << (state_.global_step ? ", resumed at step " : "")
               << (state_.global_step ? std::to_string(state_.global_step) : "") << "\n";

  for (int64_t epoch = plan.start_epoch; epoch < plan.num_epochs && !stop; ++epoch) {
    std::vector<int64_t> order = plan.loader->epoch_order(epoch);
    int64_t first_batch = epoch == plan.start_epoch ? plan.start_batch : 0;
    for (int64_t b0 = first_batch; b0 < plan.batches_per_epoch && !stop; b0 += ga) {
      int64_t b1 = std::min(b0 + ga, plan.batches_per_epoch);
      std::vector<TrainBatch> micro;
      int64_t label_tokens = 0;
      for (int64_t b = b0; b < b1; ++b) {
        micro.push_back(plan.loader->batch(order, b));
        label_tokens += count_label_tokens(micro.back());
        int64_t real = count_real_tokens(micro.back());
        tokens_this_run += real;
        state_.num_input_tokens_seen += real;
      }
      for (auto& g : grads) std::memset(g.raw(), 0, g.nbytes());
      const float scale = 1.0f / float(std::max<int64_t>(label_tokens, 1));
      double loss_sum = 0;
      for (const auto& mb : micro) loss_sum += model_->forward_backward(mb, scale, grads).loss_sum;
      double step_loss = loss_sum / double(std::max<int64_t>(label_tokens, 1));
      int64_t step = state_.global_step + 1;
      // The norm is logged before clipping; the clipping itself happens inside the AdamW pass.
      double grad_norm = a.max_grad_norm > 0 ? global_grad_norm(grads) : 0.0;
      if (!std::isfinite(step_loss) || !std::isfinite(grad_norm)) {
        std::string what = !std::isfinite(step_loss) ? "loss is " + std::to_string(step_loss)
                                                     : "gradient norm is " +
                                                           std::to_string(grad_norm);
        throw Error("training", what + " at step " + std::to_string(step) + " (epoch " +
                                    std::to_string(epoch) + "); stopped before the update. " +
                                    (last_checkpoint_.empty()
                                         ? std::string("No checkpoint was saved yet.")
                                         : "Last good checkpoint: " + last_checkpoint_) +
                                    " Try a lower learning_rate or check the data.");
      }
      double lr = schedule_.lr(state_.global_step);
      optimizer_->step(params, grads, lr, clip_coefficient(grad_norm, a.max_grad_norm));
      state_.global_step = step;
      state_.epoch = double(epoch) + double(b1) / double(plan.batches_per_epoch);
      loss_since_log_ += step_loss;
      total_loss_ += step_loss;

      if (tty_ && progress_) {
        double elapsed = seconds_since(t_loop);
        int64_t done = step - first_step_of_run_;
        double eta = done > 0 ? elapsed / double(done) * double(plan.max_steps - step) : NAN;
        char line[256];
        std::snprintf(line, sizeof line, "\r\033[K%lld/%lld [%3.0f%%] loss %.4f  lr %.3e  %.0f tok/s  "
                      "ETA %s",
                      (long long)step, (long long)plan.max_steps,
                      100.0 * double(step) / double(plan.max_steps), step_loss, lr,
                      elapsed > 0 ? double(tokens_this_run) / elapsed : 0.0,
                      format_duration(eta).c_str());
        *progress_ << line << std::flush;
      }

      bool do_log = (a.logging_first_step && step == 1) ||
                    (a.logging_strategy == "steps" && step % plan.logging_steps == 0);
      if (do_log) {
        io::OrderedJson e;
        e["loss"] = loss_since_log_ / double(step - last_logged_step_);
        if (a.max_grad_norm > 0) e["grad_norm"] = grad_norm;
        e["learning_rate"] = lr;
        e["epoch"] = state_.epoch;
        loss_since_log_ = 0;
        last_logged_step_ = step;
        log(e);
      }
      if (a.eval_strategy == "steps" && step % plan.eval_steps == 0) evaluate();
      stop = step >= plan.max_steps;
      if (a.save_strategy == "steps" && (step % plan.save_steps == 0 || stop))
        save_checkpoint(plan, stop);
    }
    if (!stop || state_.epoch >= double(epoch + 1)) {
      // End of an epoch (also when max_steps lands exactly on its last update).
      if (a.logging_strategy == "epoch" && state_.global_step > last_logged_step_) {
        io::OrderedJson e;
        e["loss"] = loss_since_log_ / double(state_.global_step - last_logged_step_);
        e["learning_rate"] = schedule_.lr(state_.global_step - 1);
        e["epoch"] = state_.epoch;
        loss_since_log_ = 0;
        last_logged_step_ = state_.global_step;
        log(e);
      }
      if (a.eval_strategy == "epoch") evaluate();
      if (a.save_strategy == "epoch") save_checkpoint(plan, stop);
    }
  }
  if (tty_ && progress_) *progress_ << "\r\033[K";

  double runtime = seconds_since(t_start);
  int64_t steps_run = state_.global_step - first_step_of_run_;
  int64_t samples = a.max_steps > 0
                        ? plan.max_steps * a.per_device_train_batch_size * ga
                        : int64_t(double(train_->size()) * a.num_train_epochs);
  io::OrderedJson final_entry;
  final_entry["train_runtime"] = runtime;
  final_entry["train_samples_per_second"] = runtime > 0 ? double(samples) / runtime : 0.0;
  final_entry["train_steps_per_second"] = runtime > 0 ? double(plan.max_steps) / runtime : 0.0;
  final_entry["train_tokens_per_second"] =
      runtime > 0 ? double(tokens_this_run) / seconds_since(t_loop) : 0.0;
  final_entry["train_loss"] = steps_run > 0 ? total_loss_ / double(state_.global_step) : 0.0;
  final_entry["epoch"] = state_.epoch;
  io::Json stats = model_->compile_stats();
  if (!stats.is_null() && !stats.empty()) final_entry["compile_stats"] = stats;
  log(final_entry);

  TrainOutput out;
  out.global_step = state_.global_step;
  out.training_loss = final_entry["train_loss"].get<double>();
  out.metrics = state_.log_history.back();
  return out;
}

void Trainer::save_model(const std::string& dir_arg) {
  std::string dir = dir_arg.empty() ? args_.output_dir : dir_arg;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir, "cannot create folder: " + ec.message());
  // Build the files in a hidden sibling folder, then rename each into place: every file is replaced
  // atomically and other contents of `dir` (checkpoints, logs) are left alone.
  fs::path tmp = fs::path(dir) / (".kiln-save-tmp-" + std::to_string(::getpid()));
  write_folder_atomic(tmp.string(), [&](const std::string& t) {
    model_->save_pretrained(t);
    if (!tokenizer_dir_.empty()) copy_tokenizer_files(tokenizer_dir_, t);
    io::write_file_atomic((fs::path(t) / kTrainingArgsFile).string(),
                          args_.to_json().dump(2) + "\n");
  });
  try {
    for (const auto& entry : fs::directory_iterator(tmp)) {
      fs::path target = fs::path(dir) / entry.path().filename();
      if (fs::is_directory(target)) fs::remove_all(target);
      fs::rename(entry.path(), target);
    }
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw Error(dir, std::string("saving the model failed: ") + e.what());
  }
  fs::remove_all(tmp, ec);
}

}  // namespace kiln::training
