// kiln chat MODEL_DIR: an interactive chat in the terminal. Keeps the conversation, renders it with
// the model's chat template, streams the answer as tokens arrive; /reset clears the conversation,
// /exit (or end of input) leaves. With --prompt it answers once and exits (scriptable).
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/generation/generate.h"
#include "kiln/tokenizer/chat_template.h"
#include "kiln/tokenizer/decode_stream.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

struct ChatFlags {
  std::string model_dir, prompt, system;
  kiln::cli::SamplingFlags sampling{.max_new_tokens = 512};
  bool no_thinking = false, stats = false;
  kiln::cli::ModelFlags model;
};

}  // namespace

KILN_COMMAND(chat, "Chat with a model in the terminal (/reset, /exit)") {
  auto f = std::make_shared<ChatFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder with tokenizer and chat template")
      ->required();
  cmd.add_option("--prompt", f->prompt, "Answer this one message and exit");
  cmd.add_option("--system", f->system, "System message");
  kiln::cli::add_sampling_flags(cmd, f->sampling);
  cmd.add_flag("--no-thinking", f->no_thinking, "Pass enable_thinking=false to the template");
  cmd.add_flag("--stats", f->stats, "Print speed after each answer");
  kiln::cli::add_model_flags(cmd, f->model);
  return [f]() -> int {
    auto model = kiln::cli::load_model(f->model_dir, f->model);
    auto tok = kiln::cli::load_tokenizer_if_present(f->model_dir);
    if (!tok) throw kiln::Error(f->model_dir, "kiln chat needs tokenizer.json in the model folder");
    auto chat_cfg = kiln::tokenizer::load_chat_template_config(f->model_dir);
    auto cfg = kiln::cli::generation_config_from_flags(f->model_dir, *model, f->sampling);
    kiln::tokenizer::ChatTemplateOptions opts;
    opts.add_generation_prompt = true;
    opts.extra_kwargs = nlohmann::ordered_json::object();
    if (f->no_thinking) opts.extra_kwargs["enable_thinking"] = false;

    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto reset = [&] {
      messages = nlohmann::ordered_json::array();
      if (!f->system.empty()) messages.push_back({{"role", "system"}, {"content", f->system}});
    };
    reset();
    auto answer = [&](const std::string& user) {
      messages.push_back({{"role", "user"}, {"content", user}});
      const std::string prompt = kiln::tokenizer::apply_chat_template(chat_cfg, messages, opts);
      auto ids = tok->encode(prompt, {.add_special_tokens = false});
      kiln::tokenizer::DecodeStream stream(tok, {.skip_special_tokens = true});
      kiln::generation::GenerateOptions gen;
      gen.on_token = [&](int64_t, int32_t id) { std::cout << stream.step(id) << std::flush; };
      auto out = kiln::generation::generate(*model, {ids}, cfg, gen);
      std::cout << stream.flush() << "\n";
      messages.push_back({{"role", "assistant"},
                          {"content", tok->decode(out.new_tokens[0], {.skip_special_tokens = true})}});
      if (f->stats)
        std::cerr << "[" << out.stats.prompt_tokens << " prompt tokens, " << out.stats.new_tokens
                  << " new; prefill " << int(out.stats.prefill_tokens_per_s()) << " tok/s, decode "
                  << int(out.stats.decode_tokens_per_s()) << " tok/s]\n";
    };
    if (!f->prompt.empty()) {
      answer(f->prompt);
      return 0;
    }
    std::cerr << "kiln chat: " << f->model_dir << " (/reset clears the conversation, /exit quits)\n";
    std::string line;
    while (true) {
      std::cout << "> " << std::flush;
      if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        reset();
        std::cout << "(conversation cleared)\n";
        continue;
      }
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      try {
        answer(line);
      } catch (const kiln::Error& e) {
        messages.erase(messages.size() - 1);  // drop the unanswered user turn
        std::cerr << "kiln: error: " << e.what() << "\n";
      }
    }
    return 0;
  };
}
