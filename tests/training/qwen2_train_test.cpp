// Training a model with attention biases (Qwen2's q/k/v biases): the bias gradients against finite
// differences of the loss, the loss falling under AdamW in f32 and bf16, and the saved folder
// loading back as a Qwen2 model. The checkpoint is the tiny Qwen3 turned into a Qwen2 (q/k norms
// dropped, random q/k/v biases added).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "kiln/io/safetensors.h"
#include "kiln/models/causal_lm.h"
#include "kiln/training/causal_lm_model.h"
#include "kiln/training/optimizer.h"

namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

std::string make_qwen2(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("kiln_qwen2_" + name)).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto config = nlohmann::json::parse(std::ifstream(kTiny + "/config.json"));
  config["model_type"] = "qwen2";
  config["architectures"] = {"Qwen2ForCausalLM"};
  config.erase("attention_bias");  // Qwen2Config has no such field: q/k/v always have biases
  config.erase("head_dim");        // Qwen2 derives it from hidden_size / num_attention_heads
  std::ofstream(dir + "/config.json") << config.dump(2);
  auto file = kiln::io::SafetensorsFile::open(kTiny + "/model.safetensors");
  std::vector<std::pair<std::string, kiln::Tensor>> tensors;
  for (const auto& n : file->names())
    if (n.find("q_norm") == std::string::npos && n.find("k_norm") == std::string::npos)
      tensors.emplace_back(n, file->tensor(n).to(kiln::DType::f32));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 0.5f);
  const int64_t layers = config["num_hidden_layers"], heads = config["num_attention_heads"],
                kv = config["num_key_value_heads"], d = config["hidden_size"].get<int64_t>() / heads;
  for (int64_t l = 0; l < layers; ++l)
    for (auto [proj, n] : {std::pair{"q_proj", heads * d}, std::pair{"k_proj", kv * d},
                           std::pair{"v_proj", kv * d}}) {
      std::vector<float> b(static_cast<size_t>(n));
      for (float& x : b) x = normal(rng);
      tensors.emplace_back("model.layers." + std::to_string(l) + ".self_attn." + proj + ".bias",
                           kiln::Tensor::from_vector(b, {n}));
    }
  kiln::io::save_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

kiln::training::TrainBatch fixed_batch() {
  std::vector<int32_t> ids = {9707, 11, 1879, 0, 576, 3974, 13876, 38835, 30,
                              785,  1207, 264, 1273, 13, 358, 1075, 432, 2};
  std::vector<int32_t> mask(ids.size(), 1);
  mask.back() = 0;  // one padded position, label -100
  std::vector<int32_t> labels = ids;
  labels.back() = -100;
  const int64_t b = 2, t = int64_t(ids.size()) / 2;
  return {kiln::Tensor::from_vector(ids, {b, t}), kiln::Tensor::from_vector(mask, {b, t}),
          kiln::Tensor::from_vector(labels, {b, t})};
}

kiln::Tensor& param(kiln::training::CausalLMTrainable& m, const std::string& name, size_t* index) {
  auto& ps = m.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].name == name) {
      *index = i;
      return ps[i].value;
    }
  ADD_FAILURE() << "no parameter " << name;
  return ps[0].value;
}

TEST(Qwen2Training, BiasGradientsMatchFiniteDifferences) {
  const std::string dir = make_qwen2("grad");
  auto m = kiln::training::CausalLMTrainable::from_pretrained(dir, {.bf16 = false});
  const auto batch = fixed_batch();
  auto grads = kiln::training::zeros_like(m->parameters());
  const auto s = m->forward_backward(batch, 1.0f, grads);  // d(loss sum)
  ASSERT_GT(s.num_tokens, 0);
  for (const std::string name : {"model.layers.0.self_attn.q_proj.bias",
                                 "model.layers.1.self_attn.k_proj.bias",
                                 "model.layers.1.self_attn.v_proj.bias"}) {
    size_t i = 0;
    kiln::Tensor& b = param(*m, name, &i);
    for (int64_t j : {int64_t(0), b.numel() / 2, b.numel() - 1}) {
      float& x = b.data<float>()[j];
      const float x0 = x, h = 1e-2f;
      x = x0 + h;
      const double up = m->evaluate(batch).loss_sum;
      x = x0 - h;
      const double down = m->evaluate(batch).loss_sum;
      x = x0;
      const double fd = (up - down) / (2.0 * double(h));
      const double got = grads[i].data<float>()[j];
      EXPECT_NEAR(got, fd, 2e-3 + 1e-2 * std::abs(fd)) << name << "[" << j << "]";
    }
  }
  fs::remove_all(dir);
}

TEST(Qwen2Training, LossFallsAndTheSavedModelLoadsAsQwen2) {
  const std::string dir = make_qwen2("fit");
  const auto batch = fixed_batch();
  const int64_t tokens = kiln::training::count_label_tokens(batch);
  for (bool bf16 : {false, true}) {
    auto m = kiln::training::CausalLMTrainable::from_pretrained(dir, {.bf16 = bf16});
    kiln::training::AdamW adam(m->parameters(), {.weight_decay = 0.01});
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      auto grads = kiln::training::zeros_like(m->parameters());
      const auto s = m->forward_backward(batch, 1.0f / float(tokens), grads);
      losses.push_back(s.loss_sum / double(s.num_tokens));
      kiln::training::clip_grad_norm(grads, 1.0);
      adam.step(m->parameters(), grads, 1e-2);
    }
    EXPECT_LT(losses.back(), losses.front() - 1.0) << (bf16 ? "bf16" : "f32");
    if (bf16) continue;
    const std::string out = dir + "/trained";
    m->save_pretrained(out);
    auto lm = kiln::AutoModelForCausalLM::from_pretrained(out, {.dtype = kiln::DType::f32});
    EXPECT_TRUE(lm->config().qkv_bias);
    size_t i = 0;
    const kiln::Tensor& trained = param(*m, "model.layers.0.self_attn.v_proj.bias", &i);
    const auto loaded = lm->weight("model.layers.0.self_attn.v_proj.bias").to_f32_vector();
    ASSERT_EQ(int64_t(loaded.size()), trained.numel());
    for (size_t j = 0; j < loaded.size(); ++j) EXPECT_EQ(loaded[j], trained.data<float>()[j]);
  }
  fs::remove_all(dir);
}

}  // namespace
