// Small helpers shared by the tokenizer.json component factories (normalizers, pre-tokenizers,
// decoders, post-processors): reading the "type" tag and typed fields with errors naming the field.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::tokenizer {

// j["type"] as a string; kiln::Error naming `where` otherwise.
std::string component_type(const nlohmann::json& j, const std::string& where);
std::string json_string(const nlohmann::json& j, const char* field, const std::string& where);
bool json_bool_or(const nlohmann::json& j, const char* field, bool fallback, const std::string& where);
int64_t json_int_or(const nlohmann::json& j, const char* field, int64_t fallback,
                    const std::string& where);
// j["pattern"] = {"String": s} -> s. {"Regex": r} is an Error naming the regex (callers that know
// regexes look at the pattern themselves).
std::string string_pattern(const nlohmann::json& j, const std::string& where);
// All non-overlapping occurrences of `from` replaced by `to` (from non-empty).
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace kiln::tokenizer
