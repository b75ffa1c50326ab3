#include "kiln/models/create_model.h"

#include <bit>
#include <cmath>
#include <filesystem>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"

namespace kiln::models {

namespace {

struct Preset {
  const char* name;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
};

// Shapes of the released Qwen3 checkpoints (0.6B, 1.7B) and two small test sizes.
constexpr Preset kPresets[] = {
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128},
    {"qwen3-1.7b", 2048, 6144, 28, 16, 8, 128},
    {"small", 256, 768, 4, 4, 2, 64},
    {"tiny", 64, 160, 2, 4, 2, 16},
};
constexpr int64_t kQwen3Vocab = 151936;
constexpr int64_t kBos = 151643;     // <|endoftext|>
constexpr int64_t kImEnd = 151645;   // <|im_end|>

std::string preset_list() {
  std::string s;
  for (const auto& p : kPresets) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      throw Error("dtype", "create-model writes f32, bf16 or f16, not " +
                               std::string(dtype_name(d)));
  }
}

// splitmix64 (Steele, Lea, Flood 2014) used as a counter-based generator: output k of a stream is
// the finaliser applied to seed + (k + 1) * golden, so every output is independent of the others
// and the loops below vectorise.
inline uint64_t splitmix_at(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t mix(uint64_t x) { return splitmix_at(x, 0); }

// ln(x) for positive normal x, |error| < 1e-6: x = 2^e * m with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172, by its odd series to t^9. Written without
// library calls so the fill loop vectorises (libm's logf/sinf/cosf would cost ~10x more here).
inline float fast_log(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  float e = float(int32_t(bits >> 23) - 127);
  float m = std::bit_cast<float>((bits & 0x7fffffu) | 0x3f800000u);
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1.0f : e;
  const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  const float series =
      1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9))));
  return 2.0f * t * series + e * 0.693147181f;
}

// sqrt(x) for positive normal x as x / sqrt(x) with 1/sqrt(x) from the classic bit-level first
// guess and three Newton steps (relative error ~1e-7). std::sqrt would do, but its errno branch
// (without -fno-math-errno) stops the fill loop from vectorising.
inline float fast_sqrt(float x) {
  float y = std::bit_cast<float>(0x5f3759dfu - (std::bit_cast<uint32_t>(x) >> 1));
  const float h = 0.5f * x;
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  return x * y;
}

constexpr int64_t kChunk = 1 << 16;

struct Fill {
  Tensor tensor;
  float mean, stddev;
  uint64_t key;
};

// Values [chunk * kChunk, ...) of one tensor: normal(mean, stddev) by Box-Muller, one 64-bit draw
// giving two 24-bit uniforms and two normals (the first half of the chunk takes the cosines, the
// second the sines), written straight into the tensor's dtype. `buf` holds kChunk + 1 floats.
void fill_chunk(const Fill& f, int64_t chunk, std::vector<float>& buf) {
  const int64_t begin = chunk * kChunk;
  const int64_t n = std::min(kChunk, f.tensor.numel() - begin);
  const int64_t half = (n + 1) / 2;
  const uint64_t key = mix(f.key ^ mix(uint64_t(chunk) + 1));
  constexpr float kInv24 = 1.0f / 16777216.0f;
  constexpr float kHalfPi = 1.57079632679489662f;
  float* out = buf.data();
  const float mean = f.mean, sd = f.stddev;
  for (int64_t k = 0; k < half; ++k) {
    const uint64_t r = splitmix_at(key, uint64_t(k));
    const float u1 = (float(int32_t(r >> 40)) + 0.5f) * kInv24;  // (0, 1): the log is finite
    const float u2 = float(int32_t((r >> 16) & 0xFFFFFFu)) * kInv24;  // [0, 1)
    const float radius = fast_sqrt(-2.0f * fast_log(u1)) * sd;
    // Angle 2*pi*u2 - pi = 2a with a in [-pi/2, pi/2): sin a and cos a by Taylor series (errors
    // below 6e-8), then the double-angle formulas.
    const float a = (2.0f * u2 - 1.0f) * kHalfPi, a2 = a * a;
    const float s =
        a * (1.0f - a2 / 6 * (1.0f - a2 / 20 * (1.0f - a2 / 42 * (1.0f - a2 / 72 * (1.0f - a2 / 110)))));
    const float c = 1.0f - a2 / 2 * (1.0f - a2 / 12 * (1.0f - a2 / 30 * (1.0f - a2 / 56 *
                                     (1.0f - a2 / 90 * (1.0f - a2 / 132)))));
    out[k] = mean + radius * (c * c - s * s);
    out[half + k] = mean + radius * (2.0f * s * c);  // index n when n is odd: the spare slot
  }
  char* dst = static_cast<char*>(f.tensor.raw()) + size_t(begin) * dtype_size(f.tensor.dtype());
  if (f.tensor.dtype() == DType::bf16) {  // the common case, inline so it vectorises
    bf16_t* d = reinterpret_cast<bf16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(out[i]);
  } else {
    convert(out, DType::f32, dst, f.tensor.dtype(), n);
  }
}

}  // namespace

std::vector<std::string> model_presets() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.push_back(p.name);
  return out;
}

io::Json preset_config_json(const std::string& preset, DType dtype) {
  const Preset* p = nullptr;
  for (const auto& x : kPresets)
    if (preset == x.name) p = &x;
  if (!p)
    throw Error("preset", "unknown preset '" + preset + "' (available: " + preset_list() + ")");
  // The fields and defaults Transformers' Qwen3Config serialises (the released Qwen3 checkpoints
  // have the same set, plus transformers_version, which kiln does not claim).
  io::Json j = io::Json::object();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = kBos;
  j["eos_token_id"] = kImEnd;
  j["head_dim"] = p->head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = p->hidden;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = p->intermediate;
  j["max_position_embeddings"] = 40960;
  j["max_window_layers"] = 28;
  j["model_type"] = "qwen3";
  j["num_attention_heads"] = p->heads;
  j["num_hidden_layers"] = p->layers;
  j["num_key_value_heads"] = p->kv_heads;
  j["rms_norm_eps"] = 1e-6;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = 1000000.0;
  j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  j["vocab_size"] = kQwen3Vocab;
  return j;
}

std::vector<std::pair<std::string, Tensor>> random_weights(const ModelConfig& c,
                                                           uint64_t seed,
                                                           DType dtype) {
  torch_dtype_name(dtype);  // rejects other dtypes
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate_size;
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<Fill> fills;
  const uint64_t base = mix(seed);
  auto add = [&](const std::string& name, const Shape& shape, bool norm) {
    Tensor t = Tensor::empty(shape, dtype);
    fills.push_back({t, norm ? 1.0f : 0.0f, norm ? 0.1f : 0.02f, mix(base + out.size())});
    out.emplace_back(name, t);
  };
  auto add_bias = [&](const std::string& name, int64_t n) {
    // Biases (Qwen2, Llama with attention_bias) start at zero in Transformers; small noise keeps
    // them observable in tests.
    Tensor t = Tensor::empty({n}, dtype);
    fills.push_back({t, 0.0f, 0.02f, mix(base + out.size())});
    out.emplace_back(name, t);
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, false);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {h}, true);
    add(l + "self_attn.q_proj.weight", {q, h}, false);
    if (c.qkv_bias) add_bias(l + "self_attn.q_proj.bias", q);
    add(l + "self_attn.k_proj.weight", {kv, h}, false);
    if (c.qkv_bias) add_bias(l + "self_attn.k_proj.bias", kv);
    add(l + "self_attn.v_proj.weight", {kv, h}, false);
    if (c.qkv_bias) add_bias(l + "self_attn.v_proj.bias", kv);
    add(l + "self_attn.o_proj.weight", {h, q}, false);
    if (c.o_bias) add_bias(l + "self_attn.o_proj.bias", h);
    if (c.qk_norm) {
      add(l + "self_attn.q_norm.weight", {c.head_dim}, true);
      add(l + "self_attn.k_norm.weight", {c.head_dim}, true);
    }
    add(l + "post_attention_layernorm.weight", {h}, true);
    add(l + "mlp.gate_proj.weight", {inter, h}, false);
    add(l + "mlp.up_proj.weight", {inter, h}, false);
    add(l + "mlp.down_proj.weight", {h, inter}, false);
  }
  add("model.norm.weight", {h}, true);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h}, false);

  // One work list of (tensor, chunk) over the whole model so small tensors do not serialise.
  std::vector<std::pair<int32_t, int64_t>> work;
  for (size_t f = 0; f < fills.size(); ++f)
    for (int64_t ch = 0; ch * kChunk < fills[f].tensor.numel(); ++ch) work.emplace_back(int32_t(f), ch);
  parallel_for(int64_t(work.size()), [&](int64_t b, int64_t e) {
    std::vector<float> buf(static_cast<size_t>(kChunk + 1));
    for (int64_t w = b; w < e; ++w) fill_chunk(fills[size_t(work[w].first)], work[w].second, buf);
  });
  return out;
}

CreatedModel create_model(const std::string& out_dir,
                          const std::string& preset,
                          uint64_t seed,
                          DType dtype,
                          const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  io::Json config_json = preset_config_json(preset, dtype);  // validates preset and dtype first
  if (out_dir.empty()) throw Error("out_dir", "an output folder is required");
  std::error_code ec;
  if (fs::exists(out_dir) && !fs::is_directory(out_dir))
    throw Error(out_dir, "exists and is not a folder");
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the folder: " + ec.message());
  if (fs::exists(out_dir + "/model.safetensors.index.json"))
    throw Error(out_dir + "/model.safetensors.index.json",
                "a sharded checkpoint is already here; loaders would prefer its index over the new "
                "model.safetensors. Use an empty folder");
  std::optional<std::string> tokenizer_json, tokenizer_config;
  if (!tokenizer_dir.empty()) {  // read before writing anything, so a bad path leaves no debris
    const std::string tj = tokenizer_dir + "/tokenizer.json";
    if (!fs::exists(tj)) throw Error(tj, "no tokenizer.json in the --tokenizer folder");
    tokenizer_json = io::read_file(tj);
    const std::string tc = tokenizer_dir + "/tokenizer_config.json";
    if (fs::exists(tc)) tokenizer_config = io::read_file(tc);
  }

  CreatedModel made;
  made.dir = out_dir;
  made.config = ModelConfig::from_json(config_json, out_dir + "/config.json");
  made.num_parameters = made.config.num_parameters();
  {
    auto weights = random_weights(made.config, seed, dtype);
    io::save_safetensors(out_dir + "/model.safetensors", weights, {{"format", "pt"}});
  }
  made.files.push_back("model.safetensors");
  made.weight_bytes = fs::file_size(out_dir + "/model.safetensors");

  io::write_file_atomic(out_dir + "/config.json", config_json.dump(2) + "\n");
  made.files.push_back("config.json");
  io::Json gen = {{"bos_token_id", kBos},
                  {"do_sample", false},
                  {"eos_token_id", {kImEnd, kBos}},
                  {"pad_token_id", kBos}};
  io::write_file_atomic(out_dir + "/generation_config.json", gen.dump(2) + "\n");
  made.files.push_back("generation_config.json");
  if (tokenizer_json) {
    io::write_file_atomic(out_dir + "/tokenizer.json", *tokenizer_json);
    made.files.push_back("tokenizer.json");
    if (tokenizer_config) {
      io::write_file_atomic(out_dir + "/tokenizer_config.json", *tokenizer_config);
      made.files.push_back("tokenizer_config.json");
    }
  }
  return made;
}

}  // namespace kiln::models
