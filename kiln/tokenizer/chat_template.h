// Chat templates: the Jinja `chat_template` of tokenizer_config.json, rendered as Transformers renders
// it (jinja2 with trim_blocks and lstrip_blocks). Templates come from untrusted model folders: the
// renderer does no I/O, sees only the data it is given, and stops with kiln::Error past limits on loop
// iterations, recursion depth and output size.
//
// Example:
//   auto cfg = kiln::tokenizer::load_chat_template_config(dir);
//   std::string prompt = kiln::tokenizer::apply_chat_template(cfg, messages, {.add_generation_prompt = true});
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kiln::tokenizer {

// What rendering needs from tokenizer_config.json (or chat_template.jinja / chat_template.json).
struct ChatTemplateConfig {
  std::string source;     // the Jinja template text
  std::string bos_token;  // as a string ("" if none)
  std::string eos_token;
  std::string where;      // file the template came from, for error messages
};

// Reads the chat template and special-token strings from a model or tokenizer folder.
ChatTemplateConfig load_chat_template_config(const std::string& dir);

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;         // null when absent, else an array of tool schemas
  nlohmann::ordered_json extra_kwargs;  // object of extra template variables (enable_thinking, ...)
};

// messages: array of {"role", "content", ...} objects, key order preserved (tojson keeps it).
std::string apply_chat_template(const ChatTemplateConfig& config,
                                const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options = {});

}  // namespace kiln::tokenizer
