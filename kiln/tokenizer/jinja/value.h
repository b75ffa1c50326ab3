// Values of the Jinja engine, with Python's semantics (what jinja2 does on top of Python objects):
// None, bool, int, float, str (UTF-8, indexed by code point), list/tuple, dict (insertion ordered,
// string keys), namespace, callables, and jinja2's default Undefined.
//
// Lists and dicts are shared by reference like Python's. They are immutable once built (the
// renderer is an immutable sandbox, as in Transformers), except namespaces, which can never hold a
// namespace themselves, so no value can contain itself (Note [Value depth]).
//
// Every walk over values (printing, tojson, equality) charges a Budget, so untrusted templates
// cannot make the engine hang or exhaust memory.
//
// Example:
//   jinja::Budget budget;
//   jinja::Value v = jinja::Value::from_json(nlohmann::ordered_json::parse("[1, 2.0, \"é\"]"), budget);
//   std::string s = jinja::to_str(v, budget);   // "[1, 2.0, 'é']"
//   std::string j = jinja::to_json(v, {}, budget);  // "[1, 2.0, \"é\"]"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln::tokenizer::jinja {

// Limits on one render; past any of them rendering stops with TemplateError.
struct Limits {
  int64_t max_steps = 50'000'000;          // expression/statement evaluations and value visits
  int64_t max_loop_iterations = 1'000'000;  // for-loop iterations, all loops together
  int max_depth = 256;                     // parser nesting, evaluator recursion, value nesting
  size_t max_output_bytes = 16u << 20;     // rendered text, and any single string
  int64_t max_alloc_bytes = int64_t{1} << 30;  // total bytes of strings and lists created
};

// An error in a template: syntax or runtime. `line` is 0 until the evaluator attaches the line of
// the node being evaluated.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& what, int line = 0)
      : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  int line_;
};

class Budget {
 public:
  explicit Budget(Limits limits = {}) : limits_(limits) {}
  const Limits& limits() const { return limits_; }
  void step(int64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps)
      throw TemplateError("template exceeded the limit of " + std::to_string(limits_.max_steps) +
                          " evaluation steps");
  }
  void iteration() {
    if (++iterations_ > limits_.max_loop_iterations)
      throw TemplateError("template exceeded the limit of " +
                          std::to_string(limits_.max_loop_iterations) + " loop iterations");
  }
  void alloc(size_t bytes) {
    if (bytes > limits_.max_output_bytes)
      throw TemplateError("template built a value of " + std::to_string(bytes) +
                          " bytes, over the limit of " + std::to_string(limits_.max_output_bytes));
    alloc_ += static_cast<int64_t>(bytes);
    if (alloc_ > limits_.max_alloc_bytes)
      throw TemplateError("template exceeded the limit of " +
                          std::to_string(limits_.max_alloc_bytes) + " bytes allocated");
  }
  void check_depth(int depth) const {
    if (depth > limits_.max_depth)
      throw TemplateError("template nesting deeper than " + std::to_string(limits_.max_depth));
  }

 private:
  Limits limits_;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int64_t alloc_ = 0;
};

class Value;
struct ListObj;
struct DictObj;
struct FunctionObj;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Interpreter;
using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // Undefined
  static Value undefined(std::string hint);  // hint: "'x' is undefined", used if it is misused
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);  // uncharged: callers charge the Budget
  static Value list(std::vector<Value> items, bool is_tuple, const Budget& budget);
  // Keys must be unique; later duplicates replace earlier ones (as Python's dict literal does).
  static Value dict(std::vector<std::pair<std::string, Value>> items, const Budget& budget);
  static Value namespace_(std::vector<std::pair<std::string, Value>> items, const Budget& budget);
  static Value function(std::string name, NativeFn fn);
  // JSON input (messages, tools, kwargs): numbers keep their kind, so 1.0 stays a float.
  static Value from_json(const nlohmann::ordered_json& j, const Budget& budget, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const;
  bool is_tuple() const;
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }  // bool or int
  double as_double() const;  // any number
  const std::string& str() const { return *s_; }  // string, or the hint of an Undefined
  const std::vector<Value>& items() const;        // list
  ListObj& list_obj() const { return *list_; }
  DictObj& dict_obj() const { return *dict_; }
  FunctionObj& function_obj() const { return *fn_; }
  int depth() const;         // nesting depth of containers, 0 for scalars
  bool has_namespace() const;  // a namespace is reachable from this value

  bool truthy() const;
  const char* type_name() const;  // Python's: 'str', 'int', 'list', ...
  [[noreturn]] void throw_undefined() const;  // for misuse of an Undefined

 private:
  static Value make_dict(std::vector<std::pair<std::string, Value>> items, bool is_namespace,
                         const Budget& budget);

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ListObj> list_;
  std::shared_ptr<DictObj> dict_;
  std::shared_ptr<FunctionObj> fn_;
};

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
  bool has_namespace = false;
};

struct DictObj {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  int depth = 1;
  bool has_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct FunctionObj {
  std::string name;
  NativeFn fn;
};

// Python semantics over values. All charge `budget` and respect its depth limit.
bool equals(const Value& a, const Value& b, Budget& budget, int depth = 0);
int compare(const Value& a, const Value& b, Budget& budget, int depth = 0);  // <0, 0, >0; throws
void append_str(std::string& out, const Value& v, Budget& budget);  // str(v); Undefined is ""
std::string to_str(const Value& v, Budget& budget);
void append_repr(std::string& out, const Value& v, Budget& budget, int depth = 0);  // repr(v)

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python prints it.
std::string to_json(const Value& v, const JsonOptions& options, Budget& budget);
std::string python_float_repr(double d);

// UTF-8 helpers: strings are indexed by code point; invalid bytes count as one code point each.
size_t utf8_next(const std::string& s, size_t pos);  // byte offset of the code point after pos
std::vector<std::string> utf8_chars(const std::string& s);
size_t utf8_length(const std::string& s);
bool is_py_space(const std::string& s, size_t pos, size_t* len);  // Python's str.isspace per char

}  // namespace kiln::tokenizer::jinja
