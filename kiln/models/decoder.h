// The decoder graph shared by Qwen3, Qwen2 and Llama (config switches; see config.h).
#pragma once

#include <string>

#include "kiln/graph/graph.h"
#include "kiln/models/config.h"

namespace kiln::models {

// Name of the f32 [max_position_embeddings, head_dim] RoPE table (cos then sin per row) that the
// model provides as a weight.
inline constexpr const char* kRopeTableName = "rotary_emb.cos_sin";

// function: prefill | decode (logits of the last position) | score (logits of every position), over
// Weight nodes and the KV cache; or train | eval: weights are States bound per run (named as in
// Transformers), attention runs over the batch itself (cache_len = seq), inputs input_ids,
// position_ids, attention_mask and labels (i32 [B, T], already shifted: labels[t] is the target of
// position t, -100 ignored), and the output is a CrossEntropy node (with gradient for train).
graph::Graph build_decoder_graph(const ModelConfig& config, DType act, const std::string& function,
                                 int64_t batch, int64_t seq, int64_t cache_len);

}  // namespace kiln::models
