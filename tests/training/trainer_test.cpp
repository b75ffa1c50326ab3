#include "kiln/training/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/core/error.h"
#include "kiln/io/json.h"
#include "kiln/training/checkpoint.h"
#include "toy_model.h"

namespace fs = std::filesystem;

namespace kiln::training {
namespace {

using testing::BigramModel;
using testing::fresh_dir;

// Sentences with a strong bigram structure, so the toy model's loss falls quickly.
std::shared_ptr<const Dataset> toy_dataset(int n, int64_t max_length = 24) {
  const char* words[] = {"the cat sat on the mat", "a dog ran to the park", "the sun is hot",
                         "we eat red apples", "birds sing at dawn"};
  std::vector<TextRecord> recs;
  for (int i = 0; i < n; ++i) {
    TextRecord r;
    r.text = words[i % 5];
    if (i % 3 == 0) r.text += " today";
    recs.push_back(r);
  }
  DataOptions o;
  o.max_length = max_length;
  o.pad_token_id = testing::kToyPad;
  o.eos_token_id = testing::kToyEos;
  return std::make_shared<Dataset>(
      Dataset::from_records(recs, testing::char_tokenize, o, "toy"));
}

TrainingArguments toy_args(const std::string& out) {
  TrainingArguments a;
  a.output_dir = out;
  a.per_device_train_batch_size = 4;
  a.learning_rate = 0.1;
  a.logging_steps = 1;
  a.save_strategy = "no";
  a.disable_tqdm = true;
  return a;
}

std::vector<double> losses(const TrainerState& s, const char* key = "loss") {
  std::vector<double> out;
  for (const auto& e : s.log_history)
    if (e.contains(key)) out.push_back(e[key].get<double>());
  return out;
}

std::unique_ptr<Trainer> make_trainer(std::shared_ptr<TrainableModel> m, TrainingArguments a,
                                      std::shared_ptr<const Dataset> train,
                                      std::shared_ptr<const Dataset> eval = nullptr,
                                      std::string tok = "") {
  auto t = std::make_unique<Trainer>(std::move(m), std::move(a), std::move(train),
                                     std::move(eval), std::move(tok));
  t->set_progress_stream(nullptr);
  return t;
}

TEST(Trainer, LossFallsAndLogsLikeTransformers) {
  std::string out = fresh_dir("loss_falls");
  auto model = std::make_shared<BigramModel>(testing::kToyVocab);
  TrainingArguments a = toy_args(out);
  a.num_train_epochs = 4;
  a.logging_steps = 5;
  auto data = toy_dataset(20);  // 5 batches of 4 -> 5 updates per epoch -> 20 steps
  auto t = make_trainer(model, a, data, toy_dataset(10));
  TrainOutput r = t->train();
  EXPECT_EQ(r.global_step, 20);
  auto l = losses(t->state());
  ASSERT_EQ(l.size(), 4u);
  for (size_t i = 1; i < l.size(); ++i) EXPECT_LT(l[i], l[i - 1]) << "loss rose at log " << i;
  EXPECT_LT(l.back(), 0.7 * l.front()) << "loss did not fall";
  const auto& first = t->state().log_history[0];
  EXPECT_EQ(first["step"], 5);
  EXPECT_DOUBLE_EQ(first["epoch"].get<double>(), 1.0);
  EXPECT_TRUE(first.contains("grad_norm"));
  // Linear schedule over 20 steps: step 5 used lr(4) = 0.1 * 16 / 20.
  EXPECT_NEAR(first["learning_rate"].get<double>(), 0.08, 1e-12);
  const auto& fin = t->state().log_history.back();
  for (const char* k : {"train_runtime", "train_samples_per_second", "train_steps_per_second",
                        "train_loss", "epoch", "step"})
    EXPECT_TRUE(fin.contains(k)) << k;
  EXPECT_EQ(fin["step"], 20);
  io::Json ev = t->evaluate();
  EXPECT_TRUE(ev.contains("eval_loss"));
  EXPECT_LT(ev["eval_loss"].get<double>(), l.front());
  // train_log.jsonl mirrors log_history line by line.
  std::ifstream in(out + "/train_log.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(n, t->state().log_history.size());
    EXPECT_EQ(io::Json::parse(line), t->state().log_history[n]) << n;
    ++n;
  }
  EXPECT_EQ(n, t->state().log_history.size());
}

TEST(Trainer, LoggedLearningRateIsTheOneEachStepUsed) {
  auto model = std::make_shared<BigramModel>(testing::kToyVocab);
  TrainingArguments a = toy_args(fresh_dir("lr_logged"));
  a.learning_rate = 1e-3;
  a.max_steps = 3;
  auto t = make_trainer(model, a, toy_dataset(12));
  t->train();
  auto lr = losses(t->state(), "learning_rate");
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_NEAR(lr[0], 1e-3, 1e-15);
  EXPECT_NEAR(lr[1], 6.666666666666667e-4, 1e-15);
  EXPECT_NEAR(lr[2], 3.333333333333333e-4, 1e-15);
}

TEST(Trainer, GradientAccumulationEqualsTheBiggerBatch) {
  auto data = toy_dataset(16);
  TrainingArguments a = toy_args(fresh_dir("ga_big"));
  a.max_steps = 4;
  a.per_device_train_batch_size = 4;
  auto m1 = std::make_shared<BigramModel>(testing::kToyVocab);
  auto t1 = make_trainer(m1, a, data);
  t1->train();
  TrainingArguments b = a;
  b.output_dir = fresh_dir("ga_small");
  b.per_device_train_batch_size = 2;
  b.gradient_accumulation_steps = 2;
  auto m2 = std::make_shared<BigramModel>(testing::kToyVocab);
  auto t2 = make_trainer(m2, b, data);
  t2->train();
  auto l1 = losses(t1->state()), l2 = losses(t2->state());
  ASSERT_EQ(l1.size(), 4u);
  ASSERT_EQ(l2.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5 * l1[i]) << i;
  auto g1 = losses(t1->state(), "grad_norm"), g2 = losses(t2->state(), "grad_norm");
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(g1[i], g2[i], 1e-5 * g1[i]) << i;
  auto w1 = m1->parameters()[0].value.to_f32_vector(), w2 = m2->parameters()[0].value.to_f32_vector();
  for (size_t i = 0; i < w1.size(); i += 37) EXPECT_NEAR(w1[i], w2[i], 1e-5) << i;
}

TEST(Trainer, EpochAccountingWithLeftoverMicroBatches) {
  // 5 batches per epoch, accumulation 2: updates of 2, 2 and 1 batches -> 3 per epoch.
  TrainingArguments a = toy_args(fresh_dir("epochs"));
  a.per_device_train_batch_size = 2;
  a.gradient_accumulation_steps = 2;
  a.num_train_epochs = 2;
  auto t = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), a, toy_dataset(10));
  TrainOutput r = t->train();
  EXPECT_EQ(r.global_step, 6);
  EXPECT_EQ(t->state().max_steps, 6);
  std::vector<double> epochs;
  for (const auto& e : t->state().log_history)
    if (e.contains("loss")) epochs.push_back(e["epoch"].get<double>());
  ASSERT_EQ(epochs.size(), 6u);
  EXPECT_DOUBLE_EQ(epochs[0], 0.4);
  EXPECT_DOUBLE_EQ(epochs[2], 1.0);
  EXPECT_DOUBLE_EQ(epochs[5], 2.0);
}

TEST(Trainer, ResumeEqualsUninterrupted) {
  auto data = toy_dataset(14);  // 4 batches of 4 (last has 2): 4 updates per epoch
  TrainingArguments a = toy_args(fresh_dir("resume_full"));
  a.num_train_epochs = 3;  // 12 steps
  a.logging_steps = 2;     // the checkpoint at step 5 sits between two logs
  a.lr_scheduler_type = "cosine";
  a.warmup_steps = 2;
  a.weight_decay = 0.01;
  auto full_model = std::make_shared<BigramModel>(testing::kToyVocab);
  auto full = make_trainer(full_model, a, data);
  full->train();

  TrainingArguments first = a;
  first.output_dir = fresh_dir("resume_part");
  first.save_strategy = "steps";
  first.save_steps = 5;
  first.max_steps = -1;
  // Stop the first run at step 5 by making the model fail on its next call: a crash after a save.
  auto m1 = std::make_shared<BigramModel>(testing::kToyVocab);
  m1->nan_at_call = 6;
  auto t1 = make_trainer(m1, first, data);
  EXPECT_THROW(t1->train(), Error);
  ASSERT_TRUE(fs::is_directory(first.output_dir + "/checkpoint-5"));

  TrainingArguments second = first;
  second.resume_from_checkpoint = first.output_dir + "/checkpoint-5";
  auto m2 = std::make_shared<BigramModel>(testing::kToyVocab, /*seed=*/999);  // weights reloaded
  auto t2 = make_trainer(m2, second, data);
  t2->train();
  auto lf = losses(full->state()), lr = losses(t2->state());
  ASSERT_EQ(lf.size(), lr.size());
  for (size_t i = 0; i < lf.size(); ++i) EXPECT_EQ(lf[i], lr[i]) << "log " << i;
  auto gf = losses(full->state(), "grad_norm"), gr = losses(t2->state(), "grad_norm");
  EXPECT_EQ(gf, gr);
  EXPECT_EQ(losses(full->state(), "learning_rate"), losses(t2->state(), "learning_rate"));
  EXPECT_EQ(full_model->parameters()[0].value.to_f32_vector(),
            m2->parameters()[0].value.to_f32_vector());
  EXPECT_EQ(losses(full->state(), "train_loss"), losses(t2->state(), "train_loss"));

  // "last" resumes from the newest checkpoint in output_dir.
  TrainingArguments third = second;
  third.resume_from_checkpoint = "last";
  auto t3 = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), third, data);
  t3->train();
  EXPECT_EQ(losses(t3->state()), lf);
}

TEST(Trainer, CheckpointLayoutAndTrainerState) {
  std::string out = fresh_dir("layout");
  std::string tok = fresh_dir("layout_tok");
  testing::write_text(tok + "/tokenizer.json", "{}");
  testing::write_text(tok + "/tokenizer_config.json", "{}");
  TrainingArguments a = toy_args(out);
  a.max_steps = 4;
  a.save_strategy = "steps";
  a.save_steps = 2;
  auto t = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), a, toy_dataset(8),
                        nullptr, tok);
  t->train();
  auto cps = list_checkpoints(out);
  ASSERT_EQ(cps.size(), 2u);
  EXPECT_EQ(cps[0].first, 2);
  EXPECT_EQ(cps[1].first, 4);
  std::string cp = out + "/checkpoint-4";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "optimizer.safetensors", "scheduler.json", "trainer_state.json",
                        "rng_state.json", "training_args.json", "tokenizer.json",
                        "tokenizer_config.json"})
    EXPECT_TRUE(fs::is_regular_file(cp + "/" + f)) << f;
  io::Json st = io::load_json(cp + "/trainer_state.json");
  EXPECT_EQ(st["global_step"], 4);
  EXPECT_EQ(st["max_steps"], 4);
  EXPECT_EQ(st["logging_steps"], 1);
  EXPECT_EQ(st["save_steps"], 2);
  EXPECT_EQ(st["train_batch_size"], 4);
  EXPECT_EQ(st["num_train_epochs"], 2);
  EXPECT_TRUE(st["best_metric"].is_null());
  EXPECT_TRUE(st["best_model_checkpoint"].is_null());
  EXPECT_DOUBLE_EQ(st["epoch"].get<double>(), 2.0);
  ASSERT_EQ(st["log_history"].size(), 4u);
  for (const char* k : {"loss", "grad_norm", "learning_rate", "epoch", "step"})
    EXPECT_TRUE(st["log_history"][3].contains(k)) << k;
  io::Json args = io::load_json(cp + "/training_args.json");
  EXPECT_EQ(args["save_steps"], 2);
  EXPECT_EQ(io::load_json(cp + "/scheduler.json")["last_epoch"], 4);
  EXPECT_FALSE(fs::exists(out + "/checkpoint-4.tmp-" + std::to_string(::getpid())));
  // Final model folder.
  t->save_model(out + "/final");
  EXPECT_TRUE(fs::is_regular_file(out + "/final/model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(out + "/final/tokenizer.json"));
  t->save_model();  // into output_dir, next to the checkpoints
  EXPECT_TRUE(fs::is_regular_file(out + "/model.safetensors"));
  EXPECT_EQ(list_checkpoints(out).size(), 2u);
}

TEST(Trainer, SaveTotalLimitPrunesOldest) {
  std::string out = fresh_dir("prune");
  TrainingArguments a = toy_args(out);
  a.max_steps = 5;
  a.save_strategy = "steps";
  a.save_steps = 1;
  a.save_total_limit = 2;
  auto t = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), a, toy_dataset(8));
  t->train();
  auto cps = list_checkpoints(out);
  ASSERT_EQ(cps.size(), 2u);
  EXPECT_EQ(cps[0].first, 4);
  EXPECT_EQ(cps[1].first, 5);
}

TEST(Trainer, FailedSaveKeepsThePreviousCheckpoint) {
  std::string out = fresh_dir("atomic");
  TrainingArguments a = toy_args(out);
  a.max_steps = 4;
  a.save_strategy = "steps";
  a.save_steps = 2;
  auto model = std::make_shared<BigramModel>(testing::kToyVocab);
  auto t = make_trainer(model, a, toy_dataset(8));
  // Train to step 2 (checkpoint-2), then make every later save fail as a full disk would.
  TrainingArguments a2 = a;
  a2.max_steps = 2;
  auto t0 = make_trainer(model, a2, toy_dataset(8));
  t0->train();
  ASSERT_TRUE(fs::is_directory(out + "/checkpoint-2"));
  std::string before = io::read_file(out + "/checkpoint-2/model.safetensors");
  a.resume_from_checkpoint = out + "/checkpoint-2";
  auto t1 = make_trainer(model, a, toy_dataset(8));
  model->fail_save = true;
  try {
    t1->train();
    FAIL() << "expected the injected write failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(out + "/checkpoint-4"));
  for (const auto& entry : fs::directory_iterator(out))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
        << entry.path();
  EXPECT_EQ(io::read_file(out + "/checkpoint-2/model.safetensors"), before);
  EXPECT_NO_THROW(require_complete_checkpoint(out + "/checkpoint-2"));
}

TEST(Trainer, IncompleteCheckpointIsAClearError) {
  std::string out = fresh_dir("incomplete");
  TrainingArguments a = toy_args(out);
  a.max_steps = 2;
  a.save_strategy = "steps";
  a.save_steps = 2;
  auto model = std::make_shared<BigramModel>(testing::kToyVocab);
  make_trainer(model, a, toy_dataset(8))->train();
  std::string cp = out + "/checkpoint-2";
  fs::remove(cp + "/optimizer.safetensors");
  std::vector<float> before = model->parameters()[0].value.to_f32_vector();
  a.resume_from_checkpoint = cp;
  a.max_steps = 4;
  auto t = make_trainer(model, a, toy_dataset(8));
  try {
    t->train();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), cp);
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos);
  }
  EXPECT_EQ(model->parameters()[0].value.to_f32_vector(), before);  // nothing half-loaded
  a.resume_from_checkpoint = out + "/checkpoint-9";
  EXPECT_THROW(make_trainer(model, a, toy_dataset(8))->train(), Error);
}

TEST(Trainer, NanLossStopsWithErrorAndKeepsLastCheckpoint) {
  std::string out = fresh_dir("nan");
  TrainingArguments a = toy_args(out);
  a.max_steps = 10;
  a.save_strategy = "steps";
  a.save_steps = 2;
  auto model = std::make_shared<BigramModel>(testing::kToyVocab);
  model->nan_at_call = 4;
  auto t = make_trainer(model, a, toy_dataset(16));
  std::vector<float> after_step3;
  try {
    t->train();
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
    EXPECT_NE(msg.find("step 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checkpoint-2"), std::string::npos) << msg;
  }
  EXPECT_EQ(t->state().global_step, 3);
  EXPECT_TRUE(fs::is_directory(out + "/checkpoint-2"));
  EXPECT_FALSE(fs::exists(out + "/checkpoint-4"));
  for (float w : model->parameters()[0].value.to_f32_vector()) ASSERT_TRUE(std::isfinite(w));
}

TEST(Trainer, EvalStrategiesAndErrors) {
  TrainingArguments a = toy_args(fresh_dir("eval"));
  a.max_steps = 4;
  a.eval_strategy = "steps";
  a.eval_steps = 2;
  auto t = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), a, toy_dataset(8),
                        toy_dataset(6));
  t->train();
  std::vector<int64_t> eval_steps;
  for (const auto& e : t->state().log_history)
    if (e.contains("eval_loss")) eval_steps.push_back(e["step"].get<int64_t>());
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{2, 4}));
  // An eval strategy without an eval dataset names the field; evaluate() without one errors.
  EXPECT_THROW(Trainer(std::make_shared<BigramModel>(testing::kToyVocab), a, toy_dataset(8)),
               Error);
  TrainingArguments b = toy_args(fresh_dir("eval2"));
  auto t2 = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), b, toy_dataset(8));
  EXPECT_THROW(t2->evaluate(), Error);
  // drop_last with fewer examples than a batch leaves nothing to train on.
  b.dataloader_drop_last = true;
  b.per_device_train_batch_size = 16;
  auto t3 = make_trainer(std::make_shared<BigramModel>(testing::kToyVocab), b, toy_dataset(8));
  EXPECT_THROW(t3->train(), Error);
}

}  // namespace
}  // namespace kiln::training
