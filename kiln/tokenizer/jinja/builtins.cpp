// Filters, tests, methods and globals that chat templates use, with jinja2's (and Python's)
// behaviour. Each takes its arguments the way jinja2 does: positionally or by keyword.
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "kiln/tokenizer/jinja/interpreter.h"

namespace kiln::tokenizer::jinja {
namespace {

// Reads the arguments of one filter, test or function call; extra ones are errors.
class Args {
 public:
  Args(const std::string& fname, CallArgs& a) : name_(fname), a_(a), used_(a.kw.size(), false) {}
  // Argument `index` (positional) or `key` (keyword); `dflt` when absent.
  Value get(size_t index, const char* key, Value dflt = Value()) {
    for (size_t i = 0; i < a_.kw.size(); ++i)
      if (a_.kw[i].first == key) {
        used_[i] = true;
        if (index < a_.pos.size()) throw TemplateError(name_ + "() got multiple values for '" + key + "'");
        return a_.kw[i].second;
      }
    if (index < a_.pos.size()) return a_.pos[index];
    return dflt;
  }
  bool has(size_t index, const char* key) const {
    if (index < a_.pos.size()) return true;
    for (const auto& kv : a_.kw)
      if (kv.first == key) return true;
    return false;
  }
  // All checked: no more than max_pos positional arguments and no unknown keyword.
  void done(size_t max_pos) const {
    if (a_.pos.size() > max_pos)
      throw TemplateError(name_ + "() takes at most " + std::to_string(max_pos) + " argument(s)");
    for (size_t i = 0; i < a_.kw.size(); ++i)
      if (!used_[i]) throw TemplateError(name_ + "() got an unexpected keyword argument '" + a_.kw[i].first + "'");
  }
  std::vector<Value> rest(size_t from) const {
    std::vector<Value> out;
    for (size_t i = from; i < a_.pos.size(); ++i) out.push_back(a_.pos[i]);
    return out;
  }

 private:
  std::string name_;
  CallArgs& a_;
  std::vector<bool> used_;
};

const std::string& need_string(const Value& v, const std::string& what) {
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_string()) throw TemplateError(what + " expects a string, got '" + v.type_name() + "'");
  return v.str();
}

int64_t need_int(const Value& v, const std::string& what) {
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_number() || v.is_float())
    throw TemplateError(what + " expects an integer, got '" + v.type_name() + "'");
  return v.as_int();
}

std::string icu_case(const std::string& s, int mode) {  // 0 lower, 1 upper
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (mode == 0) {
    u.toLower(icu::Locale::getRoot());
  } else {
    u.toUpper(icu::Locale::getRoot());
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

UChar32 first_cp(const std::string& c) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(c);
  return u.length() ? u.char32At(0) : 0;
}

// Python's str.capitalize (first title-cased, rest lowered) and str.title.
std::string py_capitalize(const std::string& s) {
  std::vector<std::string> chars = utf8_chars(s);
  if (chars.empty()) return s;
  icu::UnicodeString first = icu::UnicodeString::fromUTF8(chars[0]);
  first.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE);
  std::string out;
  first.toUTF8String(out);
  return out + icu_case(s.substr(chars[0].size()), 0);
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const auto& c : utf8_chars(s)) {
    UChar32 cp = first_cp(c);
    bool cased = u_isUUppercase(cp) || u_isULowercase(cp) || u_istitle(cp);
    out += prev_cased ? icu_case(c, 0) : py_capitalize(c);
    prev_cased = cased;
  }
  return out;
}

// jinja2's title filter: words start after runs of [-\s({\[<].
std::string jinja_title(const std::string& s) {
  std::string out;
  bool boundary = true;
  for (const auto& c : utf8_chars(s)) {
    size_t len = 0;
    bool sep = c == "-" || c == "(" || c == "{" || c == "[" || c == "<" || is_py_space(c, 0, &len);
    if (sep) {
      out += c;
      boundary = true;
    } else {
      out += boundary ? icu_case(c, 1) : icu_case(c, 0);
      boundary = false;
    }
  }
  return out;
}

// Python str.strip/lstrip/rstrip; chars=None strips whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> cs = utf8_chars(s);
  std::vector<std::string> set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = utf8_chars(need_string(chars, "strip"));
  auto strip_it = [&](const std::string& c) {
    if (ws) {
      size_t len = 0;
      return is_py_space(c, 0, &len);
    }
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) ++b;
  if (right)
    while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    size_t i = 0, len = 0;
    while (true) {
      while (i < s.size() && is_py_space(s, i, &len)) i += len;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        // Trailing whitespace stays only when splitting stopped early (as Python does).
        out.push_back(rest);
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s, j, &len)) j = utf8_next(s, j);
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = need_string(sep, "split");
  if (d.empty()) throw TemplateError("empty separator");
  size_t i = 0;
  while (true) {
    size_t j = (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) ? std::string::npos : s.find(d, i);
    if (j == std::string::npos) {
      out.push_back(s.substr(i));
      return out;
    }
    out.push_back(s.substr(i, j - i));
    i = j + d.size();
  }
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count,
                       Budget& budget) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    std::vector<std::string> cs = utf8_chars(s);
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (i < cs.size()) out += cs[i];
      budget.alloc(rep.size());
    }
    return out;
  }
  size_t i = 0;
  while (true) {
    size_t j = (count >= 0 && done >= count) ? std::string::npos : s.find(old, i);
    if (j == std::string::npos) {
      out += s.substr(i);
      break;
    }
    out += s.substr(i, j - i);
    out += rep;
    budget.alloc(rep.size());
    ++done;
    i = j + old.size();
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    size_t j = utf8_next(s, i);
    std::string c = s.substr(i, j - i);
    bool nl = c == "\n" || c == "\r" || c == "\v" || c == "\f" || c == "\x1c" || c == "\x1d" ||
              c == "\x1e" || c == "\xc2\x85" || c == "\xe2\x80\xa8" || c == "\xe2\x80\xa9";
    if (nl) {
      if (c == "\r" && j < s.size() && s[j] == '\n') ++j;
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
    i = j;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// environment.getattr for dotted attribute paths ("a.b", "0.name") as map/selectattr use them.
Value attr_path(Interpreter& ip, const Value& item, const std::string& path) {
  Value v = item;
  size_t i = 0;
  while (true) {
    size_t j = path.find('.', i);
    std::string part = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
    v = numeric ? ip.getitem(v, Value::integer(std::stoll(part))) : ip.getitem(v, Value::string(part));
    if (j == std::string::npos) return v;
    i = j + 1;
  }
}

// printf-style formatting for `"%s" % x` and the format filter: %s %r %d %i %f %%.
std::string percent_format(Interpreter& ip, const std::string& fmt, const std::vector<Value>& args) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 >= fmt.size()) throw TemplateError("incomplete format");
    char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (k >= args.size()) throw TemplateError("not enough arguments for format string");
    const Value& a = args[k++];
    if (c == 's') {
      append_str(out, a, ip.budget());
    } else if (c == 'r') {
      append_repr(out, a, ip.budget());
    } else if (c == 'd' || c == 'i') {
      if (!a.is_number()) throw TemplateError("%d format: a real number is required");
      out += std::to_string(a.is_float() ? static_cast<int64_t>(a.as_double()) : a.as_int());
    } else if (c == 'f') {
      if (!a.is_number()) throw TemplateError("%f format: a real number is required");
      char b[64];
      std::snprintf(b, sizeof b, "%f", a.as_double());
      out += b;
    } else {
      throw TemplateError(std::string("unsupported format character '") + c + "'");
    }
  }
  if (k < args.size()) throw TemplateError("not all arguments converted during string formatting");
  return out;
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
std::string brace_format(Interpreter& ip, const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t j = fmt.find('}', i);
      if (j == std::string::npos) throw TemplateError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, j - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= a.pos.size()) throw TemplateError("Replacement index out of range");
        v = &a.pos[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), ::isdigit) && field.size() < 9) {
        size_t idx = std::stoul(field);
        if (idx >= a.pos.size()) throw TemplateError("Replacement index out of range");
        v = &a.pos[idx];
      } else {
        for (auto& kv : a.kw)
          if (kv.first == field) v = &kv.second;
        if (!v) throw TemplateError("format: no argument named '" + field + "'");
      }
      append_str(out, *v, ip.budget());
      i = j;
    } else if (c == '}') {
      throw TemplateError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

Value method(std::string name, NativeFn fn) { return Value::function(std::move(name), std::move(fn)); }

Value unsafe_method(const std::string& type, const std::string& name) {
  return method(name, [type, name](Interpreter&, CallArgs&) -> Value {
    throw TemplateError("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  });
}

Value to_int_value(const Value& v, const Value& dflt, int64_t base) {
  if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value::none(), true, true);
    std::string digits;
    for (char c : s)
      if (c != '_') digits += c;
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end && *end == 0) return Value::integer(x);
      double d = std::strtod(digits.c_str(), &end);
      if (end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
    }
  }
  return dflt;
}

std::string sort_key_str(const Value& v, bool case_sensitive) {
  return case_sensitive ? v.str() : icu_case(v.str(), 0);
}

}  // namespace

// ---- methods of str, dict and list ----

Value get_method(Interpreter&, const Value& obj, const std::string& name) {

  if (obj.is_string()) {
    Value self = obj;
    const std::string& s = obj.str();
    (void)s;
    if (name == "startswith" || name == "endswith") {
      bool starts = name == "startswith";
      return method(name, [self, starts, name](Interpreter&, CallArgs& a) {
        Args args(name, a);
        Value what = args.get(0, "prefix");
        args.done(1);
        std::vector<Value> options = what.is_list() ? what.items() : std::vector<Value>{what};
        const std::string& str = self.str();
        for (const auto& o : options) {
          const std::string& p = need_string(o, name);
          if (p.size() <= str.size() &&
              (starts ? str.compare(0, p.size(), p) == 0 : str.compare(str.size() - p.size(), p.size(), p) == 0))
            return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool l = name != "rstrip", r = name != "lstrip";
      return method(name, [self, l, r, name](Interpreter& ip, CallArgs& a) {
        Args args(name, a);
        Value chars = args.get(0, "chars", Value::none());
        args.done(1);
        return ip.make_string(py_strip(self.str(), chars, l, r));
      });
    }
    if (name == "split" || name == "rsplit") {
      bool right = name == "rsplit";
      return method(name, [self, right, name](Interpreter& ip, CallArgs& a) {
        Args args(name, a);
        Value sep = args.get(0, "sep", Value::none());
        int64_t maxsplit = need_int(args.get(1, "maxsplit", Value::integer(-1)), name);
        args.done(2);
        std::vector<std::string> parts;
        if (right && maxsplit >= 0 && !sep.is_none()) {
          // rsplit with a limit: split from the right.
          const std::string& d = need_string(sep, name);
          if (d.empty()) throw TemplateError("empty separator");
          std::string rest = self.str();
          while (static_cast<int64_t>(parts.size()) < maxsplit) {
            size_t j = rest.rfind(d);
            if (j == std::string::npos) break;
            parts.insert(parts.begin(), rest.substr(j + d.size()));
            rest.resize(j);
          }
          parts.insert(parts.begin(), rest);
        } else {
          parts = py_split(self.str(), sep, maxsplit);
        }
        std::vector<Value> items;
        for (auto& p : parts) items.push_back(ip.make_string(std::move(p)));
        return ip.make_list(std::move(items));
      });
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      return method(name, [self, name](Interpreter& ip, CallArgs& a) {
        Args(name, a).done(0);
        if (name == "upper") return ip.make_string(icu_case(self.str(), 1));
        if (name == "lower") return ip.make_string(icu_case(self.str(), 0));
        if (name == "title") return ip.make_string(py_title(self.str()));
        return ip.make_string(py_capitalize(self.str()));
      });
    }
    if (name == "replace") {
      return method(name, [self](Interpreter& ip, CallArgs& a) {
        Args args("replace", a);
        const std::string& old = need_string(args.get(0, "old"), "replace");
        const std::string& rep = need_string(args.get(1, "new"), "replace");
        int64_t count = need_int(args.get(2, "count", Value::integer(-1)), "replace");
        args.done(3);
        return ip.make_string(py_replace(self.str(), old, rep, count, ip.budget()));
      });
    }
    if (name == "find" || name == "rfind" || name == "count" || name == "index") {
      return method(name, [self, name](Interpreter&, CallArgs& a) {
        Args args(name, a);
        const std::string& sub = need_string(args.get(0, "sub"), name);
        args.done(1);
        const std::string& str = self.str();
        if (name == "count") {
          if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(str)) + 1);
          int64_t n = 0;
          for (size_t i = str.find(sub); i != std::string::npos; i = str.find(sub, i + sub.size())) ++n;
          return Value::integer(n);
        }
        size_t pos = name == "rfind" ? str.rfind(sub) : str.find(sub);
        if (pos == std::string::npos) {
          if (name == "index") throw TemplateError("substring not found");
          return Value::integer(-1);
        }
        return Value::integer(static_cast<int64_t>(utf8_length(str.substr(0, pos))));
      });
    }
    if (name == "join") {
      return method(name, [self](Interpreter& ip, CallArgs& a) {
        Args args("join", a);
        Value seq = args.get(0, "iterable");
        args.done(1);
        std::string out;
        bool first = true;
        for (const auto& v : ip.iterate(seq)) {
          if (!first) out += self.str();
          first = false;
          out += need_string(v, "join");
          ip.budget().alloc(v.str().size());
        }
        return ip.make_string(std::move(out));
      });
    }
    if (name == "format") {
      return method(name, [self](Interpreter& ip, CallArgs& a) {
        return ip.make_string(brace_format(ip, self.str(), a));
      });
    }
    if (name == "splitlines") {
      return method(name, [self](Interpreter& ip, CallArgs& a) {
        Args("splitlines", a).done(0);
        std::vector<Value> items;
        for (auto& l : py_splitlines(self.str())) items.push_back(ip.make_string(std::move(l)));
        return ip.make_list(std::move(items));
      });
    }
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
        name == "islower" || name == "isupper") {
      return method(name, [self, name](Interpreter&, CallArgs& a) {
        Args(name, a).done(0);
        const std::string& str = self.str();
        if (str.empty()) return Value::boolean(false);
        if (name == "islower" || name == "isupper") {
          bool want_lower = name == "islower", any = false;
          for (const auto& c : utf8_chars(str)) {
            UChar32 cp = first_cp(c);
            if (u_isULowercase(cp)) {
              if (!want_lower) return Value::boolean(false);
              any = true;
            } else if (u_isUUppercase(cp) || u_istitle(cp)) {
              if (want_lower) return Value::boolean(false);
              any = true;
            }
          }
          return Value::boolean(any);
        }
        for (const auto& c : utf8_chars(str)) {
          UChar32 cp = first_cp(c);
          size_t len = 0;
          bool ok = name == "isdigit"   ? u_isdigit(cp)
                    : name == "isspace" ? is_py_space(c, 0, &len)
                    : name == "isalpha" ? u_isalpha(cp)
                                        : (u_isalnum(cp) != 0);
          if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
      });
    }
    return Value();
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    Value self = obj;
    if (name == "get") {
      return method(name, [self](Interpreter&, CallArgs& a) {
        Args args("get", a);
        Value key = args.get(0, "key");
        Value dflt = args.get(1, "default", Value::none());
        args.done(2);
        if (key.is_string())
          if (const Value* v = self.dict_obj().find(key.str())) return *v;
        return dflt;
      });
    }
    if (name == "items" || name == "keys" || name == "values") {
      return method(name, [self, name](Interpreter& ip, CallArgs& a) {
        Args(name, a).done(0);
        std::vector<Value> out;
        for (const auto& [k, v] : self.dict_obj().items) {
          if (name == "items") {
            out.push_back(ip.make_list({Value::string(k), v}, true));
          } else {
            out.push_back(name == "keys" ? Value::string(k) : v);
          }
        }
        return ip.make_list(std::move(out));
      });
    }
    if (name == "copy") {
      return method(name, [self](Interpreter&, CallArgs& a) {
        Args("copy", a).done(0);
        return self;  // dicts are immutable here, so sharing is a copy
      });
    }
    for (const char* u : {"pop", "popitem", "setdefault", "update", "clear"})
      if (name == u) return unsafe_method("dict", name);
    return Value();
  }
  if (obj.is_list()) {
    Value self = obj;
    if (name == "index" || name == "count") {
      return method(name, [self, name](Interpreter& ip, CallArgs& a) {
        Args args(name, a);
        Value x = args.get(0, "value");
        args.done(1);
        int64_t n = 0;
        for (size_t i = 0; i < self.items().size(); ++i)
          if (equals(self.items()[i], x, ip.budget())) {
            if (name == "index") return Value::integer(static_cast<int64_t>(i));
            ++n;
          }
        if (name == "index") throw TemplateError("value is not in list");
        return Value::integer(n);
      });
    }
    for (const char* u : {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})
      if (name == u) return unsafe_method(self.type_name(), name);
    return Value();
  }
  return Value();
}

// ---- globals ----

void add_builtin_globals(Interpreter::Frame& g) {
  g.emplace_back("range", method("range", [](Interpreter& ip, CallArgs& a) {
    if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) throw TemplateError("range() takes 1 to 3 integers");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = need_int(a.pos[0], "range");
    } else {
      start = need_int(a.pos[0], "range");
      stop = need_int(a.pos[1], "range");
      if (a.pos.size() == 3) step = need_int(a.pos[2], "range");
    }
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    // Transformers' sandbox refuses ranges longer than 100000 (jinja2's MAX_RANGE).
    double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (count > 100000)
      throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::integer(i));
    return ip.make_list(std::move(items));
  }));
  auto kw_dict = [](Interpreter& ip, CallArgs& a, bool ns) {
    std::vector<std::pair<std::string, Value>> items;
    if (a.pos.size() > 1) throw TemplateError("expected at most one positional argument");
    if (a.pos.size() == 1) {
      const Value& init = a.pos[0];
      if (init.is_dict() && !init.is_namespace()) {
        items = init.dict_obj().items;
      } else {
        for (const auto& pair : ip.iterate(init)) {
          std::vector<Value> kv = ip.iterate(pair);
          if (kv.size() != 2 || !kv[0].is_string()) throw TemplateError("dict() needs (key, value) pairs");
          items.emplace_back(kv[0].str(), kv[1]);
        }
      }
    }
    for (auto& kv : a.kw) items.push_back(kv);
    ip.budget().alloc(items.size() * sizeof(Value));
    return ns ? Value::namespace_(std::move(items), ip.budget()) : Value::dict(std::move(items), ip.budget());
  };
  g.emplace_back("namespace", method("namespace", [kw_dict](Interpreter& ip, CallArgs& a) {
    return kw_dict(ip, a, true);
  }));
  g.emplace_back("dict", method("dict", [kw_dict](Interpreter& ip, CallArgs& a) {
    return kw_dict(ip, a, false);
  }));
  g.emplace_back("raise_exception", method("raise_exception", [](Interpreter& ip, CallArgs& a) -> Value {
    Args args("raise_exception", a);
    Value msg = args.get(0, "message", Value::string(""));
    args.done(1);
    throw RaisedError(to_str(msg, ip.budget()));
  }));
  g.emplace_back("strftime_now", method("strftime_now", [](Interpreter& ip, CallArgs& a) {
    Args args("strftime_now", a);
    std::string fmt = need_string(args.get(0, "format"), "strftime_now");
    args.done(1);
    if (fmt.size() > 256) throw TemplateError("strftime_now: format too long");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[1024];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return ip.make_string(std::string(buf, n));
  }));
}

// ---- tests ----

bool Interpreter::apply_test(const std::string& name, const Value& v, CallArgs& a) {
  Args args(name, a);
  auto arg0 = [&]() {
    Value x = args.get(0, "other");
    args.done(1);
    return x;
  };
  if (name == "defined") return args.done(0), !v.is_undefined();
  if (name == "undefined") return args.done(0), v.is_undefined();
  if (name == "none") return args.done(0), v.is_none();
  if (name == "string") return args.done(0), v.is_string();
  if (name == "number") return args.done(0), v.is_number();
  if (name == "integer") return args.done(0), v.is_int();
  if (name == "float") return args.done(0), v.is_float();
  if (name == "boolean") return args.done(0), v.is_bool();
  if (name == "true") return args.done(0), v.is_bool() && v.as_bool();
  if (name == "false") return args.done(0), v.is_bool() && !v.as_bool();
  if (name == "mapping") return args.done(0), v.is_dict() && !v.is_namespace();
  if (name == "iterable") return args.done(0), v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence") return args.done(0), v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return args.done(0), v.is_function();
  if (name == "lower" || name == "upper") {
    args.done(0);
    if (!v.is_string()) return false;
    return icu_case(v.str(), name == "lower" ? 0 : 1) == v.str();
  }
  if (name == "odd" || name == "even") {
    args.done(0);
    int64_t x = need_int(v, name);
    return name == "odd" ? (x % 2 != 0) : (x % 2 == 0);
  }
  if (name == "divisibleby") {
    int64_t d = need_int(args.get(0, "num"), name);
    args.done(1);
    if (d == 0) throw TemplateError("integer division or modulo by zero");
    return need_int(v, name) % d == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equals(v, arg0(), budget());
  if (name == "ne" || name == "!=") return !equals(v, arg0(), budget());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg0(), budget()) < 0;
  if (name == "le" || name == "<=") return compare(v, arg0(), budget()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg0(), budget()) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg0(), budget()) >= 0;
  if (name == "in") {
    Value seq = args.get(0, "seq");
    args.done(1);
    return contains(seq, v);
  }
  throw TemplateError("No test named '" + name + "'.");
}

// ---- filters ----

Value Interpreter::apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  Args args(name, a);
  Budget& b = budget();
  auto str_of = [&](const Value& x) { return x.is_string() ? x.str() : to_str(x, b); };
  if (name == "default" || name == "d") {
    Value dflt = args.get(0, "default_value", Value::string(""));
    bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
    args.done(2);
    if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
    return v;
  }
  if (name == "tojson") {
    JsonOptions o;
    o.ensure_ascii = args.get(0, "ensure_ascii", Value::boolean(false)).truthy();
    Value indent = args.get(1, "indent", Value::none());
    Value separators = args.get(2, "separators", Value::none());
    o.sort_keys = args.get(3, "sort_keys", Value::boolean(false)).truthy();
    args.done(4);
    if (!indent.is_none()) {
      o.has_indent = true;
      if (indent.is_string()) {
        o.indent = indent.str();
      } else {
        int64_t n = need_int(indent, "tojson indent");
        o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
      }
      o.item_separator = ",";
    }
    if (!separators.is_none()) {
      std::vector<Value> seps = iterate(separators);
      if (seps.size() != 2) throw TemplateError("tojson separators must be a pair of strings");
      o.item_separator = need_string(seps[0], "tojson separators");
      o.key_separator = need_string(seps[1], "tojson separators");
    }
    if (v.is_undefined()) v.throw_undefined();
    return make_string(to_json(v, o, b));
  }
  if (name == "trim") {
    Value chars = args.get(0, "chars", Value::none());
    args.done(1);
    return make_string(py_strip(str_of(v), chars, true, true));
  }
  if (name == "length" || name == "count") {
    args.done(0);
    if (v.is_undefined()) return Value::integer(0);
    if (v.is_string()) return Value::integer(static_cast<int64_t>(utf8_length(v.str())));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.items().size()));
    if (v.is_dict()) return Value::integer(static_cast<int64_t>(v.dict_obj().items.size()));
    throw TemplateError(std::string("object of type '") + v.type_name() + "' has no len()");
  }
  if (name == "first" || name == "last") {
    args.done(0);
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    std::string sep = str_of(args.get(0, "d", Value::string("")));
    Value attribute = args.get(1, "attribute", Value::none());
    args.done(2);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      append_str(out, attribute.is_none() ? item : attr_path(*this, item, str_of(attribute)), b);
      b.alloc(sep.size());
    }
    return make_string(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    args.done(0);
    std::string s = str_of(v);
    if (name == "upper") return make_string(icu_case(s, 1));
    if (name == "lower") return make_string(icu_case(s, 0));
    if (name == "capitalize") return make_string(py_capitalize(s));
    return make_string(jinja_title(s));
  }
  if (name == "replace") {
    std::string old = str_of(args.get(0, "old"));
    std::string rep = str_of(args.get(1, "new"));
    Value count = args.get(2, "count", Value::none());
    args.done(3);
    return make_string(py_replace(str_of(v), old, rep, count.is_none() ? -1 : need_int(count, name), b));
  }
  if (name == "string") {
    args.done(0);
    return make_string(str_of(v));
  }
  if (name == "safe") {
    args.done(0);
    return v;
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    args.done(0);
    std::string out;
    for (char c : str_of(v)) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return make_string(std::move(out));
  }
  if (name == "items") {
    args.done(0);
    if (v.is_undefined()) return make_list({});
    if (!v.is_dict() || v.is_namespace()) throw TemplateError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict_obj().items) out.push_back(make_list({Value::string(k), x}, true));
    return make_list(std::move(out));
  }
  if (name == "list") {
    args.done(0);
    return make_list(iterate(v));
  }
  if (name == "int") {
    Value dflt = args.get(0, "default", Value::integer(0));
    int64_t base = need_int(args.get(1, "base", Value::integer(10)), name);
    args.done(2);
    if (base < 2 || base > 36) throw TemplateError("int() base must be >= 2 and <= 36");
    return to_int_value(v, dflt, base);
  }
  if (name == "float") {
    Value dflt = args.get(0, "default", Value::floating(0.0));
    args.done(1);
    if (v.is_number()) return Value::floating(v.as_double());
    if (v.is_string()) {
      std::string s = py_strip(v.str(), Value::none(), true, true);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0) return Value::floating(d);
    }
    return dflt;
  }
  if (name == "abs") {
    args.done(0);
    if (!v.is_number()) throw TemplateError(std::string("bad operand type for abs(): '") + v.type_name() + "'");
    if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
    if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (name == "round") {
    int64_t precision = need_int(args.get(0, "precision", Value::integer(0)), name);
    std::string how = str_of(args.get(1, "method", Value::string("common")));
    args.done(2);
    if (!v.is_number()) throw TemplateError("round expects a number");
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
    if (how != "common" && how != "ceil" && how != "floor")
      throw TemplateError("method must be common, ceil or floor");
    if (how == "common" && v.is_int() && precision >= 0) return Value::integer(v.as_int());
    return Value::floating(r / scale);
  }
  if (name == "reverse") {
    args.done(0);
    if (v.is_string()) {
      std::vector<std::string> cs = utf8_chars(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return make_string(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items));
  }
  if (name == "unique") {
    bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
    Value attribute = args.get(1, "attribute", Value::none());
    args.done(2);
    std::vector<Value> out, keys;
    for (const auto& item : iterate(v)) {
      Value key = attribute.is_none() ? item : attr_path(*this, item, str_of(attribute));
      if (key.is_string() && !case_sensitive) key = Value::string(icu_case(key.str(), 0));
      bool seen = false;
      for (const auto& k : keys) seen = seen || equals(k, key, b);
      if (!seen) {
        keys.push_back(key);
        out.push_back(item);
      }
    }
    return make_list(std::move(out));
  }
  if (name == "sort" || name == "dictsort" || name == "min" || name == "max") {
    bool dictsort = name == "dictsort";
    bool reverse = false, case_sensitive = false, by_value = false;
    Value attribute = Value::none();
    if (name == "sort") {
      reverse = args.get(0, "reverse", Value::boolean(false)).truthy();
      case_sensitive = args.get(1, "case_sensitive", Value::boolean(false)).truthy();
      attribute = args.get(2, "attribute", Value::none());
      args.done(3);
    } else if (dictsort) {
      case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
      by_value = str_of(args.get(1, "by", Value::string("key"))) == "value";
      reverse = args.get(2, "reverse", Value::boolean(false)).truthy();
      args.done(3);
    } else {
      case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
      attribute = args.get(1, "attribute", Value::none());
      args.done(2);
    }
    std::vector<Value> items;
    if (dictsort) {
      if (!v.is_dict()) throw TemplateError("You can only sort by either a mapping");
      for (const auto& [k, x] : v.dict_obj().items) items.push_back(make_list({Value::string(k), x}, true));
    } else {
      items = iterate(v);
    }
    auto key_of = [&](const Value& item) {
      Value k = dictsort ? item.items()[by_value ? 1 : 0]
                         : (attribute.is_none() ? item : attr_path(*this, item, str_of(attribute)));
      if (k.is_string() && !case_sensitive) k = Value::string(sort_key_str(k, false));
      return k;
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& item : items) keyed.emplace_back(key_of(item), item);
    b.step(static_cast<int64_t>(keyed.size()) * 20);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? compare(y.first, x.first, b) < 0 : compare(x.first, y.first, b) < 0;
    });
    if (name == "min" || name == "max") {
      if (keyed.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      return name == "min" ? keyed.front().second : keyed.back().second;
    }
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return make_list(std::move(out));
  }
  if (name == "sum") {
    Value attribute = args.get(0, "attribute", Value::none());
    Value total = args.get(1, "start", Value::integer(0));
    args.done(2);
    for (const auto& item : iterate(v)) {
      Value x = attribute.is_none() ? item : attr_path(*this, item, str_of(attribute));
      if (!total.is_number() || !x.is_number()) throw TemplateError("sum expects numbers");
      if (total.is_float() || x.is_float()) {
        total = Value::floating(total.as_double() + x.as_double());
      } else {
        int64_t r;
        if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) throw TemplateError("integer overflow");
        total = Value::integer(r);
      }
    }
    return total;
  }
  if (name == "map") {
    std::vector<Value> out;
    std::vector<Value> items = iterate(v);
    if (a.pos.empty()) {  // map(attribute=..., default=...)
      std::string attribute = str_of(args.get(0, "attribute"));
      Value dflt = args.get(1, "default");
      args.done(0);
      for (const auto& item : items) {
        Value x = attr_path(*this, item, attribute);
        out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
      }
      return make_list(std::move(out));
    }
    if (a.pos.empty()) throw TemplateError("map requires a filter argument");
    std::string filter = str_of(a.pos[0]);
    for (const auto& item : items) {
      CallArgs sub;
      sub.pos.assign(a.pos.begin() + 1, a.pos.end());
      sub.kw = a.kw;
      out.push_back(apply_filter(filter, item, sub));
    }
    return make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool attr = name == "selectattr" || name == "rejectattr";
    bool select = name == "select" || name == "selectattr";
    size_t k = 0;
    std::string attribute;
    if (attr) {
      if (a.pos.empty()) throw TemplateError(name + " requires an attribute name");
      attribute = str_of(a.pos[k++]);
    }
    std::string test;
    if (k < a.pos.size()) test = str_of(a.pos[k++]);
    std::vector<Value> out;
    for (const auto& item : iterate(v)) {
      Value x = attr ? attr_path(*this, item, attribute) : item;
      bool r;
      if (test.empty()) {
        r = x.truthy();
      } else {
        CallArgs sub;
        sub.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
        sub.kw = a.kw;
        r = apply_test(test, x, sub);
      }
      if (r == select) out.push_back(item);
    }
    return make_list(std::move(out));
  }
  if (name == "indent") {
    Value width = args.get(0, "width", Value::integer(4));
    bool first = args.get(1, "first", Value::boolean(false)).truthy();
    bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
    args.done(3);
    std::string ind = width.is_string() ? width.str()
                                        : std::string(static_cast<size_t>(std::clamp<int64_t>(need_int(width, name), 0, 256)), ' ');
    std::vector<std::string> lines = py_splitlines(str_of(v) + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n";
      if (i && (blank || !lines[i].empty())) out += ind;
      out += lines[i];
      b.alloc(ind.size());
    }
    if (first) out = ind + out;
    return make_string(std::move(out));
  }
  if (name == "format") {
    std::string fmt = str_of(v);
    std::vector<Value> pos = args.rest(0);
    return make_string(percent_format(*this, fmt, pos));
  }
  if (name == "wordcount") {
    args.done(0);
    return Value::integer(static_cast<int64_t>(py_split(str_of(v), Value::none(), -1).size()));
  }
  throw TemplateError("No filter named '" + name + "'.");
}

}  // namespace kiln::tokenizer::jinja
