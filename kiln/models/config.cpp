#include "kiln/models/config.h"

#include <cmath>
#include <set>

#include "kiln/core/error.h"

namespace kiln::models {

namespace {

// Fields that Transformers writes for these architectures and that kiln reads.
const std::set<std::string> kRead = {
    "architectures",       "model_type",          "vocab_size",
    "hidden_size",         "intermediate_size",   "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim",
    "max_position_embeddings", "rms_norm_eps",    "rope_theta",
    "rope_scaling",        "tie_word_embeddings", "attention_bias",
    "bos_token_id",        "eos_token_id",        "pad_token_id",
    "torch_dtype",         "dtype",               "hidden_act",
    "use_sliding_window",  "sliding_window",      "mlp_bias",
    "quantization_config", "layer_types", "rope_parameters"};

// Fields that do not change inference (training knobs, bookkeeping, sliding window settings that
// are inactive unless use_sliding_window is true).
const std::set<std::string> kIgnored = {
    "attention_dropout", "initializer_range", "max_window_layers", "transformers_version",
    "use_cache",         "_name_or_path",     "pretraining_tp",    "output_attentions",
    "output_hidden_states", "return_dict",    "torchscript",       "id2label",
    "label2id",          "is_decoder",        "is_encoder_decoder", "tokenizer_class",
    "_attn_implementation_autoset", "num_experts_per_tok", "bos_token", "eos_token",
    "decoder_sparse_step"};

int64_t positive(const io::Json& j, const std::string& field, const std::string& where) {
  int64_t v = io::get_int(j, field, where);
  if (v <= 0) throw Error(where + ": " + field, "must be positive, got " + std::to_string(v));
  return v;
}

std::vector<int64_t> id_list(const io::Json& j, const std::string& field, const std::string& where) {
  std::vector<int64_t> out;
  if (!j.contains(field) || j[field].is_null()) return out;
  const auto& v = j[field];
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer()) throw Error(where + ": " + field, "expected integer token ids");
      out.push_back(x.get<int64_t>());
    }
  } else {
    throw Error(where + ": " + field, "expected an integer or a list of integers");
  }
  return out;
}

}  // namespace

ModelConfig ModelConfig::from_json(const io::Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where, "expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kRead.count(it.key()) && !kIgnored.count(it.key()))
      throw Error(where + ": " + it.key(),
                  "unknown config field (kiln refuses fields it cannot interpret rather than "
                  "guess; see docs/notes/models.md)");
  }
  ModelConfig c;
  c.raw = j;
  c.model_type = io::get_string(j, "model_type", where);
  const std::map<std::string, std::string> arch_of = {
      {"qwen3", "Qwen3ForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"llama", "LlamaForCausalLM"}};
  auto arch = arch_of.find(c.model_type);
  if (arch == arch_of.end())
    throw Error(where + ": model_type", "unsupported model_type '" + c.model_type +
                                            "' (kiln supports qwen3, qwen2, llama)");
  c.architecture = arch->second;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    const auto& a = j["architectures"][0];
    if (!a.is_string() || a.get<std::string>() != c.architecture)
      throw Error(where + ": architectures",
                  "expected [\"" + c.architecture + "\"] for model_type " + c.model_type + ", got " +
                      j["architectures"].dump());
  }
  if (j.contains("quantization_config"))
    throw Error(where + ": quantization_config", "quantized checkpoints are not supported");
  std::string act = io::get_string_or(j, "hidden_act", "silu", where);
  if (act != "silu") throw Error(where + ": hidden_act", "only silu is supported, got " + act);
  if (io::get_bool_or(j, "use_sliding_window", false, where))
    throw Error(where + ": use_sliding_window", "sliding-window attention is not supported");
  if (io::get_bool_or(j, "mlp_bias", false, where))
    throw Error(where + ": mlp_bias", "MLP biases are not supported");

  c.vocab_size = positive(j, "vocab_size", where);
  c.hidden_size = positive(j, "hidden_size", where);
  c.intermediate_size = positive(j, "intermediate_size", where);
  c.num_hidden_layers = positive(j, "num_hidden_layers", where);
  c.num_attention_heads = positive(j, "num_attention_heads", where);
  c.num_key_value_heads =
      j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
          ? positive(j, "num_key_value_heads", where)
          : c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads)
    throw Error(where + ": num_key_value_heads",
                "must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = positive(j, "head_dim", where);
  } else {
    if (c.hidden_size % c.num_attention_heads)
      throw Error(where + ": head_dim", "absent and hidden_size is not divisible by num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2) throw Error(where + ": head_dim", "must be even for rotary embeddings");
  c.max_position_embeddings = positive(j, "max_position_embeddings", where);
  c.rms_norm_eps = io::get_double_or(j, "rms_norm_eps", 1e-6, where);
  c.rope_theta = io::get_double_or(j, "rope_theta", 10000.0, where);
  if (!(c.rope_theta > 0)) throw Error(where + ": rope_theta", "must be positive");
  // Transformers' Qwen3Config, Qwen2Config and LlamaConfig all default to untied.
  c.tie_word_embeddings = io::get_bool_or(j, "tie_word_embeddings", false, where);
  c.qk_norm = c.model_type == "qwen3";
  bool attention_bias = io::get_bool_or(j, "attention_bias", false, where);
  c.qkv_bias = c.model_type == "qwen2" || attention_bias;
  c.o_bias = c.model_type != "qwen2" && attention_bias;

  // Newer Transformers write rope settings as `rope_parameters` (rope_theta and rope_type inside).
  const bool new_style = j.contains("rope_parameters") && !j["rope_parameters"].is_null();
  if (new_style) {
    if (!j["rope_parameters"].is_object())
      throw Error(where + ": rope_parameters", "expected an object");
    c.rope_theta = io::get_double_or(j["rope_parameters"], "rope_theta", c.rope_theta,
                                     where + ": rope_parameters");
    if (!(c.rope_theta > 0)) throw Error(where + ": rope_parameters.rope_theta", "must be positive");
  }
  const char* rope_field = new_style ? "rope_parameters" : "rope_scaling";
  if (j.contains(rope_field) && !j[rope_field].is_null()) {
    const auto& rs = j[rope_field];
    const std::string w = where + ": " + rope_field;
    if (!rs.is_object()) throw Error(w, "expected an object or null");
    std::string type = rs.contains("rope_type") ? io::get_string(rs, "rope_type", w)
                                                : io::get_string_or(rs, "type", "default", w);
    c.rope_scaling.rope_type = type;
    if (type == "default") {
    } else if (type == "linear") {
      c.rope_scaling.factor = io::get_double(rs, "factor", w);
    } else if (type == "llama3") {
      c.rope_scaling.factor = io::get_double(rs, "factor", w);
      c.rope_scaling.low_freq_factor = io::get_double(rs, "low_freq_factor", w);
      c.rope_scaling.high_freq_factor = io::get_double(rs, "high_freq_factor", w);
      c.rope_scaling.original_max_position_embeddings =
          io::get_int(rs, "original_max_position_embeddings", w);
    } else {
      throw Error(w + ".rope_type", "unsupported rope type '" + type +
                                        "' (kiln supports default, linear, llama3)");
    }
    if (!(c.rope_scaling.factor > 0)) throw Error(w + ".factor", "must be positive");
  }

  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  c.eos_token_ids = id_list(j, "eos_token_id", where);
  if (j.contains("pad_token_id") && j["pad_token_id"].is_number_integer())
    c.pad_token_id = j["pad_token_id"].get<int64_t>();
  std::string dt = io::get_string_or(j, "torch_dtype", io::get_string_or(j, "dtype", "float32", where), where);
  c.torch_dtype = parse_dtype(dt, where + ": torch_dtype");
  return c;
}

ModelConfig ModelConfig::from_pretrained(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return from_json(io::load_json(path), path);
}

io::Json ModelConfig::to_json(DType saved_dtype) const {
  io::Json j = raw;
  j["torch_dtype"] = saved_dtype == DType::bf16 ? "bfloat16"
                     : saved_dtype == DType::f16 ? "float16"
                                                 : "float32";
  if (j.contains("dtype")) j.erase("dtype");
  return j;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  const int64_t half = head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0 / std::pow(rope_theta, double(2 * i) / double(head_dim));
  const auto& rs = rope_scaling;
  if (rs.rope_type == "linear") {
    for (auto& f : inv) f /= rs.factor;
  } else if (rs.rope_type == "llama3") {
    // Transformers' _compute_llama3_parameters: long wavelengths scaled by 1/factor, short kept,
    // the band between interpolated smoothly.
    const double old_ctx = double(rs.original_max_position_embeddings);
    const double low_wavelen = old_ctx / rs.low_freq_factor;
    const double high_wavelen = old_ctx / rs.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1 - smooth) * f / rs.factor + smooth * f;
      }
    }
  }
  return inv;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size;
  int64_t per_layer = h * q_dim() + 2 * h * kv_dim() + q_dim() * h + 3 * h * intermediate_size + 2 * h;
  if (qk_norm) per_layer += 2 * head_dim;
  if (qkv_bias) per_layer += q_dim() + 2 * kv_dim();
  if (o_bias) per_layer += h;
  int64_t n = vocab_size * h + num_hidden_layers * per_layer + h;
  if (!tie_word_embeddings) n += vocab_size * h;
  return n;
}

}  // namespace kiln::models
