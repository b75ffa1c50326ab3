// create_model: a Qwen3 checkpoint with RANDOM weights in Transformers' format, for tests and
// benchmarks (it is not a trained model and produces meaningless text).
//
// Writes into out_dir:
//   config.json             the fields Transformers' Qwen3Config writes (sorted, indent 2)
//   generation_config.json  bos 151643, eos [151645, 151643], pad 151643 (Qwen3's ids)
//   model.safetensors       every tensor of Qwen3ForCausalLM, names and shapes as Transformers has
//                           them; lm_head.weight only when the preset is untied
//   tokenizer.json, tokenizer_config.json   copied from tokenizer_dir when one is given
// Every file is written atomically (temporary name, then rename).
//
// Weights: linear and embedding weights ~ normal(0, 0.02) (Transformers' initializer_range); norm
// weights 1 + normal(0, 0.1), near but not equal to 1, so a test can tell a missing norm weight.
// The numbers come from a counter-based generator: tensor t's chunk c of 65,536 values is drawn
// from splitmix64 seeded by (seed, t, c), normals by Box-Muller (own vectorisable log, sqrt and
// sin/cos, accurate to ~1e-7). The output therefore depends on (preset, seed, dtype) and never on
// the thread count, and chunks fill in parallel with kiln::parallel_for. Values are generated straight into the output dtype, so memory peaks at one
// copy of the weights.
//
// Presets (all Qwen3, vocab 151,936, max_position_embeddings 40,960, rope_theta 1e6, eps 1e-6,
// tied embeddings):
//   qwen3-0.6b  hidden 1024, intermediate 3072, 28 layers, 16 heads, 8 kv heads, head_dim 128
//   qwen3-1.7b  hidden 2048, intermediate 6144, 28 layers, 16 heads, 8 kv heads, head_dim 128
//   small       hidden 256,  intermediate 768,  4 layers,  4 heads,  2 kv heads, head_dim 64
//   tiny        hidden 64,   intermediate 160,  2 layers,  4 heads,  2 kv heads, head_dim 16
//
// Example:
//   auto made = kiln::models::create_model("/tmp/m", "tiny", /*seed=*/0, kiln::DType::bf16, "");
//   auto cfg = kiln::models::ModelConfig::from_pretrained("/tmp/m");
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"
#include "kiln/io/json.h"
#include "kiln/models/config.h"

namespace kiln::models {

struct CreatedModel {
  std::string dir;
  ModelConfig config;          // config.json as written, read back
  int64_t num_parameters = 0;  // tied embeddings counted once
  uint64_t weight_bytes = 0;   // size of model.safetensors
  std::vector<std::string> files;  // file names written into dir
};

// The preset names, in the order listed above.
std::vector<std::string> model_presets();

// config.json for a preset, as Transformers' Qwen3Config writes it. kiln::Error("preset") listing
// the presets when the name is unknown.
io::Json preset_config_json(const std::string& preset, DType dtype);

// Every tensor of Qwen3ForCausalLM for `config`, in module order, filled as described above.
// dtype must be f32, bf16 or f16 (kiln::Error("dtype") otherwise).
std::vector<std::pair<std::string, Tensor>> random_weights(const ModelConfig& config,
                                                           uint64_t seed,
                                                           DType dtype);

// Writes the checkpoint (see the top of this file). tokenizer_dir may be empty; when given it must
// hold tokenizer.json (kiln::Error naming the path otherwise). An out_dir that already holds a
// sharded index (model.safetensors.index.json) is refused, since loaders would prefer it.
CreatedModel create_model(const std::string& out_dir,
                          const std::string& preset,
                          uint64_t seed = 0,
                          DType dtype = DType::bf16,
                          const std::string& tokenizer_dir = "");

}  // namespace kiln::models
