#include "kiln/training/training_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <sstream>
#include <variant>

#include "kiln/core/error.h"
#include "kiln/io/json.h"

namespace kiln::training {

const std::vector<std::string> kIgnoredTransformersFields = {
    "report_to",   "run_name", "logging_dir", "dataloader_num_workers", "dataloader_pin_memory",
    "remove_unused_columns", "do_train", "do_eval", "log_level"};

namespace {

using TA = TrainingArguments;
// One row per field: drives from_json, to_json and the CLI, so the three never drift apart.
using Member = std::variant<int64_t TA::*, double TA::*, bool TA::*, std::string TA::*,
                            std::optional<int64_t> TA::*, std::optional<double> TA::*>;
struct Field {
  const char* name;
  Member member;
  const char* help;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {"output_dir", &TA::output_dir, "Where checkpoints and logs are written"},
      {"overwrite_output_dir", &TA::overwrite_output_dir, "Accepted for compatibility"},
      {"per_device_train_batch_size", &TA::per_device_train_batch_size, "Training batch size"},
      {"per_device_eval_batch_size", &TA::per_device_eval_batch_size, "Evaluation batch size"},
      {"gradient_accumulation_steps", &TA::gradient_accumulation_steps,
       "Micro-batches per optimizer step"},
      {"learning_rate", &TA::learning_rate, "Peak learning rate"},
      {"weight_decay", &TA::weight_decay, "AdamW decoupled weight decay (not on norms/biases)"},
      {"adam_beta1", &TA::adam_beta1, "AdamW beta1"},
      {"adam_beta2", &TA::adam_beta2, "AdamW beta2"},
      {"adam_epsilon", &TA::adam_epsilon, "AdamW epsilon"},
      {"max_grad_norm", &TA::max_grad_norm, "Clip gradients to this global norm (0: no clipping)"},
      {"num_train_epochs", &TA::num_train_epochs, "Epochs (ignored when max_steps > 0)"},
      {"max_steps", &TA::max_steps, "Optimizer steps; overrides num_train_epochs when > 0"},
      {"lr_scheduler_type", &TA::lr_scheduler_type,
       "linear | cosine | constant | constant_with_warmup"},
      {"warmup_steps", &TA::warmup_steps, "Linear warmup steps"},
      {"warmup_ratio", &TA::warmup_ratio, "Warmup as a fraction of the steps (if warmup_steps=0)"},
      {"logging_strategy", &TA::logging_strategy, "steps | epoch | no"},
      {"logging_steps", &TA::logging_steps, "Log every N steps (< 1: ratio of the steps)"},
      {"logging_first_step", &TA::logging_first_step, "Also log the first step"},
      {"save_strategy", &TA::save_strategy, "steps | epoch | no"},
      {"save_steps", &TA::save_steps, "Checkpoint every N steps (< 1: ratio of the steps)"},
      {"save_total_limit", &TA::save_total_limit, "Keep at most N checkpoints"},
      {"eval_strategy", &TA::eval_strategy, "no | steps | epoch"},
      {"eval_steps", &TA::eval_steps, "Evaluate every N steps (default: logging_steps)"},
      {"seed", &TA::seed, "Seed of the data order"},
      {"bf16", &TA::bf16, "bf16 compute with f32 master weights"},
      {"torch_compile", &TA::torch_compile, "Compiled train step (false: eager)"},
      {"dataloader_drop_last", &TA::dataloader_drop_last, "Drop the last incomplete batch"},
      {"resume_from_checkpoint", &TA::resume_from_checkpoint, "Checkpoint folder to resume from"},
      {"disable_tqdm", &TA::disable_tqdm, "No progress bar; plain log lines"},
      {"max_length", &TA::max_length, "Tokens per example (truncation and padding length)"},
      {"padding", &TA::padding, "max_length | longest"},
      {"packing", &TA::packing, "Pack texts (joined by EOS) into full blocks of max_length"},
      {"skip_bad_lines", &TA::skip_bad_lines, "Skip bad .jsonl lines instead of stopping"},
  };
  return table;
}

std::string type_name(const io::Json& v) { return v.type_name(); }

void set_from_json(TA& a, const Field& f, const io::Json& v, const std::string& where) {
  std::string at = where + ": " + f.name;
  auto bad = [&](const char* want) {
    return Error(at, std::string("expected ") + want + ", got " + type_name(v) + " " + v.dump());
  };
  std::visit(
      [&](auto m) {
        using T = std::remove_cvref_t<decltype(a.*m)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          const auto i = io::as_int64(v);
          if (!i) throw bad("an integer");
          a.*m = *i;
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) throw bad("a number");
          a.*m = v.get<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) throw bad("true or false");
          a.*m = v.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (v.is_null()) {
            a.*m = "";
          } else if (v.is_string()) {
            a.*m = v.get<std::string>();
          } else {
            throw bad("a string");
          }
        } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
          if (v.is_null()) {
            a.*m = std::nullopt;
          } else if (v.is_number_integer()) {
            a.*m = v.get<int64_t>();
          } else {
            throw bad("an integer or null");
          }
        } else {
          if (v.is_null()) {
            a.*m = std::nullopt;
          } else if (v.is_number()) {
            a.*m = v.get<double>();
          } else {
            throw bad("a number or null");
          }
        }
      },
      f.member);
}

io::Json get_as_json(const TA& a, const Field& f) {
  return std::visit(
      [&](auto m) -> io::Json {
        using T = std::remove_cvref_t<decltype(a.*m)>;
        if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                      std::is_same_v<T, std::optional<double>>) {
          return a.*m ? io::Json(*(a.*m)) : io::Json(nullptr);
        } else {
          return io::Json(a.*m);
        }
      },
      f.member);
}

// Parses a CLI string into the JSON value the field expects, so CLI and config share one path.
io::Json cli_value_to_json(const Field& f, const std::string& s) {
  std::string at = std::string("--") + f.name;
  std::replace(at.begin(), at.end(), '_', '-');
  return std::visit(
      [&](auto m) -> io::Json {
        using T = std::remove_cvref_t<decltype(std::declval<TA&>().*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return io::Json(s);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (s == "true" || s == "1" || s.empty()) return io::Json(true);
          if (s == "false" || s == "0") return io::Json(false);
          throw Error(at, "expected true or false, got '" + s + "'");
        } else {
          if (s == "none" || s == "null") {
            if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                          std::is_same_v<T, std::optional<double>>)
              return io::Json(nullptr);
            throw Error(at, "expected a number, got '" + s + "'");
          }
          size_t used = 0;
          try {
            if constexpr (std::is_same_v<T, int64_t> ||
                          std::is_same_v<T, std::optional<int64_t>>) {
              int64_t v = std::stoll(s, &used);
              if (used == s.size()) return io::Json(v);
            } else {
              double v = std::stod(s, &used);
              if (used == s.size()) return io::Json(v);
            }
          } catch (const std::exception&) {
          }
          throw Error(at, "expected a number, got '" + s + "'");
        }
      },
      f.member);
}

bool is_one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

}  // namespace

std::vector<std::string> training_argument_names() {
  std::vector<std::string> out;
  for (const auto& f : fields()) out.push_back(f.name);
  return out;
}

TrainingArguments TrainingArguments::from_json(const io::Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where, "training arguments must be a JSON object");
  TrainingArguments a;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    auto f = std::find_if(fields().begin(), fields().end(),
                          [&](const Field& x) { return key == x.name; });
    if (f != fields().end()) {
      set_from_json(a, *f, it.value(), where);
      continue;
    }
    if (std::find(kIgnoredTransformersFields.begin(), kIgnoredTransformersFields.end(), key) !=
        kIgnoredTransformersFields.end())
      continue;
    if (key == "evaluation_strategy")
      throw Error(where + ": " + key, "unknown field; Transformers renamed it to eval_strategy");
    throw Error(where + ": " + key,
                "unknown training argument (see docs/notes/training.md for the supported fields)");
  }
  return a;
}

io::OrderedJson TrainingArguments::to_json() const {
  io::OrderedJson out = io::OrderedJson::object();
  for (const auto& f : fields()) out[f.name] = get_as_json(*this, f);
  return out;
}

int64_t TrainingArguments::resolve_steps(double steps, int64_t max_steps) {
  if (steps < 1) return std::max<int64_t>(1, int64_t(std::ceil(double(max_steps) * steps)));
  return int64_t(steps);
}

int64_t TrainingArguments::get_warmup_steps(int64_t num_training_steps) const {
  if (warmup_steps > 0) return warmup_steps;
  return int64_t(std::ceil(double(num_training_steps) * warmup_ratio));
}

void TrainingArguments::validate() const {
  auto fail = [](const char* field, const std::string& what) { throw Error(field, what); };
  auto num = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  if (output_dir.empty()) fail("output_dir", "must not be empty");
  if (per_device_train_batch_size < 1)
    fail("per_device_train_batch_size",
         "must be at least 1, got " + std::to_string(per_device_train_batch_size));
  if (per_device_eval_batch_size < 1)
    fail("per_device_eval_batch_size",
         "must be at least 1, got " + std::to_string(per_device_eval_batch_size));
  if (gradient_accumulation_steps < 1)
    fail("gradient_accumulation_steps",
         "must be at least 1, got " + std::to_string(gradient_accumulation_steps));
  if (!(learning_rate >= 0) || !std::isfinite(learning_rate))
    fail("learning_rate", "must be a finite number >= 0, got " + num(learning_rate));
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    fail("weight_decay", "must be >= 0, got " + num(weight_decay));
  if (!(adam_beta1 >= 0 && adam_beta1 < 1))
    fail("adam_beta1", "must be in [0, 1), got " + num(adam_beta1));
  if (!(adam_beta2 >= 0 && adam_beta2 < 1))
    fail("adam_beta2", "must be in [0, 1), got " + num(adam_beta2));
  if (!(adam_epsilon >= 0)) fail("adam_epsilon", "must be >= 0, got " + num(adam_epsilon));
  if (!(max_grad_norm >= 0)) fail("max_grad_norm", "must be >= 0, got " + num(max_grad_norm));
  if (max_steps <= 0 && !(num_train_epochs > 0))
    fail("num_train_epochs",
         "must be > 0 when max_steps is not set, got " + num(num_train_epochs));
  if (max_steps == 0 || max_steps < -1)
    fail("max_steps", "must be > 0, or -1 to use num_train_epochs; got " +
                          std::to_string(max_steps));
  if (!is_one_of(lr_scheduler_type, {"linear", "cosine", "constant", "constant_with_warmup"}))
    fail("lr_scheduler_type", "must be linear, cosine, constant or constant_with_warmup, got '" +
                                  lr_scheduler_type + "'");
  if (warmup_steps < 0) fail("warmup_steps", "must be >= 0, got " + std::to_string(warmup_steps));
  if (!(warmup_ratio >= 0 && warmup_ratio <= 1))
    fail("warmup_ratio", "must be in [0, 1], got " + num(warmup_ratio));
  if (!is_one_of(logging_strategy, {"steps", "epoch", "no"}))
    fail("logging_strategy", "must be steps, epoch or no, got '" + logging_strategy + "'");
  if (logging_strategy == "steps" && !(logging_steps > 0))
    fail("logging_steps", "must be > 0 with logging_strategy=steps, got " + num(logging_steps));
  if (logging_steps > 1 && logging_steps != std::floor(logging_steps))
    fail("logging_steps", "must be an integer when > 1, got " + num(logging_steps));
  if (!is_one_of(save_strategy, {"steps", "epoch", "no"}))
    fail("save_strategy", "must be steps, epoch or no, got '" + save_strategy + "'");
  if (save_strategy == "steps" && !(save_steps > 0))
    fail("save_steps", "must be > 0 with save_strategy=steps, got " + num(save_steps));
  if (save_steps > 1 && save_steps != std::floor(save_steps))
    fail("save_steps", "must be an integer when > 1, got " + num(save_steps));
  if (save_total_limit && *save_total_limit < 1)
    fail("save_total_limit",
         "must be at least 1 (or null to keep all), got " + std::to_string(*save_total_limit));
  if (!is_one_of(eval_strategy, {"no", "steps", "epoch"}))
    fail("eval_strategy", "must be no, steps or epoch, got '" + eval_strategy + "'");
  if (eval_steps && !(*eval_steps > 0)) fail("eval_steps", "must be > 0, got " + num(*eval_steps));
  if (eval_steps && *eval_steps > 1 && *eval_steps != std::floor(*eval_steps))
    fail("eval_steps", "must be an integer when > 1, got " + num(*eval_steps));
  if (eval_strategy == "steps" && !eval_steps && !(logging_steps > 0))
    fail("eval_steps", "eval_strategy=steps needs eval_steps (or logging_steps > 0)");
  if (max_length < 2)
    fail("max_length", "must be at least 2 (one token to predict the next), got " +
                           std::to_string(max_length));
  if (!is_one_of(padding, {"max_length", "longest"}))
    fail("padding", "must be max_length or longest, got '" + padding + "'");
  if (packing && padding == "longest")
    fail("padding", "packing makes every block max_length tokens; use padding=max_length");
}

struct TrainingArgumentsCli::State {
  std::string config;
  std::map<std::string, std::string> values;  // field name -> raw CLI value
  std::map<std::string, bool> flags;           // boolean fields (std::map: stable addresses)
  std::map<std::string, CLI::Option*> flag_options;
};

TrainingArgumentsCli::TrainingArgumentsCli(CLI::App& app) : state_(std::make_shared<State>()) {
  app.add_option("--config", state_->config,
                 "JSON file of TrainingArguments (flags given on the command line win)");
  for (const auto& f : fields()) {
    std::string flag = std::string("--") + f.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::string name = f.name;
    auto state = state_;
    bool is_bool = std::holds_alternative<bool TA::*>(f.member);
    if (is_bool) {
      // `--bf16` alone means true; `--bf16=false` is accepted too (CLI11 flag values).
      bool& slot = state->flags[name];
      CLI::Option* opt = app.add_flag(flag, slot, f.help);
      state->flag_options[name] = opt;
    } else {
      app.add_option_function<std::string>(
          flag, [state, name](const std::string& v) { state->values[name] = v; }, f.help);
    }
  }
}

TrainingArguments TrainingArgumentsCli::resolve() const {
  io::Json j = io::Json::object();
  std::string where = "command line";
  if (!state_->config.empty()) {
    j = io::load_json(state_->config);
    where = state_->config;
    if (!j.is_object()) throw Error(state_->config, "training arguments must be a JSON object");
  }
  TrainingArguments a = TrainingArguments::from_json(j, where);
  // (Structured bindings are copied into named locals: C++20 lambdas may not capture them on clang.)
  for (const auto& entry : state_->values) {
    const std::string& name = entry.first;
    const Field& f = *std::find_if(fields().begin(), fields().end(),
                                   [&](const Field& x) { return name == x.name; });
    set_from_json(a, f, cli_value_to_json(f, entry.second), "command line");
  }
  for (const auto& entry : state_->flag_options) {
    const std::string& name = entry.first;
    if (entry.second->count() == 0) continue;
    const Field& f = *std::find_if(fields().begin(), fields().end(),
                                   [&](const Field& x) { return name == x.name; });
    set_from_json(a, f, io::Json(state_->flags.at(name)), "command line");
  }
  a.validate();
  return a;
}

}  // namespace kiln::training
