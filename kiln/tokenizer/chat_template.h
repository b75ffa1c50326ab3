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
  // Added to the contract: what Transformers also passes to templates.
  std::string tool_use_source;  // the "tool_use" named template, used when tools are given
  nlohmann::ordered_json special_tokens;  // {"bos_token": ..., "pad_token": ..., ...} as strings
};

// Reads the chat template and special-token strings from a model or tokenizer folder:
// chat_template.jinja if present (newer Transformers), else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} using "default"), else
// chat_template.json. Special tokens may be strings or {"content": ...} objects. A folder without
// a template is a kiln::Error naming the folder.
ChatTemplateConfig load_chat_template_config(const std::string& dir);

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;         // null when absent, else an array of tool schemas
  nlohmann::ordered_json extra_kwargs;  // object of extra template variables (enable_thinking, ...)
};

// messages: array of {"role", "content", ...} objects, key order preserved (tojson keeps it).
// The template sees what Transformers passes: messages, tools (None when absent), documents
// (None), add_generation_prompt, the special tokens, and extra_kwargs. Template errors
// (raise_exception, syntax, limits) are kiln::Error("<where>:<line>", message).
std::string apply_chat_template(const ChatTemplateConfig& config,
                                const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options = {});

}  // namespace kiln::tokenizer
