#include "kiln/training/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "kiln/core/error.h"
#include "kiln/io/json.h"
#include "kiln/training/schedule.h"
#include "toy_model.h"
#include "tests/support.h"

namespace kiln::training {
namespace {

Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }

TEST(Schedule, LinearMatchesGoldenLearningRates) {
  // tiny.golden.jsonl: lr 1e-3, linear over 3 steps, no warmup; the LR each step used.
  int rows = 0;
  LrSchedule s("linear", 1e-3, 0, 3);
  for (const auto& j : test_support::tiny_golden_rows("train")) {
    ++rows;
    for (size_t i = 0; i < j["steps"].size(); ++i)
      EXPECT_NEAR(s.lr(int64_t(i)), j["steps"][i]["lr"].get<double>(), 1e-15) << "step " << i;
  }
  EXPECT_EQ(rows, 2);
  EXPECT_DOUBLE_EQ(s.lr(0), 1e-3);
  EXPECT_NEAR(s.lr(1), 6.666666666666667e-4, 1e-15);
  EXPECT_NEAR(s.lr(2), 3.333333333333333e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(3), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(4), 0.0);  // clamped at 0 past the end
}

TEST(Schedule, WarmupCosineConstant) {
  LrSchedule lin("linear", 1.0, 2, 10);
  EXPECT_DOUBLE_EQ(lin.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(lin.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(lin.lr(2), 1.0);
  EXPECT_DOUBLE_EQ(lin.lr(6), 0.5);  // (10 - 6) / (10 - 2)
  LrSchedule cos("cosine", 1.0, 2, 10);
  const double want[] = {0.0, 0.5, 1.0, 0.9619397662556434, 0.8535533905932737,
                         0.6913417161825449, 0.5, 0.30865828381745514, 0.14644660940672627,
                         0.03806023374435663, 0.0};
  for (int s = 0; s <= 10; ++s) EXPECT_NEAR(cos.lr(s), want[s], 1e-15) << s;
  LrSchedule c("constant", 3e-4, 5, 10);
  EXPECT_DOUBLE_EQ(c.lr(0), 3e-4);  // constant ignores warmup
  LrSchedule cw("constant_with_warmup", 1.0, 4, 10);
  EXPECT_DOUBLE_EQ(cw.lr(1), 0.25);
  EXPECT_DOUBLE_EQ(cw.lr(4), 1.0);
  EXPECT_DOUBLE_EQ(cw.lr(9), 1.0);
  EXPECT_THROW(LrSchedule("polynomial", 1, 0, 1), Error);
  int64_t taken = 0;
  LrSchedule back = LrSchedule::from_json(io::Json::parse(cos.to_json(7).dump()), "s", taken);
  EXPECT_EQ(taken, 7);
  EXPECT_DOUBLE_EQ(back.lr(5), cos.lr(5));
}

TEST(AdamW, TwoStepsMatchHandComputedUpdate) {
  // p0 = 1, grads 0.5 then -0.2, lr 0.1, wd 0.01, betas 0.9/0.999, eps 1e-8. Expected values are
  // the torch.optim.AdamW formulas evaluated in double (see optimizer.h).
  std::vector<Parameter> params = {{"layer.weight", f32({1.f}, {1})},
                                   {"layer.bias", f32({1.f}, {1})}};
  AdamW opt(params, {0.9, 0.999, 1e-8, 0.01});
  EXPECT_EQ(opt.decay_mask(), (std::vector<bool>{true, false}));
  std::vector<Tensor> g = {f32({0.5f}, {1}), f32({0.5f}, {1})};
  opt.step(params, g, 0.1);
  EXPECT_NEAR(params[0].value.data<float>()[0], 0.8990000019999999, 1e-6);
  EXPECT_NEAR(params[1].value.data<float>()[0], 0.9000000019999999, 1e-6);  // no decay on bias
  g = {f32({-0.2f}, {1}), f32({-0.2f}, {1})};
  opt.step(params, g, 0.1);
  EXPECT_NEAR(params[0].value.data<float>()[0], 0.8635404181145107, 1e-6);
  EXPECT_NEAR(params[1].value.data<float>()[0], 0.8654394181165107, 1e-6);
  EXPECT_NEAR(opt.exp_avg()[0].data<float>()[0], 0.025, 1e-8);
  EXPECT_NEAR(opt.exp_avg_sq()[0].data<float>()[0], 0.00028975, 1e-10);
  EXPECT_EQ(opt.step_count(), 2);
}

TEST(AdamW, LargeTensorsSplitAcrossThreadsAgreeWithScalarPath) {
  const int64_t n = 100003;
  std::vector<float> init(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    init[size_t(i)] = std::sin(float(i));
    grad[size_t(i)] = std::cos(float(i) * 0.7f);
  }
  std::vector<Parameter> big = {{"w", Tensor::from_vector(init, {n})}};
  AdamW opt(big, {0.9, 0.999, 1e-8, 0.1});
  std::vector<Tensor> g = {Tensor::from_vector(grad, {n})};
  opt.step(big, g, 1e-2);
  for (int64_t i : {int64_t(0), int64_t(12345), n - 1}) {
    std::vector<Parameter> one = {{"w", f32({init[size_t(i)]}, {1})}};
    AdamW o1(one, {0.9, 0.999, 1e-8, 0.1});
    std::vector<Tensor> g1 = {f32({grad[size_t(i)]}, {1})};
    o1.step(one, g1, 1e-2);
    EXPECT_EQ(big[0].value.data<float>()[i], one[0].value.data<float>()[0]) << i;
  }
}

TEST(AdamW, WeightDecayGroupsFollowTransformers) {
  EXPECT_TRUE(applies_weight_decay("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(applies_weight_decay("model.embed_tokens.weight"));
  EXPECT_TRUE(applies_weight_decay("lm_head.weight"));
  EXPECT_TRUE(applies_weight_decay("model.normalizer.weight"));  // "norm" only as a whole name
  EXPECT_FALSE(applies_weight_decay("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.layers.0.self_attn.k_norm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.norm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(applies_weight_decay("encoder.LayerNorm.weight"));
  EXPECT_FALSE(applies_weight_decay("model.layers.1.RMSNorm.weight"));
}

TEST(AdamW, SaveAndLoadRestoresState) {
  std::string dir = testing::fresh_dir("adamw_io");
  std::vector<Parameter> params = {{"a.weight", f32({1.f, 2.f}, {2})},
                                   {"a.bias", f32({3.f}, {1})}};
  AdamW opt(params, {});
  std::vector<Tensor> g = {f32({0.1f, -0.2f}, {2}), f32({0.3f}, {1})};
  opt.step(params, g, 1e-3);
  opt.save(dir + "/opt.safetensors", params);
  AdamW back(params, {});
  back.load(dir + "/opt.safetensors", params);
  EXPECT_EQ(back.step_count(), 1);
  EXPECT_EQ(back.exp_avg()[0].to_f32_vector(), opt.exp_avg()[0].to_f32_vector());
  EXPECT_EQ(back.exp_avg_sq()[1].to_f32_vector(), opt.exp_avg_sq()[1].to_f32_vector());
  std::vector<Parameter> other = {{"b.weight", f32({1.f, 2.f}, {2})}};
  AdamW wrong(other, {});
  EXPECT_THROW(wrong.load(dir + "/opt.safetensors", other), Error);
  EXPECT_EQ(wrong.step_count(), 0);  // untouched by the failed load
}

TEST(Clipping, GlobalNormClipsAndReturnsPreClipNorm) {
  std::vector<Tensor> g = {f32({3.f}, {1}), f32({0.f, 4.f}, {2})};
  EXPECT_DOUBLE_EQ(global_grad_norm(g), 5.0);
  double norm = clip_grad_norm(g, 1.0);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_NEAR(g[0].data<float>()[0], 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(global_grad_norm(g), 1.0, 1e-6);
  std::vector<Tensor> small = {f32({0.3f, 0.4f}, {2})};
  EXPECT_NEAR(clip_grad_norm(small, 1.0), 0.5, 1e-7);
  EXPECT_EQ(small[0].data<float>()[1], 0.4f);  // below the limit: unchanged
  std::vector<Tensor> off = {f32({30.f, 40.f}, {2})};
  EXPECT_NEAR(clip_grad_norm(off, 0.0), 50.0, 1e-9);
  EXPECT_EQ(off[0].data<float>()[1], 40.f);  // max_norm 0: no clipping
}

TEST(Clipping, CoefficientInsideAdamWEqualsClippingInPlace) {
  // Trainer passes the clip coefficient to AdamW::step instead of scaling the gradients first: the
  // parameters and moments must come out bit for bit the same. 37 elements: vector body and tail.
  std::vector<float> w(37), gv(37);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = 0.1f * float(i) - 1.f;
    gv[i] = 3.f * std::sin(float(i));
  }
  std::vector<Parameter> a = {{"x.weight", f32(w, {37})}}, b = {{"x.weight", f32(w, {37})}};
  std::vector<Tensor> ga = {f32(gv, {37})}, gb = {f32(gv, {37})};
  AdamW oa(a, {.weight_decay = 0.1}), ob(b, {.weight_decay = 0.1});
  for (int step = 0; step < 3; ++step) {
    const double norm = global_grad_norm(ga);
    EXPECT_EQ(clip_grad_norm(gb, 1.0), norm);
    oa.step(a, ga, 1e-2, clip_coefficient(norm, 1.0));
    ob.step(b, gb, 1e-2);
    gb[0] = f32(gv, {37});
  }
  EXPECT_LT(clip_coefficient(global_grad_norm(ga), 1.0), 1.0f);  // clipping was active
  EXPECT_EQ(a[0].value.to_f32_vector(), b[0].value.to_f32_vector());
  EXPECT_EQ(oa.exp_avg_sq()[0].to_f32_vector(), ob.exp_avg_sq()[0].to_f32_vector());
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(50.0, 0.0), 1.0f);
  EXPECT_EQ(clip_coefficient(std::nan(""), 1.0), 1.0f);
}

}  // namespace
}  // namespace kiln::training
