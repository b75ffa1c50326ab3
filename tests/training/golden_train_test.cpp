// Three AdamW steps of the tiny Qwen3 on a fixed padded batch, against an independent PyTorch
// implementation (the `train` rows of ../shared/testdata/models/tiny.golden.jsonl): losses, gradient
// norms and every parameter's sum and sum of squares, compiled and eager; and bf16 autocast losses.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/training/causal_lm_model.h"
#include "kiln/training/optimizer.h"
#include "tests/support.h"

namespace {

const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

nlohmann::json train_row(const std::string& mode) {
  for (const auto& j : kiln::test_support::tiny_golden_rows("train"))
    if (j["mode"] == mode) return j;
  return {};
}

kiln::Tensor matrix(const nlohmann::json& rows) {
  std::vector<int32_t> flat;
  for (const auto& r : rows)
    for (const auto& v : r) flat.push_back(v.get<int32_t>());
  return kiln::Tensor::from_vector(flat, {int64_t(rows.size()), int64_t(rows[0].size())});
}

struct StepLog {
  double loss, grad_norm;
};

std::vector<StepLog> three_steps(kiln::training::CausalLMTrainable& m, const nlohmann::json& row) {
  kiln::training::TrainBatch batch{matrix(row["input_ids"]), matrix(row["attention_mask"]),
                                   matrix(row["labels"])};
  const int64_t tokens = kiln::training::count_label_tokens(batch);
  EXPECT_EQ(tokens, row["num_label_tokens"].get<int64_t>());
  kiln::training::AdamW adam(m.parameters(), {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                              .weight_decay = 0.0});
  const double lrs[3] = {1e-3, 1e-3 * 2 / 3, 1e-3 / 3};
  std::vector<StepLog> out;
  for (int step = 0; step < 3; ++step) {
    auto grads = kiln::training::zeros_like(m.parameters());
    auto s = m.forward_backward(batch, 1.0f / float(tokens), grads);
    double norm = kiln::training::clip_grad_norm(grads, 1.0);
    out.push_back({s.loss_sum / double(s.num_tokens), norm});
    adam.step(m.parameters(), grads, lrs[step]);
  }
  return out;
}

void expect_close_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want)))
      << what << ": got " << got << ", want " << want;
}

TEST(GoldenTrain, F32ThreeAdamWStepsMatchCompiledAndEager) {
  auto row = train_row("f32");
  ASSERT_FALSE(row.is_null());
  for (bool compile : {true, false}) {
    SCOPED_TRACE(compile ? "compiled" : "eager");
    auto m = kiln::training::CausalLMTrainable::from_pretrained(kTiny, {.compile = compile});
    auto steps = three_steps(*m, row);
    for (size_t i = 0; i < 3; ++i) {
      expect_close_rel(steps[i].loss, row["steps"][i]["loss"].get<double>(), 1e-4,
                       "loss step " + std::to_string(i + 1));
      expect_close_rel(steps[i].grad_norm, row["steps"][i]["grad_norm"].get<double>(), 1e-4,
                       "grad_norm step " + std::to_string(i + 1));
    }
    const auto& stats = row["param_stats_after_step3"];
    for (const auto& p : m->parameters()) {
      ASSERT_TRUE(stats.contains(p.name)) << p.name;
      double sum = 0, sumsq = 0;
      for (float v : p.value.to_f32_vector()) {
        sum += v;
        sumsq += double(v) * v;
      }
      expect_close_rel(sum, stats[p.name]["sum"].get<double>(), 1e-4, p.name + " sum");
      expect_close_rel(sumsq, stats[p.name]["sumsq"].get<double>(), 1e-4, p.name + " sumsq");
    }
    if (compile) {
      auto cs = m->compile_cache().stats();
      EXPECT_EQ(cs["train"].compiles, 1);
      EXPECT_EQ(cs["train"].hits, 2);
    }
  }
}

TEST(GoldenTrain, Bf16AutocastLossesWithin2em2) {
  auto row = train_row("bf16_autocast");
  ASSERT_FALSE(row.is_null());
  auto m = kiln::training::CausalLMTrainable::from_pretrained(kTiny, {.bf16 = true});
  auto steps = three_steps(*m, row);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(steps[i].loss, row["steps"][i]["loss"].get<double>(), 2e-2) << "step " << i + 1;
}

}  // namespace
