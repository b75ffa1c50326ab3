// Jinja interpreter: renders a parsed Template against a context of variables, with jinja2's
// semantics as Transformers configures it (ImmutableSandboxedEnvironment, loop controls, default
// Undefined). Scoping follows jinja2: each for-loop iteration and each macro call gets a fresh
// frame, so `set` inside a loop does not leak out (use namespace()).
//
// Example:
//   jinja::Budget budget;
//   jinja::Interpreter interp(budget, context);  // context: a dict Value of variables
//   std::string text = interp.render(tpl);
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/tokenizer/jinja/ast.h"
#include "kiln/tokenizer/jinja/value.h"

namespace kiln::tokenizer::jinja {

// raise_exception(msg) from a template: the message is the template's own.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

class Interpreter {
 public:
  using Frame = std::vector<std::pair<std::string, Value>>;

  Interpreter(Budget& budget, Value context);
  std::string render(const Template& tpl);

  Budget& budget() { return budget_; }
  // Helpers for builtins: build values while charging the budget.
  Value make_string(std::string s);
  Value make_list(std::vector<Value> items, bool is_tuple = false);
  Value call(const Value& fn, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  std::vector<Value> iterate(const Value& v);  // Python iteration: list items, dict keys, chars
  bool contains(const Value& container, const Value& item);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard {
    Interpreter* ip;
    explicit DepthGuard(Interpreter* interp);
    ~DepthGuard() { --ip->depth_; }
  };

  Flow exec_list(const StmtList& body);
  Flow exec(const Stmt& s);
  void exec_for(const Stmt& s);
  void assign(const Expr& target, const Value& v);
  void bind_local(const std::string& name, Value v);
  Value lookup(const std::string& name);
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value eval_compare(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input);  // input replaces a null operand
  void eval_args(const Expr& e, size_t first, CallArgs& out);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  Value define_macro(const Stmt& s);
  std::string capture(const StmtList& body);
  void emit(const std::string& text);

  Budget& budget_;
  Value context_;
  Frame globals_;
  Frame root_;
  std::vector<Frame*> frames_;
  std::string* out_ = nullptr;
  int depth_ = 0;
};

// Builtins (builtins.cpp).
void add_builtin_globals(Interpreter::Frame& globals);
// A bound method of a str, dict or list (`"a".upper`), or Undefined when there is none.
Value get_method(Interpreter& ip, const Value& obj, const std::string& name);

}  // namespace kiln::tokenizer::jinja
