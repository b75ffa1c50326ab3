// kiln apply-chat-template MODEL_DIR --messages FILE.json [--add-generation-prompt]
//                          [--tools FILE.json] [--kwargs JSON]
// Prints the rendered prompt exactly as Transformers' apply_chat_template(tokenize=False) returns
// it, and nothing else (no trailing newline). --kwargs may also carry add_generation_prompt and
// tools, so a row of kwargs from a golden file can be passed as is.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/tokenizer/chat_template.h"
#include "tools/cli/command.h"

namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::Error(option + " " + path, "cannot read file");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw kiln::Error(option + " " + path, std::string("invalid JSON: ") + e.what());
  }
}

struct ApplyChatTemplateArgs {
  std::string model_dir;
  std::string messages_path;
  std::string tools_path;
  std::string kwargs;
  bool add_generation_prompt = false;
};

kiln::cli::CommandRun setup(CLI::App& cmd) {
  auto a = std::make_shared<ApplyChatTemplateArgs>();
  cmd.add_option("MODEL_DIR", a->model_dir, "Model or tokenizer folder")->required();
  cmd.add_option("--messages", a->messages_path, "JSON file with the list of messages")->required();
  cmd.add_flag("--add-generation-prompt", a->add_generation_prompt, "Open an assistant turn");
  cmd.add_option("--tools", a->tools_path, "JSON file with the list of tool schemas");
  cmd.add_option("--kwargs", a->kwargs, "JSON object of extra template variables");
  return [a] {
    kiln::tokenizer::ChatTemplateConfig cfg = kiln::tokenizer::load_chat_template_config(a->model_dir);
    nlohmann::ordered_json messages = read_json_file(a->messages_path, "--messages");
    kiln::tokenizer::ChatTemplateOptions opts;
    opts.add_generation_prompt = a->add_generation_prompt;
    if (!a->tools_path.empty()) opts.tools = read_json_file(a->tools_path, "--tools");
    if (!a->kwargs.empty()) {
      nlohmann::ordered_json kw;
      try {
        kw = nlohmann::ordered_json::parse(a->kwargs);
      } catch (const nlohmann::json::exception& e) {
        throw kiln::Error("--kwargs", std::string("invalid JSON: ") + e.what());
      }
      if (!kw.is_object()) throw kiln::Error("--kwargs", "expected a JSON object");
      if (kw.contains("add_generation_prompt")) {
        if (!kw["add_generation_prompt"].is_boolean())
          throw kiln::Error("--kwargs: add_generation_prompt", "expected true or false");
        opts.add_generation_prompt = opts.add_generation_prompt || kw["add_generation_prompt"].get<bool>();
        kw.erase("add_generation_prompt");
      }
      if (kw.contains("tools")) {
        if (!a->tools_path.empty()) throw kiln::Error("--kwargs: tools", "given twice (also --tools)");
        opts.tools = kw["tools"];
        kw.erase("tools");
      }
      opts.extra_kwargs = std::move(kw);
    }
    std::string prompt = kiln::tokenizer::apply_chat_template(cfg, messages, opts);
    std::cout.write(prompt.data(), static_cast<std::streamsize>(prompt.size()));
    std::cout.flush();
    return 0;
  };
}

kiln::cli::CommandRegistrar registrar("apply-chat-template",
                                      "Render a chat with the model's chat template", setup);

}  // namespace
