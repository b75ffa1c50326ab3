// TrainingArguments: the knobs of a training run, with Transformers' field names and defaults, so an
// args.json written for `transformers.TrainingArguments` reads the same here.
//
// Contract:
//  - Defaults equal Transformers' (learning_rate 5e-5, logging_steps 500, save_steps 500, ...), except
//    `torch_compile`, which is true in kiln (the compiled train step; false = eager), and kiln's data
//    fields (`max_length`, `padding`, `packing`, `skip_bad_lines`), which Transformers leaves to the
//    tokenizer and data collator.
//  - from_json() rejects any field it does not know, naming it; a short explicit list of Transformers
//    fields that kiln has no use for (kIgnoredTransformersFields) is accepted and ignored.
//  - validate() rejects inconsistent settings with a kiln::Error naming the field.
//  - logging_steps, save_steps and eval_steps are floats as in Transformers: a value below 1 is a
//    ratio of the total number of optimizer steps (resolve_steps()).
//  - eval_strategy "steps" without eval_steps uses logging_steps, as Transformers does.
//
// Example:
//   auto args = kiln::TrainingArguments::from_json(kiln::io::load_json("args.json"), "args.json");
//   args.validate();
//   CLI::App app;  kiln::training::TrainingArgumentsCli cli(app);  ...  app.parse(argc, argv);
//   kiln::TrainingArguments merged = cli.resolve();   // defaults < --config file < --flags
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/json.h"

namespace CLI {
class App;
}

namespace kiln::training {

struct TrainingArguments {
  std::string output_dir = "trainer_output";
  bool overwrite_output_dir = false;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping (and grad_norm logging), as in Transformers
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  std::string lr_scheduler_type = "linear";  // linear | cosine | constant | constant_with_warmup
  int64_t warmup_steps = 0;                  // > 0 wins over warmup_ratio
  double warmup_ratio = 0.0;
  std::string logging_strategy = "steps";  // steps | epoch | no
  double logging_steps = 500;
  bool logging_first_step = false;
  std::string save_strategy = "steps";  // steps | epoch | no
  double save_steps = 500;
  std::optional<int64_t> save_total_limit;  // none = keep every checkpoint
  std::string eval_strategy = "no";         // no | steps | epoch
  std::optional<double> eval_steps;         // none = logging_steps
  int64_t seed = 42;
  bool bf16 = false;
  bool torch_compile = true;  // kiln: the compiled train step; false = eager
  bool dataloader_drop_last = false;
  std::string resume_from_checkpoint;  // empty = start fresh
  bool disable_tqdm = false;           // true: plain log lines even on a terminal

  // kiln's data fields (Transformers leaves these to the tokenizer call and the collator).
  int64_t max_length = 512;
  std::string padding = "max_length";  // max_length | longest
  bool packing = false;
  bool skip_bad_lines = false;  // a bad .jsonl line: false = stop with an Error, true = warn and skip

  // Parses a JSON object; `where` names the source (a file path) in errors. Does not validate().
  static TrainingArguments from_json(const io::Json& j, const std::string& where);
  // Every field (optional ones as null when unset), in declaration order.
  io::OrderedJson to_json() const;
  // Throws kiln::Error("<field>", ...) for the first inconsistent setting.
  void validate() const;

  // Resolves a Transformers-style step interval (logging/save/eval steps): a value below 1 is a
  // ratio of max_steps, rounded up; otherwise the integer value.
  static int64_t resolve_steps(double steps, int64_t max_steps);
  // Warmup steps for a run of `num_training_steps`, as Transformers' get_warmup_steps.
  int64_t get_warmup_steps(int64_t num_training_steps) const;
  // eval_steps, or logging_steps when unset.
  double effective_eval_steps() const { return eval_steps ? *eval_steps : logging_steps; }
};

// Transformers fields accepted in a JSON config and ignored: reporting, worker processes and
// bookkeeping that have no effect on kiln's results.
extern const std::vector<std::string> kIgnoredTransformersFields;

// Field names of TrainingArguments, in declaration order (for docs and tests).
std::vector<std::string> training_argument_names();

// Registers `--config args.json` and one option per field (`--per-device-train-batch-size 4`,
// boolean fields as flags that also take a value: `--bf16`, `--bf16=false`) on `app`. The values are
// kept as given; resolve() applies them over the defaults and the config file, then validates.
class TrainingArgumentsCli {
 public:
  explicit TrainingArgumentsCli(CLI::App& app);
  TrainingArguments resolve() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::training

namespace kiln {
using TrainingArguments = training::TrainingArguments;
}
