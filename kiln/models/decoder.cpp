// The decoder of Qwen3, Qwen2 and Llama, written once against the graph builder. It reads like
// Transformers' modeling_qwen3.py; node names are the Transformers module paths, and the shape and
// dtype of every value is written beside it. "act" is the model dtype (bf16 or f32): the residual
// stream stays f32, matmul inputs are act, matmul outputs f32.
#include "kiln/models/decoder.h"

namespace kiln::models {

using graph::GraphBuilder;
using graph::Value;

namespace {

struct Shapes {
  int64_t B, T, L, H, Hq, Hkv, D, I, V;
  bool training;  // weights are States; attention over the batch instead of a cache
};

// A parameter as the model's matmuls and norms read it (act). Inference: a Weight, packed or
// converted at load. Training: the f32 master weight is a State bound per run; in bf16 it is cast
// where it is used, as autocast does, so no bf16 copy of the whole model stays resident (the
// backward pass casts again where it needs the weight: see autodiff).
Value parameter(GraphBuilder& b, bool training, const std::string& name, const Shape& shape,
                DType act) {
  if (!training) return b.weight(name, shape, act);
  Value master = b.state(name, shape, DType::f32);
  return act == DType::f32 ? master : b.cast(master, act, name + ".autocast");
}

// One decoder layer: x f32 [B*T, H] -> f32 [B*T, H]; writes this layer's k/v cache slots. With
// last_rows_only, everything after attention runs on the last position of each batch entry only
// and the layer returns f32 [B, H]: generation's last layer, whose other rows feed nothing.
Value decoder_layer(GraphBuilder& b, const ModelConfig& c, const Shapes& s, DType act, int layer,
                    Value x, Value positions, Value cos_sin, Value kv_mask, bool last_rows_only) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const float eps = float(c.rms_norm_eps);
  auto w = [&](const std::string& name, const Shape& shape) {
    return parameter(b, s.training, p + name, shape, act);
  };
  const int64_t BT = s.B * s.T;

  // --- self attention ---
  Value h = b.rms_norm(x, w("input_layernorm.weight", {s.H}), eps, act, p + "input_layernorm");
  auto proj = [&](const std::string& name, int64_t out, bool bias) {
    Value y = b.linear(h, w("self_attn." + name + ".weight", {out, s.H}), p + "self_attn." + name);
    if (bias) y = b.bias_add(y, w("self_attn." + name + ".bias", {out}), p + "self_attn." + name);
    return y;  // f32 [B*T, out]
  };
  Value q = proj("q_proj", s.Hq * s.D, c.qkv_bias);
  Value k = proj("k_proj", s.Hkv * s.D, c.qkv_bias);
  Value v = proj("v_proj", s.Hkv * s.D, c.qkv_bias);
  // Qwen3: RMSNorm over each head's D features, before RoPE.
  auto heads = [&](Value t, int64_t n_heads, const std::string& norm) {
    if (c.qk_norm) {
      t = b.reshape(t, {BT * n_heads, s.D}, p + "self_attn." + norm);
      t = b.rms_norm(t, w("self_attn." + norm + ".weight", {s.D}), eps, DType::f32,
                     p + "self_attn." + norm);
    }
    return b.reshape(t, {s.B, s.T, n_heads, s.D}, p + "self_attn." + norm);  // f32 [B, T, h, D]
  };
  q = b.rope(heads(q, s.Hq, "q_norm"), positions, cos_sin, p + "self_attn.rotary_q");
  k = b.rope(heads(k, s.Hkv, "k_norm"), positions, cos_sin, p + "self_attn.rotary_k");
  v = b.reshape(v, {s.B, s.T, s.Hkv, s.D}, p + "self_attn.v");
  Value a;
  if (s.training) {
    a = b.attention(q, k, v, kv_mask, act, p + "self_attn");  // act [B, T, Hq, D]
  } else {
    Value k_cache = b.state(p + "self_attn.k_cache", {s.B, s.L, s.Hkv, s.D}, act);
    Value v_cache = b.state(p + "self_attn.v_cache", {s.B, s.L, s.Hkv, s.D}, act);
    k_cache = b.kv_cache_write(k, k_cache, p + "self_attn.k_cache");  // act [B, L, Hkv, D]
    v_cache = b.kv_cache_write(v, v_cache, p + "self_attn.v_cache");
    a = b.attention(q, k_cache, v_cache, kv_mask, act, p + "self_attn");  // act [B, T, Hq, D]
  }
  a = b.reshape(a, {BT, s.Hq * s.D}, p + "self_attn.o_proj");
  if (last_rows_only) {
    a = b.take_last_rows(a, s.B, p + "self_attn.last_position");  // act [B, Hq*D]
    x = b.take_last_rows(x, s.B, p + "last_position");             // f32 [B, H]
  }
  Value o = b.linear(a, w("self_attn.o_proj.weight", {s.H, s.Hq * s.D}), p + "self_attn.o_proj");
  if (c.o_bias) o = b.bias_add(o, w("self_attn.o_proj.bias", {s.H}), p + "self_attn.o_proj");
  x = b.add(x, o, p + "residual_attn");

  // --- MLP (SwiGLU) ---
  h = b.rms_norm(x, w("post_attention_layernorm.weight", {s.H}), eps, act,
                 p + "post_attention_layernorm");
  Value gate = b.linear(h, w("mlp.gate_proj.weight", {s.I, s.H}), p + "mlp.gate_proj");
  Value up = b.linear(h, w("mlp.up_proj.weight", {s.I, s.H}), p + "mlp.up_proj");
  Value m = b.mul(b.silu(gate, p + "mlp.act_fn"), up, act, p + "mlp.act_fn*up");  // act [B*T, I]
  Value down = b.linear(m, w("mlp.down_proj.weight", {s.H, s.I}), p + "mlp.down_proj");
  return b.add(x, down, p + "residual_mlp");
}

}  // namespace

graph::Graph build_decoder_graph(const ModelConfig& c, DType act, const std::string& function,
                                 int64_t batch, int64_t seq, int64_t cache_len) {
  const bool training = function == "train" || function == "eval";
  const Shapes s{batch,          seq,
                 training ? seq : cache_len, c.hidden_size,
                 c.num_attention_heads, c.num_key_value_heads,
                 c.head_dim,     c.intermediate_size,
                 c.vocab_size,   training};
  GraphBuilder b(function);
  auto w = [&](const std::string& name, const Shape& shape) {
    return parameter(b, training, name, shape, act);
  };
  Value ids = b.input("input_ids", {s.B, s.T}, DType::i32);
  Value positions = b.input("position_ids", {s.B, s.T}, DType::i32);
  Value kv_mask = b.input("attention_mask", {s.B, s.L}, DType::i32);
  Value cos_sin = b.weight(kRopeTableName, {c.max_position_embeddings, s.D}, DType::f32);

  // Training looks up the f32 master table itself (autocast leaves embeddings in f32).
  Value table = training ? b.state("model.embed_tokens.weight", {s.V, s.H}, DType::f32)
                         : w("model.embed_tokens.weight", {s.V, s.H});
  Value x = b.embedding(b.reshape(ids, {s.B * s.T}, "input_ids"), table, "model.embed_tokens");
  // Generation needs only the last position's logits, so the last layer runs its o_proj and MLP
  // on that position alone (its attention still writes every position's k/v to the cache);
  // scoring and training need every position.
  const bool generation = function == "prefill" || function == "decode";
  const int layers = int(c.num_hidden_layers);
  for (int layer = 0; layer < layers; ++layer)
    x = decoder_layer(b, c, s, act, layer, x, positions, cos_sin, kv_mask,
                      generation && layer == layers - 1);
  Value h = b.rms_norm(x, w("model.norm.weight", {s.H}), float(c.rms_norm_eps), act, "model.norm");
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  // Training in bf16 keeps the logits in bf16, as autocast does: the cross-entropy reads them in f32
  // and its gradient is bf16 too, which halves the largest tensors of a step ([rows, V]).
  Value logits = b.linear(h, w(head, {s.V, s.H}), "lm_head", training ? act : DType::f32);
  if (training) {
    Value labels = b.input("labels", {s.B, s.T}, DType::i32);
    b.output(b.cross_entropy(logits, b.reshape(labels, {s.B * s.T}, "labels"), function == "train",
                             "loss"));
  } else {
    b.output(logits);
  }
  return b.finish();
}

}  // namespace kiln::models
