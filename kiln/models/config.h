// ModelConfig: config.json of a Hugging Face causal LM, for the architectures kiln runs.
//
// Qwen3, Qwen2 and Llama are one decoder with switches (see docs/notes/models.md):
//   qk_norm   Qwen3: RMSNorm on each q and k head before RoPE
//   qkv_bias  Qwen2: bias on q/k/v projections; Llama: `attention_bias` (q/k/v and o)
//   rope      default, linear or llama3 scaling
//   tie_word_embeddings: lm_head shares embed_tokens
// Fields are read exactly as Transformers names them. A field kiln does not know is an error naming
// it (a silent misread is worse than a refusal); fields that do not change inference are listed in
// config.cpp and accepted.
//
// Example:
//   auto cfg = kiln::models::ModelConfig::from_pretrained("/models/Qwen3-0.6B");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/io/json.h"

namespace kiln::models {

struct RopeScaling {
  std::string rope_type = "default";  // default | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string model_type;    // qwen3 | qwen2 | llama
  std::string architecture;  // Qwen3ForCausalLM | Qwen2ForCausalLM | LlamaForCausalLM
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qk_norm = false;   // qwen3
  bool qkv_bias = false;  // qwen2 always; llama with attention_bias
  bool o_bias = false;    // llama with attention_bias
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  DType torch_dtype = DType::f32;  // dtype the checkpoint was saved in
  io::Json raw;                    // the file as read, written back by save_pretrained

  static ModelConfig from_json(const io::Json& j, const std::string& where);
  static ModelConfig from_pretrained(const std::string& dir);  // dir/config.json
  // The config as Transformers writes it (raw fields kept, torch_dtype updated).
  io::Json to_json(DType saved_dtype) const;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Inverse frequencies [head_dim / 2] after rope scaling, as Transformers' rope init functions.
  std::vector<double> rope_inv_freq() const;
  // Parameter count (embeddings counted once when tied).
  int64_t num_parameters() const;
};

}  // namespace kiln::models
