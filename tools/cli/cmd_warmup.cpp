// kiln warmup MODEL_DIR [--batch B] [--max-length L] [--buckets 32,64,...] [--json]: compiles exactly
// the graphs a service with a fixed cache of L slots needs (one prefill graph per prompt bucket
// <= L - 1, one decode graph at (B, L)) and prints them. A service that runs generate() with
// GenerateOptions{.cache_len = L} and the same buckets then never compiles while serving, which strict
// mode (KILN_STRICT_COMPILE=1) enforces.
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/generation/pipeline.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

struct WarmupFlags {
  std::string model_dir, buckets;
  int64_t batch = 1;
  std::optional<int64_t> max_length;
  kiln::cli::ModelFlags model;
  bool json = false;
};

}  // namespace

KILN_COMMAND(warmup, "Compile the planned graphs of a fixed-cache service and print them") {
  auto f = std::make_shared<WarmupFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder (config.json, model.safetensors)")
      ->required();
  cmd.add_option("--batch", f->batch, "Rows per call")->capture_default_str();
  cmd.add_option("--max-length", f->max_length,
                 "Cache slots (prompt + new tokens); default min(2048, max_position_embeddings)");
  cmd.add_option("--buckets", f->buckets,
                 "Prompt length buckets, e.g. 32,64,128 (default: powers of two from 32)");
  kiln::cli::add_model_flags(cmd, f->model);
  cmd.add_flag("--json", f->json, "Print one JSON object");
  return [f]() -> int {
    if (f->batch <= 0) throw kiln::Error("--batch", "must be positive, got " + std::to_string(f->batch));
    std::vector<int64_t> buckets;
    if (!f->buckets.empty())
      for (int32_t b : kiln::cli::parse_ids(f->buckets, "--buckets")) buckets.push_back(b);
    auto model = kiln::cli::load_model(f->model_dir, f->model);
    const int64_t L = f->max_length.value_or(std::min<int64_t>(2048, model->config().max_position_embeddings));
    auto entries = kiln::generation::warmup_service(*model, f->batch, L, buckets);

    double total_ms = 0;
    for (const auto& e : entries) total_ms += e.compile_ms;
    const auto stats = model->compile_cache().stats();
    if (f->json) {
      nlohmann::json j = {{"batch", f->batch},
                          {"max_length", L},
                          {"dtype", std::string(kiln::dtype_name(model->dtype()))},
                          {"graphs", nlohmann::json::array()},
                          {"total_graphs", entries.size()},
                          {"total_compile_ms", total_ms},
                          {"compiles", kiln::cli::compile_stats_json(*model)}};
      for (const auto& e : entries)
        j["graphs"].push_back({{"function", e.function},
                               {"batch", e.batch},
                               {"seq", e.seq},
                               {"cache_len", e.cache_len},
                               {"compile_ms", e.compile_ms}});
      std::cout << j.dump() << "\n";
      return 0;
    }
    std::cout << "function\tbatch\tseq\tcache_len\tcompile_ms\n";
    std::cout.setf(std::ios::fixed);
    std::cout.precision(1);
    for (const auto& e : entries)
      std::cout << e.function << "\t" << e.batch << "\t" << e.seq << "\t" << e.cache_len << "\t"
                << e.compile_ms << "\n";
    std::cout << "total: " << entries.size() << " graphs, " << total_ms << " ms"
              << (model->compile_enabled() ? "" : " (--no-compile: eager, nothing compiled)")
              << "\nserve with a fixed cache of " << L
              << " slots (GenerateOptions.cache_len) and these buckets; KILN_STRICT_COMPILE=1 "
                 "turns any other shape into an error\n";
    return 0;
  };
}
