// kiln create-model OUT_DIR --preset qwen3-0.6b|qwen3-1.7b|small|tiny [--seed S]
//                   [--dtype bf16|f32|f16] [--tokenizer DIR]
// A random-weight Qwen3 checkpoint in Transformers' format, for tests and benchmarks.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/models/create_model.h"
#include "tools/cli/command.h"

namespace {

struct CreateModelArgs {
  std::string out_dir;
  std::string preset;
  uint64_t seed = 0;
  std::string dtype = "bf16";
  std::string tokenizer;
};

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ull << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  return buf;
}

kiln::cli::CommandRun setup_create_model(CLI::App& cmd) {
  auto args = std::make_shared<CreateModelArgs>();
  std::string presets;
  for (const auto& p : kiln::models::model_presets()) presets += (presets.empty() ? "" : "|") + p;
  cmd.add_option("OUT_DIR", args->out_dir, "Folder to write the checkpoint into")->required();
  cmd.add_option("--preset", args->preset, "Model shape: " + presets)->required();
  cmd.add_option("--seed", args->seed, "Seed of the random weights (default 0)");
  cmd.add_option("--dtype", args->dtype, "Weight dtype: bf16 (default), f32 or f16");
  cmd.add_option("--tokenizer", args->tokenizer,
                 "Copy tokenizer.json and tokenizer_config.json from this folder");
  return [args] {
    const kiln::DType dtype = kiln::parse_dtype(args->dtype, "--dtype");
    const auto t0 = std::chrono::steady_clock::now();
    kiln::models::CreatedModel made;
    try {
      made = kiln::models::create_model(args->out_dir, args->preset, args->seed, dtype,
                                        args->tokenizer);
    } catch (const kiln::Error& e) {
      if (e.where() != "preset") throw;
      throw kiln::Error("--preset", std::string(e.what()).substr(e.where().size() + 3));
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& c = made.config;
    std::cout << "Created " << made.dir << ": a Qwen3 checkpoint with RANDOM weights (preset "
              << args->preset << ", seed " << args->seed << ").\n"
              << "  This is NOT a trained model: it is for tests and benchmarks, and its text is "
                 "meaningless.\n"
              << "  shape       hidden " << c.hidden_size << ", intermediate "
              << c.intermediate_size << ", " << c.num_hidden_layers << " layers, "
              << c.num_attention_heads << " heads (" << c.num_key_value_heads
              << " kv), head_dim " << c.head_dim << ", vocab " << c.vocab_size
              << (c.tie_word_embeddings ? ", tied embeddings" : "") << "\n"
              << "  parameters  " << made.num_parameters << "\n"
              << "  weights     " << kiln::dtype_name(dtype) << ", " << made.weight_bytes
              << " bytes (" << human_bytes(made.weight_bytes) << ") in model.safetensors\n"
              << "  files      ";
    for (const auto& f : made.files) std::cout << " " << f;
    std::cout << "\n";
    if (args->tokenizer.empty())
      std::cout << "  tokenizer   none copied (pass --tokenizer DIR to include one)\n";
    std::printf("  took        %.2f s\n", secs);
    return 0;
  };
}

// Registered by hand: the subcommand's name has a '-', which KILN_COMMAND's identifier cannot.
const kiln::cli::CommandRegistrar create_model_registrar(
    "create-model", "Write a random-weight Qwen3 checkpoint (for tests and benchmarks)",
    setup_create_model);

}  // namespace
