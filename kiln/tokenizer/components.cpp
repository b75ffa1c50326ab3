#include "kiln/tokenizer/components.h"

#include "kiln/core/error.h"

namespace kiln::tokenizer {

std::string component_type(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where, "expected an object with a \"type\"");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) throw Error(where + ".type", "missing or not a string");
  return it->get<std::string>();
}

std::string json_string(const nlohmann::json& j, const char* field, const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string())
    throw Error(where + "." + field, "expected a string");
  return it->get<std::string>();
}

bool json_bool_or(const nlohmann::json& j, const char* field, bool fallback,
                  const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(where + "." + field, "expected true or false");
  return it->get<bool>();
}

int64_t json_int_or(const nlohmann::json& j, const char* field, int64_t fallback,
                    const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw Error(where + "." + field, "expected an integer");
  return it->get<int64_t>();
}

std::string string_pattern(const nlohmann::json& j, const std::string& where) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) throw Error(where + ".pattern", "expected an object");
  if (it->contains("String") && (*it)["String"].is_string()) {
    std::string s = (*it)["String"].get<std::string>();
    return s;
  }
  if (it->contains("Regex"))
    throw Error(where + ".pattern",
                "Regex pattern " + (*it)["Regex"].dump() + " is not supported by kiln here");
  throw Error(where + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (true) {
    size_t k = s.find(from, i);
    if (k == std::string_view::npos) break;
    out.append(s.substr(i, k - i));
    out.append(to);
    i = k + from.size();
  }
  out.append(s.substr(i));
  return out;
}

}  // namespace kiln::tokenizer
