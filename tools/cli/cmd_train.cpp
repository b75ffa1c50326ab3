// kiln train --model DIR --data FILE --output-dir DIR [...every TrainingArguments field...]
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/core/memory.h"
#include "kiln/tokenizer/tokenizer.h"
#include "kiln/training/causal_lm_model.h"
#include "kiln/training/trainer.h"
#include "kiln/training/training_args.h"
#include "tools/cli/command.h"

namespace {

struct TrainFlags {
  std::string model_dir, data, eval_data;
  std::shared_ptr<kiln::training::TrainingArgumentsCli> args;
};

}  // namespace

KILN_COMMAND(train, "Fine-tune a model with the Trainer (compiled train step, bf16 optional)") {
  auto f = std::make_shared<TrainFlags>();
  cmd.add_option("--model", f->model_dir, "Model folder to start from")->required();
  cmd.add_option("--data", f->data, "Training data: .jsonl (text or prompt/completion) or .txt")
      ->required();
  cmd.add_option("--eval-data", f->eval_data, "Evaluation data, same formats");
  f->args = std::make_shared<kiln::training::TrainingArgumentsCli>(cmd);
  return [f]() -> int {
    kiln::TrainingArguments args = f->args->resolve();
    auto tok = kiln::tokenizer::Tokenizer::from_pretrained(f->model_dir);
    auto model = kiln::training::CausalLMTrainable::from_pretrained(
        f->model_dir, {.bf16 = args.bf16, .compile = args.torch_compile});
    kiln::training::DataOptions data;
    data.max_length = args.max_length;
    data.padding = args.padding;
    data.packing = args.packing;
    data.skip_bad_lines = args.skip_bad_lines;
    const auto& cfg = model->config();
    auto pad = tok->pad_token_id();
    if (!pad && cfg.pad_token_id) pad = int32_t(*cfg.pad_token_id);
    if (!pad && tok->eos_token_id()) pad = tok->eos_token_id();
    if (!pad) throw kiln::Error(f->model_dir, "no pad_token or eos_token to pad batches with");
    data.pad_token_id = *pad;
    data.eos_token_id = tok->eos_token_id().value_or(-1);
    auto tokenize = [tok](const std::string& text) { return tok->encode(text); };
    auto train = std::make_shared<kiln::training::Dataset>(
        kiln::training::Dataset::from_file(f->data, tokenize, data));
    std::shared_ptr<kiln::training::Dataset> eval;
    if (!f->eval_data.empty())
      eval = std::make_shared<kiln::training::Dataset>(
          kiln::training::Dataset::from_file(f->eval_data, tokenize, data));
    std::cerr << "kiln train: " << train->size() << " examples from " << f->data << ", "
              << cfg.num_parameters() << " parameters, " << (args.bf16 ? "bf16" : "f32")
              << (args.torch_compile ? ", compiled" : ", eager") << "\n";
    kiln::Trainer trainer(model, args, train, eval, f->model_dir);
    auto out = trainer.train();
    trainer.save_model();  // the final model in output_dir, loadable by kiln and Transformers
    nlohmann::json summary = out.metrics;
    summary["compiles"] = model->compile_stats();
    summary["peak_rss_bytes"] = kiln::peak_rss_bytes();
    summary["output_dir"] = args.output_dir;
    std::cout << summary.dump() << "\n";
    return 0;
  };
}
