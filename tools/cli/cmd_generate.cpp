// kiln generate MODEL_DIR [PROMPT] ...: text generation with the compiled static-cache loop.
#include <fstream>
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/core/memory.h"
#include "kiln/generation/generate.h"
#include "kiln/tokenizer/decode_stream.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

struct GenerateFlags {
  std::string model_dir, prompt, prompt_ids, prompts_file;
  kiln::cli::SamplingFlags sampling;
  std::vector<std::string> stop;
  kiln::cli::ModelFlags model;
  bool stats = false, json = false;
};

struct Row {
  std::vector<int32_t> prompt_ids;
};

std::vector<Row> read_rows(const GenerateFlags& f, kiln::tokenizer::Tokenizer* tok) {
  auto encode = [&](const std::string& text, const std::string& where) {
    if (!tok)
      throw kiln::Error(where, "text prompts need a tokenizer.json in " + f.model_dir +
                                   " (or pass token ids)");
    auto ids = tok->encode(text);
    if (ids.empty()) throw kiln::Error(where, "the prompt encodes to no tokens");
    return ids;
  };
  std::vector<Row> rows;
  if (!f.prompts_file.empty()) {
    std::ifstream in(f.prompts_file);
    if (!in) throw kiln::Error(f.prompts_file, "cannot open prompts file");
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = f.prompts_file + ":" + std::to_string(line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw kiln::Error(where, std::string("not a JSON object: ") + e.what());
      }
      if (j.is_object() && j.contains("prompt_ids") && j["prompt_ids"].is_array()) {
        Row r;
        for (const auto& v : j["prompt_ids"]) {
          if (!v.is_number_integer()) throw kiln::Error(where + ": prompt_ids", "expected integers");
          r.prompt_ids.push_back(v.get<int32_t>());
        }
        if (r.prompt_ids.empty()) throw kiln::Error(where + ": prompt_ids", "empty");
        rows.push_back(r);
      } else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
        rows.push_back({encode(j["prompt"].get<std::string>(), where + ": prompt")});
      } else {
        throw kiln::Error(where, "each line needs \"prompt\" (a string) or \"prompt_ids\"");
      }
    }
    if (rows.empty()) throw kiln::Error(f.prompts_file, "no prompts in file");
  } else if (!f.prompt_ids.empty()) {
    rows.push_back({kiln::cli::parse_ids(f.prompt_ids, "--prompt-ids")});
  } else if (!f.prompt.empty()) {
    rows.push_back({encode(f.prompt, "PROMPT")});
  } else {
    throw kiln::Error("PROMPT", "give a prompt, --prompt-ids or --prompts-file");
  }
  return rows;
}

}  // namespace

KILN_COMMAND(generate, "Generate text from a prompt") {
  auto f = std::make_shared<GenerateFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder (config.json, model.safetensors)")
      ->required();
  cmd.add_option("PROMPT", f->prompt, "Prompt text (encoded with the folder's tokenizer)");
  cmd.add_option("--prompt-ids", f->prompt_ids, "Prompt as token ids: 1,2,3");
  cmd.add_option("--prompts-file", f->prompts_file,
                 "JSON lines with \"prompt\" or \"prompt_ids\", generated as one batch");
  kiln::cli::add_sampling_flags(cmd, f->sampling);
  cmd.add_option("--stop", f->stop, "Stop string (repeatable)");
  kiln::cli::add_model_flags(cmd, f->model);
  cmd.add_flag("--stats", f->stats, "Print speed and compile counters");
  cmd.add_flag("--json", f->json, "Print one JSON object (one per row with --prompts-file)");
  return [f]() -> int {
    auto model = kiln::cli::load_model(f->model_dir, f->model);
    auto tok = kiln::cli::load_tokenizer_if_present(f->model_dir);
    auto rows = read_rows(*f, tok.get());

    auto cfg = kiln::cli::generation_config_from_flags(f->model_dir, *model, f->sampling);
    cfg.stop_strings = f->stop;
    if (!cfg.stop_strings.empty() && !tok)
      throw kiln::Error("--stop", "stop strings need a tokenizer.json in " + f->model_dir);

    kiln::generation::GenerateOptions opts;
    if (tok) opts.decode = [tok](std::span<const int32_t> ids) { return tok->decode(ids); };
    // Plain single-prompt output streams as tokens arrive, holding back incomplete UTF-8.
    const bool stream = !f->json && rows.size() == 1 && tok;
    std::unique_ptr<kiln::tokenizer::DecodeStream> streamer;
    if (stream) {
      streamer = std::make_unique<kiln::tokenizer::DecodeStream>(
          tok, kiln::tokenizer::DecodeOptions{.skip_special_tokens = true});
      opts.on_token = [&](int64_t, int32_t id) { std::cout << streamer->step(id) << std::flush; };
    }
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& r : rows) prompts.push_back(r.prompt_ids);
    auto out = kiln::generation::generate(*model, prompts, cfg, opts);

    nlohmann::json stats = {
        {"prefill_tokens_per_s", out.stats.prefill_tokens_per_s()},
        {"decode_tokens_per_s", out.stats.decode_tokens_per_s()},
        {"prompt_tokens", out.stats.prompt_tokens},
        {"new_tokens", out.stats.new_tokens},
        {"prompt_bucket", out.stats.bucket},
        {"cache_len", out.stats.cache_len},
        {"compiles", kiln::cli::compile_stats_json(*model)},
        {"peak_rss_bytes", kiln::peak_rss_bytes()}};
    if (f->json) {
      for (size_t i = 0; i < rows.size(); ++i) {
        nlohmann::json j = {{"prompt_ids", rows[i].prompt_ids},
                            {"output_ids", out.new_tokens[i]},
                            {"stop_reason", kiln::generation::stop_reason_name(out.stop_reasons[i])},
                            {"stats", stats}};
        j["text"] = tok ? nlohmann::json(tok->decode(out.new_tokens[i], {.skip_special_tokens = true}))
                        : nlohmann::json(nullptr);
        std::cout << j.dump() << "\n";
      }
      return 0;
    }
    if (stream) {
      std::cout << streamer->flush() << "\n" << std::flush;
    } else {
      for (size_t i = 0; i < rows.size(); ++i) {
        if (tok)
          std::cout << tok->decode(out.new_tokens[i], {.skip_special_tokens = true}) << "\n";
        else
          for (size_t k = 0; k < out.new_tokens[i].size(); ++k)
            std::cout << (k ? "," : "") << out.new_tokens[i][k] << (k + 1 == out.new_tokens[i].size() ? "\n" : "");
      }
    }
    if (f->stats) std::cerr << "stats: " << stats.dump() << "\n";
    return 0;
  };
}
