#include "kiln/tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/tokenizer/jinja/template.h"

namespace kiln::tokenizer {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::Error(path.string(), "cannot read file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::ordered_json read_json(const fs::path& path) {
  std::string text = read_text(path);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw kiln::Error(path.string(), std::string("invalid JSON: ") + e.what());
  }
}

// A special token in tokenizer_config.json: a string, an AddedToken object {"content": ...}, or
// null.
std::optional<std::string> token_string(const nlohmann::ordered_json& cfg, const std::string& key,
                                        const std::string& where) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw kiln::Error(where + ": " + key, "expected a string or an object with \"content\"");
}

}  // namespace

ChatTemplateConfig load_chat_template_config(const std::string& dir) {
  fs::path root(dir);
  if (!fs::is_directory(root)) throw kiln::Error(dir, "not a folder");
  ChatTemplateConfig cfg;
  cfg.special_tokens = nlohmann::ordered_json::object();
  fs::path config_path = root / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    nlohmann::ordered_json j = read_json(config_path);
    const std::string where = config_path.string();
    if (!j.is_object()) throw kiln::Error(where, "expected a JSON object");
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
      if (auto s = token_string(j, key, where)) cfg.special_tokens[key] = *s;
    }
    auto extra = j.find("additional_special_tokens");
    if (extra != j.end() && extra->is_array()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (size_t i = 0; i < extra->size(); ++i) {
        const auto& t = (*extra)[i];
        if (t.is_string()) {
          list.push_back(t);
        } else if (t.is_object() && t.contains("content") && t["content"].is_string()) {
          list.push_back(t["content"]);
        }
      }
      cfg.special_tokens["additional_special_tokens"] = list;
    }
    cfg.bos_token = cfg.special_tokens.value("bos_token", "");
    cfg.eos_token = cfg.special_tokens.value("eos_token", "");
    auto ct = j.find("chat_template");
    if (ct != j.end() && !ct->is_null()) {
      cfg.where = where;
      if (ct->is_string()) {
        cfg.source = ct->get<std::string>();
      } else if (ct->is_array()) {
        // Named templates: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
        for (const auto& entry : *ct) {
          if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
              !entry["name"].is_string() || !entry["template"].is_string())
            throw kiln::Error(where + ": chat_template", "list entries need string \"name\" and \"template\"");
          std::string name = entry["name"].get<std::string>();
          if (name == "default") cfg.source = entry["template"].get<std::string>();
          if (name == "tool_use") cfg.tool_use_source = entry["template"].get<std::string>();
        }
        if (cfg.source.empty() && cfg.tool_use_source.empty())
          throw kiln::Error(where + ": chat_template", "no template named \"default\"");
      } else {
        throw kiln::Error(where + ": chat_template", "expected a string or a list of named templates");
      }
    }
  }
  // Newer Transformers save the template beside the config; it takes precedence.
  fs::path jinja_path = root / "chat_template.jinja";
  fs::path json_path = root / "chat_template.json";
  if (fs::exists(jinja_path)) {
    cfg.source = read_text(jinja_path);
    cfg.tool_use_source.clear();
    cfg.where = jinja_path.string();
  } else if (cfg.source.empty() && cfg.tool_use_source.empty() && fs::exists(json_path)) {
    nlohmann::ordered_json j = read_json(json_path);
    if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string())
      throw kiln::Error(json_path.string(), "expected {\"chat_template\": \"...\"}");
    cfg.source = j["chat_template"].get<std::string>();
    cfg.where = json_path.string();
  }
  if (cfg.source.empty() && cfg.tool_use_source.empty())
    throw kiln::Error(dir, "no chat template (looked for chat_template.jinja, tokenizer_config.json's "
                           "\"chat_template\" and chat_template.json)");
  return cfg;
}

std::string apply_chat_template(const ChatTemplateConfig& config,
                                const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options) {
  if (!messages.is_array()) throw kiln::Error("messages", "expected a JSON array of messages");
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object())
      throw kiln::Error("messages[" + std::to_string(i) + "]", "expected an object");
  if (!options.tools.is_null() && !options.tools.is_array())
    throw kiln::Error("tools", "expected a JSON array of tool schemas");
  if (!options.extra_kwargs.is_null() && !options.extra_kwargs.is_object())
    throw kiln::Error("extra_kwargs", "expected a JSON object");

  // The variables Transformers passes: special tokens, then the call's own kwargs.
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (config.special_tokens.is_object())
    for (auto it = config.special_tokens.begin(); it != config.special_tokens.end(); ++it)
      ctx[it.key()] = it.value();
  if (!config.bos_token.empty()) ctx["bos_token"] = config.bos_token;
  if (!config.eos_token.empty()) ctx["eos_token"] = config.eos_token;
  if (options.extra_kwargs.is_object())
    for (auto it = options.extra_kwargs.begin(); it != options.extra_kwargs.end(); ++it) {
      const std::string& k = it.key();
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        throw kiln::Error("extra_kwargs: " + k, "is passed by its own option, not as an extra kwarg");
      ctx[k] = it.value();
    }
  ctx["messages"] = messages;
  ctx["tools"] = options.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = options.add_generation_prompt;

  const std::string& source =
      (!options.tools.is_null() && !config.tool_use_source.empty()) || config.source.empty()
          ? config.tool_use_source
          : config.source;
  return jinja::render(source, ctx, config.where.empty() ? "chat_template" : config.where);
}

}  // namespace kiln::tokenizer
