#include "kiln/io/json.h"

#include <cmath>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln::io {

std::string json_error_position(const std::string& text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(where, "invalid JSON at " + json_error_position(text, e.byte) + ": " + e.what());
  } catch (const Json::exception& e) {  // e.g. a number too large for any JSON number type
    throw Error(where, std::string("invalid JSON: ") + e.what());
  }
}

Json load_json(const std::string& path) { return parse_json(read_file(path), path); }

namespace {
const Json& field_of(const Json& j, const std::string& field, const std::string& where) {
  if (!j.is_object()) throw Error(where, "expected a JSON object");
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) throw Error(where + ": " + field, "required field is missing");
  return *it;
}
[[noreturn]] void wrong_type(const std::string& where, const std::string& field, const char* want,
                             const Json& v) {
  throw Error(where + ": " + field,
              std::string("expected ") + want + ", got " + v.type_name() + " " + v.dump());
}
bool has(const Json& j, const std::string& field) {
  return j.is_object() && j.contains(field) && !j.at(field).is_null();
}
}  // namespace

std::optional<int64_t> as_int64(const Json& v) {
  if (v.is_number_unsigned()) {  // above INT64_MAX it would wrap
    if (v.get<uint64_t>() <= uint64_t(INT64_MAX)) return int64_t(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    return v.get<int64_t>();
  } else if (v.is_number_float()) {
    // fuzz_config found 1.6e27 here; 2^63 itself is just outside the range.
    const double d = v.get<double>();
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == std::floor(d))
      return int64_t(d);
  }
  return std::nullopt;
}

int64_t get_int(const Json& j, const std::string& field, const std::string& where) {
  const Json& v = field_of(j, field, where);
  if (auto i = as_int64(v)) return *i;
  wrong_type(where, field, "an integer", v);
}

double get_double(const Json& j, const std::string& field, const std::string& where) {
  const Json& v = field_of(j, field, where);
  if (!v.is_number()) wrong_type(where, field, "a number", v);
  return v.get<double>();
}

bool get_bool(const Json& j, const std::string& field, const std::string& where) {
  const Json& v = field_of(j, field, where);
  if (!v.is_boolean()) wrong_type(where, field, "true or false", v);
  return v.get<bool>();
}

std::string get_string(const Json& j, const std::string& field, const std::string& where) {
  const Json& v = field_of(j, field, where);
  if (!v.is_string()) wrong_type(where, field, "a string", v);
  return v.get<std::string>();
}

int64_t get_int_or(const Json& j, const std::string& field, int64_t fallback, const std::string& where) {
  return has(j, field) ? get_int(j, field, where) : fallback;
}
double get_double_or(const Json& j, const std::string& field, double fallback, const std::string& where) {
  return has(j, field) ? get_double(j, field, where) : fallback;
}
bool get_bool_or(const Json& j, const std::string& field, bool fallback, const std::string& where) {
  return has(j, field) ? get_bool(j, field, where) : fallback;
}
std::string get_string_or(const Json& j, const std::string& field, const std::string& fallback,
                          const std::string& where) {
  return has(j, field) ? get_string(j, field, where) : fallback;
}

}  // namespace kiln::io
