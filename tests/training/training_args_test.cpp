#include "kiln/training/training_args.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "kiln/core/error.h"
#include "toy_model.h"

namespace kiln::training {
namespace {

std::string error_where(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.where();
  }
  return "(no error)";
}

TEST(TrainingArguments, DefaultsMatchTransformers) {
  kiln::TrainingArguments a;  // the kiln:: alias
  EXPECT_EQ(a.per_device_train_batch_size, 8);
  EXPECT_EQ(a.per_device_eval_batch_size, 8);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(a.learning_rate, 5e-5);
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(a.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.999);
  EXPECT_DOUBLE_EQ(a.adam_epsilon, 1e-8);
  EXPECT_DOUBLE_EQ(a.max_grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(a.num_train_epochs, 3.0);
  EXPECT_EQ(a.max_steps, -1);
  EXPECT_EQ(a.lr_scheduler_type, "linear");
  EXPECT_EQ(a.warmup_steps, 0);
  EXPECT_DOUBLE_EQ(a.warmup_ratio, 0.0);
  EXPECT_DOUBLE_EQ(a.logging_steps, 500);
  EXPECT_DOUBLE_EQ(a.save_steps, 500);
  EXPECT_FALSE(a.save_total_limit.has_value());
  EXPECT_EQ(a.eval_strategy, "no");
  EXPECT_EQ(a.save_strategy, "steps");
  EXPECT_EQ(a.seed, 42);
  EXPECT_FALSE(a.bf16);
  EXPECT_TRUE(a.torch_compile);  // kiln's default
  EXPECT_FALSE(a.dataloader_drop_last);
  EXPECT_TRUE(a.resume_from_checkpoint.empty());
  EXPECT_NO_THROW(a.validate());
}

TEST(TrainingArguments, FromJsonReadsFieldsAndRoundTrips) {
  io::Json j = {{"output_dir", "out"},     {"learning_rate", 1e-3},  {"max_steps", 3},
                {"save_total_limit", 2},   {"eval_steps", 10},       {"bf16", true},
                {"report_to", "none"},     {"dataloader_num_workers", 4}};
  TrainingArguments a = TrainingArguments::from_json(j, "args.json");
  EXPECT_EQ(a.output_dir, "out");
  EXPECT_DOUBLE_EQ(a.learning_rate, 1e-3);
  EXPECT_EQ(a.max_steps, 3);
  EXPECT_EQ(a.save_total_limit, 2);
  EXPECT_EQ(a.eval_steps, 10.0);
  EXPECT_TRUE(a.bf16);
  TrainingArguments b =
      TrainingArguments::from_json(io::Json::parse(a.to_json().dump()), "round trip");
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.to_json().size(), training_argument_names().size());
}

TEST(TrainingArguments, UnknownAndMistypedFieldsAreNamed) {
  EXPECT_EQ(error_where([] { TrainingArguments::from_json({{"learning_rat", 1}}, "a.json"); }),
            "a.json: learning_rat");
  EXPECT_EQ(error_where([] {
              TrainingArguments::from_json({{"learning_rate", "fast"}}, "a.json");
            }),
            "a.json: learning_rate");
  EXPECT_EQ(error_where([] { TrainingArguments::from_json({{"max_steps", 1.5}}, "a.json"); }),
            "a.json: max_steps");
  EXPECT_EQ(error_where([] { TrainingArguments::from_json({{"max_steps", 1.6e27}}, "a.json"); }),
            "a.json: max_steps");  // whole, but outside int64
  EXPECT_EQ(TrainingArguments::from_json({{"max_steps", 40.0}}, "a.json").max_steps, 40);
  try {
    TrainingArguments::from_json({{"evaluation_strategy", "steps"}}, "a.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval_strategy"), std::string::npos);
  }
  EXPECT_EQ(error_where([] { TrainingArguments::from_json(io::Json::array(), "a.json"); }),
            "a.json");
}

TEST(TrainingArguments, InconsistentSettingsNameTheField) {
  auto where = [](auto mutate) {
    return error_where([&] {
      TrainingArguments a;
      mutate(a);
      a.validate();
    });
  };
  EXPECT_EQ(where([](TrainingArguments& a) { a.learning_rate = -1e-3; }), "learning_rate");
  EXPECT_EQ(where([](TrainingArguments& a) { a.warmup_ratio = 1.5; }), "warmup_ratio");
  EXPECT_EQ(where([](TrainingArguments& a) { a.save_total_limit = 0; }), "save_total_limit");
  EXPECT_EQ(where([](TrainingArguments& a) { a.lr_scheduler_type = "cosine_restarts"; }),
            "lr_scheduler_type");
  EXPECT_EQ(where([](TrainingArguments& a) { a.eval_strategy = "always"; }), "eval_strategy");
  EXPECT_EQ(where([](TrainingArguments& a) { a.eval_steps = 0.0; }), "eval_steps");
  EXPECT_EQ(where([](TrainingArguments& a) {
              a.eval_strategy = "steps";
              a.logging_strategy = "no";
              a.logging_steps = 0;
            }),
            "eval_steps");
  EXPECT_EQ(where([](TrainingArguments& a) { a.per_device_train_batch_size = 0; }),
            "per_device_train_batch_size");
  EXPECT_EQ(where([](TrainingArguments& a) { a.gradient_accumulation_steps = 0; }),
            "gradient_accumulation_steps");
  EXPECT_EQ(where([](TrainingArguments& a) { a.adam_beta2 = 1.0; }), "adam_beta2");
  EXPECT_EQ(where([](TrainingArguments& a) { a.max_steps = 0; }), "max_steps");
  EXPECT_EQ(where([](TrainingArguments& a) { a.num_train_epochs = 0; }), "num_train_epochs");
  EXPECT_EQ(where([](TrainingArguments& a) { a.padding = "left"; }), "padding");
  EXPECT_EQ(where([](TrainingArguments& a) {
              a.packing = true;
              a.padding = "longest";
            }),
            "padding");
  EXPECT_EQ(where([](TrainingArguments& a) { a.max_length = 1; }), "max_length");
  EXPECT_EQ(where([](TrainingArguments& a) { a.logging_steps = 2.5; }), "logging_steps");
  // eval_strategy=steps without eval_steps falls back to logging_steps, as in Transformers.
  EXPECT_EQ(where([](TrainingArguments& a) { a.eval_strategy = "steps"; }), "(no error)");
  TrainingArguments a;
  a.logging_steps = 7;
  EXPECT_EQ(a.effective_eval_steps(), 7);
}

TEST(TrainingArguments, StepRatiosAndWarmup) {
  EXPECT_EQ(TrainingArguments::resolve_steps(500, 1000), 500);
  EXPECT_EQ(TrainingArguments::resolve_steps(0.1, 95), 10);  // ceil(9.5)
  TrainingArguments a;
  a.warmup_ratio = 0.1;
  EXPECT_EQ(a.get_warmup_steps(95), 10);
  a.warmup_steps = 3;
  EXPECT_EQ(a.get_warmup_steps(95), 3);  // warmup_steps wins
}

TEST(TrainingArguments, CliFlagsOverrideConfigFile) {
  std::string dir = testing::fresh_dir("args_cli");
  testing::write_text(dir + "/args.json",
                      R"({"learning_rate": 0.1, "max_steps": 5, "seed": 7, "bf16": true})");
  CLI::App app;
  TrainingArgumentsCli cli(app);
  std::vector<std::string> argv = {"kiln", "--config", dir + "/args.json", "--learning-rate",
                                   "1e-3", "--per-device-train-batch-size", "4",
                                   "--torch-compile=false", "--bf16=false",
                                   "--save-total-limit", "2", "--output-dir", dir};
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  app.parse(int(cargv.size()), cargv.data());
  TrainingArguments a = cli.resolve();
  EXPECT_DOUBLE_EQ(a.learning_rate, 1e-3);  // flag wins
  EXPECT_EQ(a.max_steps, 5);                // from the file
  EXPECT_EQ(a.seed, 7);
  EXPECT_EQ(a.per_device_train_batch_size, 4);
  EXPECT_FALSE(a.torch_compile);
  EXPECT_FALSE(a.bf16);
  EXPECT_EQ(a.save_total_limit, 2);
  EXPECT_EQ(a.output_dir, dir);

  CLI::App app2;
  TrainingArgumentsCli cli2(app2);
  std::vector<std::string> argv2 = {"kiln", "--warmup-ratio", "2", "--packing"};
  std::vector<char*> c2;
  for (auto& s : argv2) c2.push_back(s.data());
  app2.parse(int(c2.size()), c2.data());
  EXPECT_EQ(error_where([&] { cli2.resolve(); }), "warmup_ratio");

  CLI::App app3;
  TrainingArgumentsCli cli3(app3);
  std::vector<std::string> argv3 = {"kiln", "--max-steps", "many"};
  std::vector<char*> c3;
  for (auto& s : argv3) c3.push_back(s.data());
  app3.parse(int(c3.size()), c3.data());
  EXPECT_EQ(error_where([&] { cli3.resolve(); }), "--max-steps");
}

}  // namespace
}  // namespace kiln::training
