#include "kiln/models/create_model.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/causal_lm.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

std::string temp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("kiln_create_model_test_" + name)).string();
  fs::remove_all(d);
  return d;
}

std::string error_where(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.where();
  }
  return "<no error>";
}

// Every tensor Transformers' Qwen3ForCausalLM has, with its shape.
std::map<std::string, Shape> qwen3_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim, i = c.intermediate_size;
  std::map<std::string, Shape> out;
  out["model.embed_tokens.weight"] = {c.vocab_size, h};
  out["model.norm.weight"] = {h};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out[p + "input_layernorm.weight"] = {h};
    out[p + "self_attn.q_proj.weight"] = {c.num_attention_heads * d, h};
    out[p + "self_attn.k_proj.weight"] = {c.num_key_value_heads * d, h};
    out[p + "self_attn.v_proj.weight"] = {c.num_key_value_heads * d, h};
    out[p + "self_attn.o_proj.weight"] = {h, c.num_attention_heads * d};
    out[p + "self_attn.q_norm.weight"] = {d};
    out[p + "self_attn.k_norm.weight"] = {d};
    out[p + "post_attention_layernorm.weight"] = {h};
    out[p + "mlp.gate_proj.weight"] = {i, h};
    out[p + "mlp.up_proj.weight"] = {i, h};
    out[p + "mlp.down_proj.weight"] = {h, i};
  }
  return out;
}

TEST(CreateModel, TinyPresetConfigEqualsTheSharedTinyConfig) {
  io::Json ours = preset_config_json("tiny", DType::f32);
  io::Json theirs = io::load_json(kTiny + "/config.json");
  EXPECT_EQ(ours, theirs) << ours.dump(1) << "\nvs\n" << theirs.dump(1);
}

TEST(CreateModel, PresetsHaveTheAdvertisedShapes) {
  EXPECT_EQ(model_presets(), (std::vector<std::string>{"qwen3-0.6b", "qwen3-1.7b", "small", "tiny"}));
  auto c = ModelConfig::from_json(preset_config_json("qwen3-0.6b", DType::bf16), "0.6b");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::bf16);
  EXPECT_EQ(c.num_parameters(), 596049920);  // Qwen3-0.6B's count
  auto c17 = ModelConfig::from_json(preset_config_json("qwen3-1.7b", DType::bf16), "1.7b");
  EXPECT_EQ(c17.hidden_size, 2048);
  EXPECT_EQ(c17.intermediate_size, 6144);
  EXPECT_EQ(c17.num_parameters(), 1720574976);  // Qwen3-1.7B's count
  auto s = ModelConfig::from_json(preset_config_json("small", DType::bf16), "small");
  EXPECT_EQ(s.hidden_size, 256);
  EXPECT_EQ(s.intermediate_size, 768);
  EXPECT_EQ(s.num_hidden_layers, 4);
  EXPECT_EQ(s.head_dim, 64);
}

TEST(CreateModel, WritesEveryTensorAndLoadsBack) {
  const std::string dir = temp_dir("tiny");
  auto made = create_model(dir, "tiny", 1, DType::bf16, "");
  auto cfg = ModelConfig::from_pretrained(dir);
  EXPECT_EQ(cfg.hidden_size, 64);
  EXPECT_EQ(cfg.torch_dtype, DType::bf16);
  EXPECT_EQ(made.num_parameters, cfg.num_parameters());
  EXPECT_EQ(made.weight_bytes, fs::file_size(dir + "/model.safetensors"));

  io::CheckpointReader ckpt(dir);
  auto expected = qwen3_tensors(cfg);
  auto names = ckpt.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), expected.size());
  int64_t total = 0;
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(ckpt.contains(name)) << name;
    Tensor t = ckpt.tensor(name);
    EXPECT_EQ(t.shape(), shape) << name;
    EXPECT_EQ(t.dtype(), DType::bf16) << name;
    total += t.numel();
  }
  EXPECT_FALSE(ckpt.contains("lm_head.weight"));  // tied
  EXPECT_EQ(total, made.num_parameters);

  auto gen = io::load_json(dir + "/generation_config.json");
  EXPECT_EQ(gen["bos_token_id"], 151643);
  EXPECT_EQ(gen["eos_token_id"], io::Json({151645, 151643}));
  EXPECT_EQ(gen["pad_token_id"], 151643);
  EXPECT_FALSE(fs::exists(dir + "/tokenizer.json"));
  fs::remove_all(dir);
}

TEST(CreateModel, WeightStatistics) {
  auto cfg = ModelConfig::from_json(preset_config_json("tiny", DType::f32), "tiny");
  auto w = random_weights(cfg, 0, DType::f32);
  auto stats = [](const Tensor& t) {
    auto v = t.to_f32_vector();
    double s = 0, s2 = 0;
    for (float x : v) s += x;
    const double mean = s / double(v.size());
    for (float x : v) s2 += (x - mean) * (x - mean);
    return std::pair<double, double>(mean, std::sqrt(s2 / double(v.size())));
  };
  for (const auto& [name, t] : w) {
    auto [mean, sd] = stats(t);
    if (name.find("norm") != std::string::npos) {
      EXPECT_NEAR(mean, 1.0, 0.08) << name;
      EXPECT_NEAR(sd, 0.1, 0.05) << name;  // not all ones: a missing norm weight shows
    } else {
      EXPECT_NEAR(mean, 0.0, 0.002) << name;
      EXPECT_NEAR(sd, 0.02, 0.002) << name;
    }
  }
  // Tails look normal: about 4.55% of values beyond 2 sigma in the embedding.
  auto v = w[0].second.to_f32_vector();
  int64_t beyond = 0;
  for (float x : v) beyond += std::fabs(x) > 0.04f;
  EXPECT_NEAR(double(beyond) / double(v.size()), 0.0455, 0.002);
}

TEST(CreateModel, DeterministicAcrossThreadCountsAndSeedsDiffer) {
  auto cfg = ModelConfig::from_json(preset_config_json("tiny", DType::bf16), "tiny");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto one = random_weights(cfg, 5, DType::bf16);
  omp_set_num_threads(std::max(2, threads));
  auto many = random_weights(cfg, 5, DType::bf16);
  auto other = random_weights(cfg, 6, DType::bf16);
  omp_set_num_threads(threads);
  ASSERT_EQ(one.size(), many.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].first, many[i].first);
    ASSERT_EQ(0, std::memcmp(one[i].second.raw(), many[i].second.raw(), one[i].second.nbytes()))
        << one[i].first;
  }
  EXPECT_NE(0, std::memcmp(one[0].second.raw(), other[0].second.raw(), one[0].second.nbytes()));
  // Two tensors of one model are not copies of each other.
  EXPECT_NE(0, std::memcmp(one[2].second.raw(), one[4].second.raw(), one[4].second.nbytes()));
}

TEST(CreateModel, DtypesAreRoundingsOfTheSameValues) {
  auto cfg = ModelConfig::from_json(preset_config_json("tiny", DType::f32), "tiny");
  auto f = random_weights(cfg, 3, DType::f32);
  auto b = random_weights(cfg, 3, DType::bf16);
  auto h = random_weights(cfg, 3, DType::f16);
  for (size_t i = 0; i < f.size(); i += 7) {
    const float* pf = f[i].second.data<float>();
    const bf16_t* pb = b[i].second.data<bf16_t>();
    const f16_t* ph = h[i].second.data<f16_t>();
    for (int64_t k = 0; k < std::min<int64_t>(f[i].second.numel(), 1000); ++k) {
      ASSERT_EQ(pb[k], f32_to_bf16(pf[k])) << f[i].first;
      ASSERT_EQ(ph[k], f32_to_f16(pf[k])) << f[i].first;
    }
  }
}

TEST(CreateModel, BiasesAndUntiedHeadFollowTheConfig) {
  auto j = preset_config_json("tiny", DType::f32);
  j["model_type"] = "qwen2";
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["tie_word_embeddings"] = false;
  auto cfg = ModelConfig::from_json(j, "qwen2");
  auto w = random_weights(cfg, 0, DType::f32);
  std::map<std::string, Shape> shapes;
  int64_t total = 0;
  for (const auto& [n, t] : w) {
    shapes[n] = t.shape();
    total += t.numel();
  }
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.q_proj.bias"), (Shape{64}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.bias"), (Shape{32}));
  EXPECT_EQ(shapes.count("model.layers.1.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.self_attn.q_norm.weight"), 0u);
  EXPECT_EQ(shapes.at("lm_head.weight"), (Shape{151936, 64}));
  EXPECT_EQ(total, cfg.num_parameters());
}

TEST(CreateModel, CopiesTheTokenizer) {
  const std::string dir = temp_dir("tok");
  auto made = create_model(dir, "tiny", 0, DType::f32, kTiny);
  EXPECT_EQ(io::read_file(dir + "/tokenizer.json"), io::read_file(kTiny + "/tokenizer.json"));
  EXPECT_EQ(io::read_file(dir + "/tokenizer_config.json"),
            io::read_file(kTiny + "/tokenizer_config.json"));
  EXPECT_EQ(ModelConfig::from_pretrained(dir).torch_dtype, DType::f32);
  fs::remove_all(dir);
}

TEST(CreateModel, Errors) {
  const std::string dir = temp_dir("errors");
  try {
    create_model(dir, "qwen3-7b", 0, DType::bf16, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "preset");
    EXPECT_NE(std::string(e.what()).find("qwen3-0.6b, qwen3-1.7b, small, tiny"), std::string::npos);
  }
  EXPECT_EQ(error_where([&] { create_model(dir, "tiny", 0, DType::i32, ""); }), "dtype");
  const std::string empty = temp_dir("empty_tok");
  fs::create_directories(empty);
  EXPECT_EQ(error_where([&] { create_model(dir, "tiny", 0, DType::bf16, empty); }),
            empty + "/tokenizer.json");
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));  // nothing written on a bad argument
  fs::create_directories(dir);
  io::write_file_atomic(dir + "/model.safetensors.index.json", "{}");
  EXPECT_EQ(error_where([&] { create_model(dir, "tiny", 0, DType::bf16, ""); }),
            dir + "/model.safetensors.index.json");
  fs::remove_all(dir);
  fs::remove_all(empty);
}

TEST(CreateModel, RunsThroughCausalLM) {
  // The loader accepts every name and shape, and the random model gives finite logits.
  const std::string dir = temp_dir("run");
  create_model(dir, "tiny", 2, DType::f32, "");
  auto m = CausalLM::from_pretrained(dir, {.dtype = DType::f32});
  std::vector<int32_t> ids = {1, 2, 3, 4}, pos = {0, 1, 2, 3}, mask = {1, 1, 1, 1};
  auto cache = m->make_cache(1, 4);
  Tensor logits = m->forward("prefill", Tensor::from_vector(ids, {1, 4}),
                             Tensor::from_vector(pos, {1, 4}), Tensor::from_vector(mask, {1, 4}),
                             cache, 0);
  ASSERT_EQ(logits.shape(), (Shape{1, 151936}));
  double s = 0;
  for (float x : logits.to_f32_vector()) {
    ASSERT_TRUE(std::isfinite(x));
    s += std::fabs(x);
  }
  EXPECT_GT(s, 0);
  fs::remove_all(dir);
}

// Logits of a 5-token prefill and two decode steps.
std::vector<float> prefill_and_decode_logits(CausalLM& m) {
  auto cache = m.make_cache(1, 8);
  std::vector<int32_t> mask = {1, 1, 1, 1, 1, 0, 0, 0};
  const std::vector<int32_t> ids = {7, 300, 2, 151000, 9}, pos = {0, 1, 2, 3, 4};
  Tensor logits = m.forward("prefill", Tensor::from_vector(ids, {1, 5}),
                            Tensor::from_vector(pos, {1, 5}), Tensor::from_vector(mask, {1, 8}),
                            cache, 0);
  std::vector<float> out = logits.to_f32_vector();
  for (int32_t step = 0; step < 2; ++step) {
    mask[size_t(5 + step)] = 1;
    logits = m.forward("decode", Tensor::from_vector(std::vector<int32_t>{11 + step}, {1, 1}),
                       Tensor::from_vector(std::vector<int32_t>{5 + step}, {1, 1}),
                       Tensor::from_vector(mask, {1, 8}), cache, 5 + step);
    const auto row = logits.to_f32_vector();
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(CausalLMLoad, ACheckpointInAnotherDtypeEqualsItsConversion) {
  // Matrices stored in another dtype stay mapped as they are and are converted where they are used
  // (packed linears; the embedding through the tied lm_head's packed copy, or widened rows): the
  // model must compute exactly what it computes from the checkpoint converted beforehand. Tied
  // (Qwen3) and untied with biases (Qwen2), for an f32 model of bf16 and f16 checkpoints and a
  // bf16 model of f32 and f16 ones.
  struct Case {
    DType model, stored;
  };
  for (bool tied : {true, false}) {
    for (Case c : {Case{DType::f32, DType::bf16}, Case{DType::f32, DType::f16},
                   Case{DType::bf16, DType::f32}, Case{DType::bf16, DType::f16}}) {
      SCOPED_TRACE(std::string(tied ? "tied, " : "untied, ") + std::string(dtype_name(c.model)) +
                   " model of " + std::string(dtype_name(c.stored)));
      auto j = preset_config_json("tiny", c.stored);
      if (!tied) {
        j["model_type"] = "qwen2";
        j["architectures"] = {"Qwen2ForCausalLM"};
        j["tie_word_embeddings"] = false;
      }
      const auto stored = random_weights(ModelConfig::from_json(j, "tiny"), 4, c.stored);
      std::vector<std::pair<std::string, Tensor>> converted;
      for (const auto& [name, t] : stored) converted.push_back({name, t.to(c.model)});
      auto write_checkpoint = [&](const std::string& name,
                                  const std::vector<std::pair<std::string, Tensor>>& tensors) {
        const std::string dir = temp_dir(name);
        fs::create_directories(dir);
        io::write_file_atomic(dir + "/config.json", j.dump(2));
        io::save_safetensors(dir + "/model.safetensors", tensors);
        return dir;
      };
      const std::string stored_dir = write_checkpoint("stored", stored);
      const std::string converted_dir = write_checkpoint("converted", converted);
      auto a = CausalLM::from_pretrained(stored_dir, {.dtype = c.model});
      auto b = CausalLM::from_pretrained(converted_dir, {.dtype = c.model});
      EXPECT_EQ(prefill_and_decode_logits(*a), prefill_and_decode_logits(*b));
      EXPECT_EQ(a->weight_bytes(), b->weight_bytes());
      for (const std::string name :
           {"model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"}) {
        const Tensor w = a->weight(name);
        EXPECT_EQ(w.dtype(), c.model) << name;  // the API hands out the model dtype
        EXPECT_EQ(w.to_f32_vector(), b->weight(name).to_f32_vector()) << name;
      }
      fs::remove_all(stored_dir);
      fs::remove_all(converted_dir);
    }
  }
}

}  // namespace
}  // namespace kiln::models
