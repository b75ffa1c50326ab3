// JSON I/O on nlohmann::json, with errors that name the file and field.
//
// Example:
//   nlohmann::json cfg = kiln::io::load_json(dir + "/config.json");
//   int64_t h = kiln::io::get_int(cfg, "hidden_size", "config.json");
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln::io {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

Json load_json(const std::string& path);  // kiln::Error naming the file, with line and column
Json parse_json(const std::string& text, const std::string& where);
// "line L, column C" of the character at nlohmann's 1-based byte position of a parse error (the
// `byte` of json::parse_error, or the position a SAX handler's parse_error gets).
std::string json_error_position(const std::string& text, size_t byte);

// Field accessors: a missing field or one of the wrong type is kiln::Error("<where>: <field>").
// v as an int64 if it is a whole number in int64's range (an integer, or a float such as 4.0),
// else nullopt. Converting a float outside the range is undefined behaviour, hence the check.
std::optional<int64_t> as_int64(const Json& v);
int64_t get_int(const Json& j, const std::string& field, const std::string& where);
double get_double(const Json& j, const std::string& field, const std::string& where);
bool get_bool(const Json& j, const std::string& field, const std::string& where);
std::string get_string(const Json& j, const std::string& field, const std::string& where);
// Optional variants return `fallback` when the field is absent or null.
int64_t get_int_or(const Json& j, const std::string& field, int64_t fallback, const std::string& where);
double get_double_or(const Json& j, const std::string& field, double fallback, const std::string& where);
bool get_bool_or(const Json& j, const std::string& field, bool fallback, const std::string& where);
std::string get_string_or(const Json& j, const std::string& field, const std::string& fallback,
                          const std::string& where);

}  // namespace kiln::io
