#include "kiln/models/causal_lm.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "kiln/backends/cpu/cpu_backend.h"
#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/decoder.h"

namespace kiln::models {

// Weights by Transformers name: memory-mapped views of the checkpoint, converted to the model dtype
// at load only where no kernel does it (see stored_as_is below).
class ModelWeights final : public graph::WeightStore {
 public:
  Tensor get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw InternalError("weight '" + name + "' was not loaded");
    return it->second;
  }
  std::map<std::string, Tensor> tensors_;
  size_t bytes_ = 0;
};

namespace {

// Whether a checkpoint tensor stays in its own dtype, memory-mapped, when the model dtype differs:
// the backend converts it where it is used, with the rounding Tensor::to would apply. A linear's
// weight is packed in the model dtype, reading the mapped source and dropping its pages as it
// goes; a converted copy beside the packed one held it twice (Qwen3-0.6B in f32 from bf16: peak
// RSS 4.8 GB for 2.4 GB of weights). A tied embedding table is looked up in the lm_head's packed
// copy; an untied one stays as is only where the lookup widens it exactly (bf16 rows into f32).
// Norm weights and biases are small: converted.
bool stored_as_is(const std::string& name, const Tensor& t, const ModelConfig& c, DType model) {
  if (t.ndim() != 2) return false;
  if (name != "model.embed_tokens.weight" || c.tie_word_embeddings) return true;
  return t.dtype() == DType::bf16 && model == DType::f32;
}

struct Expected {
  std::string name;
  Shape shape;
};

std::vector<Expected> expected_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  std::vector<Expected> out = {{"model.embed_tokens.weight", {c.vocab_size, H}},
                               {"model.norm.weight", {H}}};
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, H}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {H}});
    out.push_back({p + "post_attention_layernorm.weight", {H}});
    out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), H}});
    out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), H}});
    out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), H}});
    out.push_back({p + "self_attn.o_proj.weight", {H, c.q_dim()}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}});
      out.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}});
      out.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}});
    }
    if (c.o_bias) out.push_back({p + "self_attn.o_proj.bias", {H}});
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {D}});
      out.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    out.push_back({p + "mlp.gate_proj.weight", {I, H}});
    out.push_back({p + "mlp.up_proj.weight", {I, H}});
    out.push_back({p + "mlp.down_proj.weight", {H, I}});
  }
  return out;
}

// cos and sin of position * inv_freq, rounded as Transformers computes them (f32 inv_freq, f32
// product, f32 cos/sin), laid out [P, D] with the D/2 cos values then the D/2 sin values.
Tensor rope_table(const ModelConfig& c) {
  const int64_t P = c.max_position_embeddings, half = c.head_dim / 2;
  std::vector<double> inv = c.rope_inv_freq();
  Tensor t = Tensor::empty({P, c.head_dim}, DType::f32);
  float* d = t.data<float>();
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(p) * float(inv[size_t(i)]);
      d[p * c.head_dim + i] = float(std::cos(double(angle)));
      d[p * c.head_dim + half + i] = float(std::sin(double(angle)));
    }
  }
  return t;
}

}  // namespace

size_t KVCache::bytes() const {
  size_t n = 0;
  for (const auto& t : k) n += t.nbytes();
  for (const auto& t : v) n += t.nbytes();
  return n;
}

CausalLM::~CausalLM() = default;

std::shared_ptr<CausalLM> CausalLM::from_pretrained(const std::string& dir,
                                                    const FromPretrainedOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error(dir, "model folder does not exist");
  if (options.dtype != DType::bf16 && options.dtype != DType::f32)
    throw Error("dtype", std::string("unsupported model dtype ") + std::string(dtype_name(options.dtype)) +
                             " (use bf16 or f32)");
  auto m = std::shared_ptr<CausalLM>(new CausalLM());
  m->dir_ = dir;
  m->options_ = options;
  m->dtype_ = options.dtype;
  m->device_ = resolve_device_map(options.device_map);
  if (m->device_.kind != DeviceKind::cpu)
    throw Error("device_map", "device " + m->device_.str() + " has no kiln backend in this build");
  m->backend_ = &cpu::cpu_backend();
  m->cache_.set_strict(options.strict_compile || m->cache_.strict());
  m->config_ = ModelConfig::from_pretrained(dir);

  // Not read in at once: most of it is read by packing, which reads each range just before it and
  // drops it after (an f32 checkpoint of a bf16 model was all resident at load: peak RSS 2x).
  io::CheckpointReader ckpt(dir, /*populate=*/false);
  auto w = std::make_unique<ModelWeights>();
  for (const auto& e : expected_tensors(m->config_)) {
    if (!ckpt.contains(e.name))
      throw Error(dir, "tensor '" + e.name + "' is missing from the checkpoint (expected shape " +
                           shape_str(e.shape) + " for " + m->config_.architecture + ")");
    const auto& info = ckpt.info(e.name);
    if (info.shape != e.shape)
      throw Error(dir, "tensor '" + e.name + "' has shape " + shape_str(info.shape) +
                           " but config.json implies " + shape_str(e.shape));
    Tensor t = ckpt.tensor(e.name);
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16)
      throw Error(dir, "tensor '" + e.name + "' has dtype " + info.dtype_str +
                           " (expected F32, BF16 or F16)");
    if (t.dtype() != m->dtype_ && !stored_as_is(e.name, t, m->config_, m->dtype_)) {
      t.storage()->populate(t.offset(), t.nbytes());
      t = t.to(m->dtype_);
    }
    w->bytes_ += size_t(t.numel()) * dtype_size(m->dtype_);
    w->tensors_[e.name] = t;
  }
  w->tensors_[kRopeTableName] = rope_table(m->config_);
  m->weights_ = std::move(w);
  return m;
}

Tensor CausalLM::weight(const std::string& name) const {
  Tensor t = weights_->get(name);
  t.storage()->populate(t.offset(), t.nbytes());  // callers read it whole (training copies it)
  return t.dtype() == dtype_ ? t : t.to(dtype_);
}

size_t CausalLM::weight_bytes() const { return weights_->bytes_; }
size_t CausalLM::packed_bytes() const { return weights_->prepared_bytes(); }

KVCache CausalLM::make_cache(int64_t batch, int64_t max_len) const {
  KVCache c;
  c.batch = batch;
  c.max_len = max_len;
  // One allocation for every layer's k and v, each a [B, L, Hkv, D] view of it: a block this large
  // is mapped in 2 MiB pages (see map_pages), where a tensor per layer (1 MiB at a 512-token
  // context) got 4 KiB pages, whose first touch by a decode step's cache write and whose TLB
  // misses on the attention's reads cost ~1 ms of a 512-token step (docs/notes/cpu-attention.md).
  const int64_t layers = config_.num_hidden_layers;
  const Tensor block = Tensor::zeros(
      {2 * layers * batch, max_len, config_.num_key_value_heads, config_.head_dim}, dtype_);
  for (int64_t l = 0; l < layers; ++l) {
    c.k.push_back(block.slice0(2 * l * batch, (2 * l + 1) * batch));
    c.v.push_back(block.slice0((2 * l + 1) * batch, (2 * l + 2) * batch));
  }
  return c;
}

graph::Graph CausalLM::build_graph(const std::string& function, int64_t batch, int64_t seq,
                                   int64_t cache_len) const {
  return build_decoder_graph(config_, dtype_, function, batch, seq, cache_len);
}

graph::CompileKey CausalLM::key_for(const std::string& function, int64_t batch, int64_t seq,
                                    int64_t cache_len) const {
  return {.function = function,
          .shapes = {{"input_ids", {batch, seq}}, {"kv_cache", {batch, cache_len}}},
          .dtype = std::string(dtype_name(dtype_)),
          .device = device_.str()};
}

std::shared_ptr<graph::Executable> CausalLM::executable(const std::string& function, int64_t batch,
                                                        int64_t seq, int64_t cache_len) {
  if (options_.disable_compile) {
    const std::string k = key_for(function, batch, seq, cache_len).str();
    auto it = eager_.find(k);
    if (it != eager_.end()) return it->second;
    auto exe = graph::Executable::eager(build_graph(function, batch, seq, cache_len), *backend_,
                                        *weights_);
    eager_[k] = exe;
    return exe;
  }
  return cache_.get_or_compile(key_for(function, batch, seq, cache_len), [&] {
    return graph::Executable::compile(build_graph(function, batch, seq, cache_len), *backend_,
                                      *weights_, {});
  });
}

void CausalLM::warmup(const std::string& function, int64_t batch, int64_t seq, int64_t cache_len) {
  cache_.plan(key_for(function, batch, seq, cache_len));
  executable(function, batch, seq, cache_len);
}

Tensor CausalLM::forward(const std::string& function, const Tensor& input_ids,
                         const Tensor& positions, const Tensor& kv_mask, KVCache& cache,
                         int64_t slot_offset) {
  if (input_ids.ndim() != 2 || input_ids.dtype() != DType::i32)
    throw Error("input_ids", "expected i32 [batch, seq], got " + shape_str(input_ids.shape()));
  const int64_t B = input_ids.dim(0), T = input_ids.dim(1), L = cache.max_len;
  if (positions.shape() != input_ids.shape() || positions.dtype() != DType::i32)
    throw Error("position_ids", "expected i32 " + shape_str(input_ids.shape()));
  if (kv_mask.shape() != Shape{B, L} || kv_mask.dtype() != DType::i32)
    throw Error("attention_mask", "expected i32 " + shape_str({B, L}) + " over the cache slots");
  if (cache.batch != B) throw Error("cache", "cache batch differs from input batch");
  if (slot_offset < 0 || slot_offset + T > L)
    throw Error("cache", "tokens [" + std::to_string(slot_offset) + ", " +
                             std::to_string(slot_offset + T) + ") do not fit a cache of " +
                             std::to_string(L) + " slots");
  const int32_t* id = input_ids.data<int32_t>();
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) {
    if (id[i] < 0 || id[i] >= config_.vocab_size)
      throw Error("input_ids", "token id " + std::to_string(id[i]) + " is outside the vocabulary [0, " +
                                   std::to_string(config_.vocab_size) + ")");
    if (pos[i] < 0 || pos[i] >= config_.max_position_embeddings)
      throw Error("position_ids", "position " + std::to_string(pos[i]) +
                                      " is outside max_position_embeddings (" +
                                      std::to_string(config_.max_position_embeddings) + ")");
  }
  auto exe = executable(function, B, T, L);
  std::vector<Tensor> states;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    states.push_back(cache.k[size_t(l)]);
    states.push_back(cache.v[size_t(l)]);
  }
  return exe->run({input_ids, positions, kv_mask}, states, {.slot_offset = slot_offset})[0];
}

}  // namespace kiln::models
