#include "kiln/models/config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/error.h"

namespace kiln::models {
namespace {

const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

// A Llama-3-style config.json, small.
io::Json llama_json() {
  return io::parse_json(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": [2, 3], "hidden_act": "silu",
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
    "max_position_embeddings": 2048, "mlp_bias": false, "num_attention_heads": 4,
    "num_hidden_layers": 1, "num_key_value_heads": 2, "head_dim": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 100})",
                        "llama");
}

io::Json qwen2_json() {
  return io::parse_json(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 32768,
    "max_window_layers": 21, "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})",
                        "qwen2");
}

std::string error_where(const io::Json& j) {
  try {
    ModelConfig::from_json(j, "config.json");
  } catch (const Error& e) {
    return e.where();
  }
  return "<no error>";
}

TEST(ModelConfig, ReadsTheTinyQwen3Config) {
  auto c = ModelConfig::from_pretrained(kTiny);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
  EXPECT_FALSE(c.pad_token_id);
  EXPECT_EQ(c.torch_dtype, DType::f32);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  // embed 151936*64 + 2 layers * (64*64 + 2*64*32 + 64*64 + 3*64*160 + 2*64 + 2*16) + 64
  EXPECT_EQ(c.num_parameters(), 151936 * 64 + 2 * (4096 + 4096 + 4096 + 30720 + 128 + 32) + 64);
  // Default rope: theta^(-2i/d).
  auto inv = c.rope_inv_freq();
  ASSERT_EQ(inv.size(), 8u);
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], std::pow(1e6, -2.0 / 16), 1e-15);
  EXPECT_NEAR(inv[7], std::pow(1e6, -14.0 / 16), 1e-15);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndNoQkNorm) {
  auto c = ModelConfig::from_json(qwen2_json(), "qwen2");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);  // absent: hidden_size / num_attention_heads
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfig, LlamaDefaultsAndAttentionBias) {
  auto j = llama_json();
  auto c = ModelConfig::from_json(j, "llama");
  EXPECT_FALSE(c.tie_word_embeddings);  // LlamaConfig's default
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.torch_dtype, DType::bf16);
  j["attention_bias"] = true;
  auto b = ModelConfig::from_json(j, "llama");
  EXPECT_TRUE(b.qkv_bias);
  EXPECT_TRUE(b.o_bias);  // Llama's attention_bias also covers o_proj
}

TEST(ModelConfig, LinearRopeScaling) {
  auto j = llama_json();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto inv = ModelConfig::from_json(j, "llama").rope_inv_freq();
  // head_dim 8, theta 1e4: 1, 0.1, 0.01, 0.001, each divided by 4.
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_NEAR(inv[0], 0.25, 1e-15);
  EXPECT_NEAR(inv[1], 0.025, 1e-15);
  EXPECT_NEAR(inv[2], 0.0025, 1e-15);
  EXPECT_NEAR(inv[3], 0.00025, 1e-15);
  // The legacy "type" key means the same.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_NEAR(ModelConfig::from_json(j, "llama").rope_inv_freq()[1], 0.05, 1e-15);
}

TEST(ModelConfig, Llama3RopeScalingByHand) {
  // Transformers' _compute_llama3_parameters with factor 8, low 1, high 4, original 1000 on the
  // frequencies 1, 0.1, 0.01, 0.001 (head_dim 8, theta 1e4). Wavelengths 2*pi/f: 6.28, 62.8, 628.3,
  // 6283. low_freq_wavelen = 1000/1 = 1000, high_freq_wavelen = 1000/4 = 250.
  //   f=1, f=0.1: wavelength < 250, kept.
  //   f=0.01: 250 <= 628.3 <= 1000, smoothed: s = (1000/628.3185 - 1) / (4 - 1) = 0.1971831;
  //           (1 - s) * 0.01 / 8 + s * 0.01 = 0.0010035211 + 0.0019718310 = 0.0029753521
  //   f=0.001: wavelength > 1000, divided by 8: 0.000125.
  auto j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 1000}};
  auto inv = ModelConfig::from_json(j, "llama").rope_inv_freq();
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_NEAR(inv[0], 1.0, 1e-12);
  EXPECT_NEAR(inv[1], 0.1, 1e-12);
  EXPECT_NEAR(inv[2], 0.0029753521, 1e-9);
  EXPECT_NEAR(inv[3], 0.000125, 1e-12);
}

TEST(ModelConfig, ErrorsNameTheField) {
  auto j = llama_json();
  j["model_type"] = "mistral";
  EXPECT_EQ(error_where(j), "config.json: model_type");

  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(error_where(j), "config.json: rope_scaling.rope_type");

  j = llama_json();
  j["rope_scalling"] = nullptr;  // a typo is not silently ignored
  EXPECT_EQ(error_where(j), "config.json: rope_scalling");

  j = llama_json();
  j.erase("hidden_size");
  EXPECT_EQ(error_where(j), "config.json: hidden_size");

  j = llama_json();
  j["num_hidden_layers"] = "two";
  EXPECT_EQ(error_where(j), "config.json: num_hidden_layers");

  j = llama_json();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(error_where(j), "config.json: num_key_value_heads");

  j = llama_json();
  j["vocab_size"] = 0;
  EXPECT_EQ(error_where(j), "config.json: vocab_size");

  j = llama_json();
  j["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_EQ(error_where(j), "config.json: architectures");

  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};  // llama3 needs its fields
  EXPECT_EQ(error_where(j), "config.json: rope_scaling: low_freq_factor");

  EXPECT_EQ(error_where(io::Json::array()), "config.json");

  // Integers out of int64's range, as a float or as an unsigned (fuzz_config found the first).
  j = llama_json();
  j["hidden_size"] = 1.6e27;
  EXPECT_EQ(error_where(j), "config.json: hidden_size");
  j = llama_json();
  j["hidden_size"] = uint64_t(1) << 63;
  EXPECT_EQ(error_where(j), "config.json: hidden_size");
}

TEST(ModelConfig, ErrorMessagesSayWhatIsWrong) {
  auto j = llama_json();
  j["model_type"] = "mistral";
  try {
    ModelConfig::from_json(j, "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mistral"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, ToJsonKeepsFieldsAndUpdatesDtype) {
  auto c = ModelConfig::from_pretrained(kTiny);
  auto j = c.to_json(DType::bf16);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["hidden_size"], 64);
  auto back = ModelConfig::from_json(j, "roundtrip");
  EXPECT_EQ(back.torch_dtype, DType::bf16);
  EXPECT_EQ(back.num_parameters(), c.num_parameters());
}

}  // namespace
}  // namespace kiln::models
