#include "kiln/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace kiln::tokenizer::jinja {

// Note [Value depth]: containers record their nesting depth when built and refuse to exceed
// Limits::max_depth, so recursive walks and destructors stay shallow. Namespaces are the only
// mutable containers; they refuse values that reach a namespace, so reference cycles cannot form.

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple, const Budget& budget) {
  auto obj = std::make_shared<ListObj>();
  int depth = 0;
  bool ns = false;
  for (const auto& it : items) {
    depth = std::max(depth, it.depth());
    ns = ns || it.has_namespace();
  }
  obj->depth = depth + 1;
  budget.check_depth(obj->depth);
  obj->has_namespace = ns;
  obj->is_tuple = is_tuple;
  obj->items = std::move(items);
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::move(obj);
  return v;
}

Value Value::make_dict(std::vector<std::pair<std::string, Value>> items, bool is_ns,
                       const Budget& budget) {
  auto obj = std::make_shared<DictObj>();
  obj->is_namespace = is_ns;
  obj->has_namespace = is_ns;
  int depth = 0;
  for (auto& [k, v] : items) {
    if (is_ns && v.has_namespace()) throw TemplateError("a namespace cannot hold a namespace");
    depth = std::max(depth, v.depth());
    obj->has_namespace = obj->has_namespace || v.has_namespace();
    obj->set(k, std::move(v));
  }
  obj->depth = depth + 1;
  budget.check_depth(obj->depth);
  Value out;
  out.kind_ = Kind::kDict;
  out.dict_ = std::move(obj);
  return out;
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items, const Budget& budget) {
  return make_dict(std::move(items), false, budget);
}
Value Value::namespace_(std::vector<std::pair<std::string, Value>> items, const Budget& budget) {
  return make_dict(std::move(items), true, budget);
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<FunctionObj>(FunctionObj{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, const Budget& budget, int depth) {
  using T = nlohmann::ordered_json::value_t;
  budget.check_depth(depth);
  switch (j.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(j.get<bool>());
    case T::number_integer:
      return integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return floating(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return floating(j.get<double>());
    case T::string:
      return string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, budget, depth + 1));
      return list(std::move(items), false, budget);
    }
    case T::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), from_json(it.value(), budget, depth + 1));
      return dict(std::move(items), budget);
    }
    default:
      throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

bool Value::is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }
bool Value::is_tuple() const { return kind_ == Kind::kList && list_->is_tuple; }
double Value::as_double() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(as_int());
}
const std::vector<Value>& Value::items() const { return list_->items; }
int Value::depth() const {
  if (kind_ == Kind::kList) return list_->depth;
  if (kind_ == Kind::kDict) return dict_->depth;
  return 0;
}
bool Value::has_namespace() const {
  if (kind_ == Kind::kList) return list_->has_namespace;
  if (kind_ == Kind::kDict) return dict_->has_namespace;
  return false;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

void Value::throw_undefined() const {
  throw TemplateError(s_ && !s_->empty() ? *s_ : std::string("value is undefined"));
}

const Value* DictObj::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void DictObj::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

// ---- comparison ----

bool equals(const Value& a, const Value& b, Budget& budget, int depth) {
  budget.step();
  budget.check_depth(depth);
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      if (&a.list_obj() == &b.list_obj()) return true;
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i], budget, depth + 1)) return false;
      return true;
    }
    case K::kDict: {
      if (&a.dict_obj() == &b.dict_obj()) return true;
      if (a.is_namespace() || b.is_namespace()) return false;
      const auto& x = a.dict_obj().items;
      if (x.size() != b.dict_obj().items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = b.dict_obj().find(k);
        if (!w || !equals(v, *w, budget, depth + 1)) return false;
      }
      return true;
    }
    case K::kFunction:
      return &a.function_obj() == &b.function_obj();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, Budget& budget, int depth) {
  budget.step();
  budget.check_depth(depth);
  if (a.is_undefined()) a.throw_undefined();
  if (b.is_undefined()) b.throw_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i], budget, depth + 1)) return compare(x[i], y[i], budget, depth + 1);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError(std::string("comparison not supported between instances of '") +
                      a.type_name() + "' and '" + b.type_name() + "'");
}

// ---- printing ----

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02", shortest round trip
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp10 = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  int decpt = exp10 + 1;  // position of the decimal point relative to the digits
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  }
  return out;
}

static void check_size(const std::string& out, Budget& budget) {
  if (out.size() > budget.limits().max_output_bytes)
    throw TemplateError("template output exceeded the limit of " +
                        std::to_string(budget.limits().max_output_bytes) + " bytes");
}

static void append_py_str_repr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  out += q;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += q;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               (static_cast<unsigned char>(s[i + 1]) <= 0xa0 ||
                static_cast<unsigned char>(s[i + 1]) == 0xad)) {
      char b[8];  // C1 controls are not printable in Python
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(s[i + 1]));
      out += b;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
}

void append_repr(std::string& out, const Value& v, Budget& budget, int depth) {
  budget.step();
  budget.check_depth(depth);
  check_size(out, budget);
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
      out += "Undefined";
      return;
    case K::kNone:
      out += "None";
      return;
    case K::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case K::kInt:
      out += std::to_string(v.as_int());
      return;
    case K::kFloat:
      out += python_float_repr(v.as_double());
      return;
    case K::kString:
      append_py_str_repr(out, v.str());
      return;
    case K::kList: {
      const auto& items = v.items();
      out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, items[i], budget, depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      return;
    }
    case K::kDict: {
      if (v.is_namespace()) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict_obj().items) {
        if (!first) out += ", ";
        first = false;
        append_py_str_repr(out, k);
        out += ": ";
        append_repr(out, x, budget, depth + 1);
      }
      out += '}';
      if (v.is_namespace()) out += '>';
      return;
    }
    case K::kFunction:
      out += "<function " + v.function_obj().name + ">";
      return;
  }
}

void append_str(std::string& out, const Value& v, Budget& budget) {
  if (v.is_undefined()) return;
  if (v.is_string()) {
    out += v.str();
    check_size(out, budget);
    return;
  }
  append_repr(out, v, budget);
  check_size(out, budget);
}

std::string to_str(const Value& v, Budget& budget) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v, budget);
  return out;
}

// ---- JSON ----

static uint32_t decode_utf8(const std::string& s, size_t pos, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + static_cast<size_t>(n) > s.size()) {
    *len = 1;
    return c;  // invalid byte: stands for itself
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int i = 1; i < n; ++i) {
    unsigned char d = static_cast<unsigned char>(s[pos + static_cast<size_t>(i)]);
    if ((d >> 6) != 2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

static void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char b[16];
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20) {
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else if (c >= 0x80 && ensure_ascii) {
      size_t len = 1;
      uint32_t cp = decode_utf8(s, i, &len);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
      i += len;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

static void append_json(std::string& out, const Value& v, const JsonOptions& o, Budget& budget,
                        int depth) {
  budget.step();
  budget.check_depth(depth);
  check_size(out, budget);
  using K = Value::Kind;
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case K::kNone:
      out += "null";
      return;
    case K::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case K::kInt:
      out += std::to_string(v.as_int());
      return;
    case K::kFloat: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += python_float_repr(d);
      return;
    }
    case K::kString:
      append_json_string(out, v.str(), o.ensure_ascii);
      return;
    case K::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      newline(depth + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o.item_separator;
          newline(depth + 1);
        }
        append_json(out, items[i], o, budget, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case K::kDict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict_obj().items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      newline(depth + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o.item_separator;
          newline(depth + 1);
        }
        append_json_string(out, items[i]->first, o.ensure_ascii);
        out += o.key_separator;
        append_json(out, items[i]->second, o, budget, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw TemplateError(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
}

std::string to_json(const Value& v, const JsonOptions& options, Budget& budget) {
  std::string out;
  append_json(out, v, options, budget, 0);
  check_size(out, budget);
  return out;
}

// ---- UTF-8 ----

size_t utf8_next(const std::string& s, size_t pos) {
  size_t len = 1;
  decode_utf8(s, pos, &len);
  return pos + len;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = utf8_next(s, i);
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i)) ++n;
  return n;
}

bool is_py_space(const std::string& s, size_t pos, size_t* len) {
  uint32_t cp = decode_utf8(s, pos, len);
  if (*len == 1 && static_cast<unsigned char>(s[pos]) >= 0x80) return false;
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

}  // namespace kiln::tokenizer::jinja
