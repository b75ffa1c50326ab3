#include "kiln/tokenizer/jinja/interpreter.h"

#include <cmath>

namespace kiln::tokenizer::jinja {

Interpreter::DepthGuard::DepthGuard(Interpreter* interp) : ip(interp) {
  // The parser bounds the tree's depth; macro recursion adds to it, so bound the total.
  if (++ip->depth_ > 2 * ip->budget_.limits().max_depth) {
    --ip->depth_;
    throw TemplateError("template recursion deeper than " +
                        std::to_string(2 * ip->budget_.limits().max_depth));
  }
}

Interpreter::Interpreter(Budget& budget, Value context) : budget_(budget), context_(std::move(context)) {
  add_builtin_globals(globals_);
}

std::string Interpreter::render(const Template& tpl) {
  std::string out;
  out_ = &out;
  frames_ = {&root_};
  exec_list(tpl.body);
  out_ = nullptr;
  return out;
}

Value Interpreter::make_string(std::string s) {
  budget_.alloc(s.size());
  return Value::string(std::move(s));
}

Value Interpreter::make_list(std::vector<Value> items, bool is_tuple) {
  budget_.alloc(items.size() * sizeof(Value));
  return Value::list(std::move(items), is_tuple, budget_);
}

void Interpreter::emit(const std::string& text) {
  out_->append(text);
  if (out_->size() > budget_.limits().max_output_bytes)
    throw TemplateError("template output exceeded the limit of " +
                        std::to_string(budget_.limits().max_output_bytes) + " bytes");
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_list(const StmtList& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

std::string Interpreter::capture(const StmtList& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_list(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  budget_.alloc(buf.size());
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  DepthGuard guard(this);
  budget_.step();
  try {
    switch (s.kind) {
      case StmtKind::kData:
        emit(s.text);
        return Flow::kNormal;
      case StmtKind::kPrint: {
        Value v = eval(*s.expr);
        if (v.is_string()) {
          emit(v.str());
        } else {
          std::string text;
          append_str(text, v, budget_);
          emit(text);
        }
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        if (eval(*s.expr).truthy()) return exec_list(s.body);
        return exec_list(s.else_body);
      case StmtKind::kFor:
        exec_for(s);
        return Flow::kNormal;
      case StmtKind::kSet:
        assign(*s.target, eval(*s.expr));
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        Value v = make_string(capture(s.body));
        if (s.expr) v = eval_filter(*s.expr, &v);
        assign(*s.target, v);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        bind_local(s.text, define_macro(s));
        return Flow::kNormal;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kBlock:
        return exec_list(s.body);
      case StmtKind::kFilterBlock: {
        Value v = make_string(capture(s.body));
        v = eval_filter(*s.expr, &v);
        std::string text;
        append_str(text, v, budget_);
        emit(text);
        return Flow::kNormal;
      }
    }
  } catch (TemplateError& e) {
    if (e.line() == 0) e.set_line(s.line);
    throw;
  }
  return Flow::kNormal;
}

void Interpreter::bind_local(const std::string& name, Value v) {
  Frame& f = *frames_.back();
  for (auto& kv : f)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  f.emplace_back(name, std::move(v));
}

void Interpreter::assign(const Expr& target, const Value& v) {
  if (target.kind == ExprKind::kName) {
    bind_local(target.name, v);
    return;
  }
  if (target.kind == ExprKind::kTuple) {
    std::vector<Value> items = iterate(v);
    if (items.size() != target.args.size())
      throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(target.args.size()) + " names");
    for (size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i]);
    return;
  }
  if (target.kind == ExprKind::kGetattr) {  // {% set ns.attr = value %}
    Value ns = lookup(target.args[0]->name);
    if (!ns.is_namespace()) throw TemplateError("cannot assign attribute on non-namespace object");
    if (v.has_namespace()) throw TemplateError("a namespace cannot hold a namespace");
    budget_.check_depth(v.depth() + 1);
    DictObj& d = ns.dict_obj();
    d.depth = std::max(d.depth, v.depth() + 1);
    d.set(target.name, v);
    return;
  }
  throw TemplateError("can't assign to this expression");
}

void Interpreter::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& it : items) {
      budget_.iteration();
      Frame f;
      frames_.push_back(&f);
      bool keep;
      try {
        assign(*s.target, it);
        keep = eval(*s.cond).truthy();
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (keep) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_list(s.else_body);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    budget_.iteration();
    Frame f;
    frames_.push_back(&f);
    Flow flow;
    try {
      assign(*s.target, items[static_cast<size_t>(i)]);
      if (s.uses_loop) {
        Frame loop = {
            {"index", Value::integer(i + 1)},
            {"index0", Value::integer(i)},
            {"revindex", Value::integer(n - i)},
            {"revindex0", Value::integer(n - i - 1)},
            {"first", Value::boolean(i == 0)},
            {"last", Value::boolean(i == n - 1)},
            {"length", Value::integer(n)},
            {"depth", Value::integer(1)},
            {"depth0", Value::integer(0)},
            {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                               : Value::undefined("there is no previous item")},
            {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                   : Value::undefined("there is no next item")},
            {"cycle", Value::function("loop.cycle", [i](Interpreter&, CallArgs& a) {
               if (a.pos.empty()) throw TemplateError("no items for cycling given");
               return a.pos[static_cast<size_t>(i) % a.pos.size()];
             })},
        };
        bind_local("loop", Value::dict(std::move(loop), budget_));
      }
      flow = exec_list(s.body);
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    if (flow == Flow::kBreak) break;
  }
}

Value Interpreter::define_macro(const Stmt& s) {
  const Stmt* m = &s;
  return Value::function(s.text, [m](Interpreter& ip, CallArgs& args) -> Value {
    if (args.pos.size() > m->params.size())
      throw TemplateError("macro '" + m->text + "' takes not more than " +
                          std::to_string(m->params.size()) + " argument(s)");
    Frame frame;
    std::vector<Frame*> saved = std::move(ip.frames_);
    ip.frames_ = {&ip.root_, &frame};
    std::string text;
    try {
      for (size_t i = 0; i < m->params.size(); ++i) {
        Value v;
        bool found = false;
        if (i < args.pos.size()) {
          v = args.pos[i];
          found = true;
        }
        for (auto& [k, kv] : args.kw)
          if (k == m->params[i]) {
            if (found) throw TemplateError("macro '" + m->text + "' got multiple values for '" + k + "'");
            v = kv;
            found = true;
          }
        if (!found)
          v = m->defaults[i] ? ip.eval(*m->defaults[i])
                             : Value::undefined("parameter '" + m->params[i] + "' was not provided");
        ip.bind_local(m->params[i], v);
      }
      for (auto& [k, kv] : args.kw) {
        bool known = false;
        for (const auto& p : m->params) known = known || p == k;
        if (!known) throw TemplateError("macro '" + m->text + "' takes no keyword argument '" + k + "'");
      }
      text = ip.capture(m->body);
    } catch (...) {
      ip.frames_ = std::move(saved);
      throw;
    }
    ip.frames_ = std::move(saved);
    return Value::string(std::move(text));
  });
}

// ---- expressions ----

Value Interpreter::lookup(const std::string& name) {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    for (const auto& kv : **it)
      if (kv.first == name) return kv.second;
  if (context_.is_dict())
    if (const Value* v = context_.dict_obj().find(name)) return *v;
  for (const auto& kv : globals_)
    if (kv.first == name) return kv.second;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e) {
  DepthGuard guard(this);
  budget_.step();
  try {
    return eval_inner(e);
  } catch (TemplateError& err) {
    if (err.line() == 0) err.set_line(e.line);
    throw;
  }
}

void Interpreter::eval_args(const Expr& e, size_t first, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) out.pos.push_back(eval(*e.args[i]));
  for (const auto& [k, x] : e.kwargs) out.kw.emplace_back(k, eval(*x));
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return make_list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<std::string, Value>> items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (!k.is_string()) throw TemplateError("dict keys must be strings in chat templates");
        items.emplace_back(k.str(), eval(*e.args[i + 1]));
      }
      budget_.alloc(items.size() * sizeof(Value));
      return Value::dict(std::move(items), budget_);
    }
    case ExprKind::kGetattr:
      return getattr(eval(*e.args[0]), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.args[0]);
      return getitem(obj, eval(*e.args[1]));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        parts[i] = e.args[static_cast<size_t>(i) + 1] ? eval(*e.args[static_cast<size_t>(i) + 1])
                                                       : Value::none();
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      Value v = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      bool r = apply_test(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) v.throw_undefined();
      if (!v.is_number())
        throw TemplateError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::floating(-v.as_double());
      if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      return eval_binary(e.name, a, b);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.args[0]);
      if (!a.truthy()) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kOr: {
      Value a = eval(*e.args[0]);
      if (a.truthy()) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kCond:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  throw TemplateError("unknown expression");
}

Value Interpreter::eval_call(const Expr& e) {
  Value fn = eval(*e.args[0]);
  CallArgs args;
  eval_args(e, 1, args);
  return call(fn, args);
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fn.throw_undefined();
  if (!fn.is_function()) throw TemplateError(std::string("'") + fn.type_name() + "' object is not callable");
  DepthGuard guard(this);
  return fn.function_obj().fn(*this, args);
}

Value Interpreter::eval_filter(const Expr& e, const Value* input) {
  Value v;
  if (e.args[0]) {
    v = e.args[0]->kind == ExprKind::kFilter && input ? eval_filter(*e.args[0], input) : eval(*e.args[0]);
  } else if (input) {
    v = *input;
  }
  CallArgs args;
  eval_args(e, 1, args);
  return apply_filter(e.name, v, args);
}

static bool checked_int(int64_t a, int64_t b, char op, int64_t* out) {
  switch (op) {
    case '+': return !__builtin_add_overflow(a, b, out);
    case '-': return !__builtin_sub_overflow(a, b, out);
    case '*': return !__builtin_mul_overflow(a, b, out);
  }
  return false;
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a, budget_);
    append_str(s, b, budget_);
    return make_string(std::move(s));
  }
  if (a.is_undefined()) a.throw_undefined();
  if (b.is_undefined()) b.throw_undefined();
  auto unsupported = [&]() -> Value {
    throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                        b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    if (op == "+" || op == "-" || op == "*") {
      if (fl) {
        double x = a.as_double(), y = b.as_double();
        return Value::floating(op == "+" ? x + y : op == "-" ? x - y : x * y);
      }
      int64_t r;
      if (!checked_int(a.as_int(), b.as_int(), op[0], &r)) throw TemplateError("integer overflow");
      return Value::integer(r);
    }
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value::floating(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) throw TemplateError(op == "%" ? "modulo by zero" : "division by zero");
      if (fl) {
        double x = a.as_double(), y = b.as_double();
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        if (op == "%") return Value::floating(m);
        return Value::floating(std::round((x - m) / y));
      }
      int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) throw TemplateError("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "%" ? m : q);
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {
        int64_t base = a.as_int(), r = 1;
        for (int64_t k = 0; k < b.as_int(); ++k) {
          budget_.step();
          if (!checked_int(r, base, '*', &r)) throw TemplateError("integer overflow");
          if (r == 0 || r == 1) break;
        }
        return Value::integer(r);
      }
      return Value::floating(std::pow(a.as_double(), b.as_double()));
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      budget_.alloc(a.str().size() + b.str().size());
      return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return make_list(std::move(items), a.is_tuple());
    }
    return unsupported();
  }
  if (op == "*") {
    const Value& seq = a.is_number() ? b : a;
    const Value& num = a.is_number() ? a : b;
    if (!num.is_number() || num.is_float() || !(seq.is_string() || seq.is_list())) return unsupported();
    int64_t n = std::max<int64_t>(0, num.as_int());
    // An empty sequence repeats to itself, however large n is: the loops below would otherwise
    // spin n times without allocating, so no limit stopped them (the fuzzer's `[] * 6666666670`).
    if (seq.is_string() ? seq.str().empty() : seq.items().empty()) n = 0;
    if (seq.is_string()) {
      budget_.alloc(seq.str().size() * static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)));
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += seq.str();
      return Value::string(std::move(s));
    }
    budget_.alloc(seq.items().size() * sizeof(Value) * static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)));
    std::vector<Value> items;
    for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.items().begin(), seq.items().end());
    return Value::list(std::move(items), seq.is_tuple(), budget_);
  }
  if (op == "%" && a.is_string()) {
    CallArgs args;
    if (b.is_tuple()) {
      args.pos = b.items();
    } else {
      args.pos.push_back(b);
    }
    return apply_filter("format", a, args);
  }
  return unsupported();
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = equals(left, right, budget_);
    } else if (op == "!=") {
      r = !equals(left, right, budget_);
    } else if (op == "in") {
      r = contains(right, left);
    } else if (op == "not in") {
      r = !contains(right, left);
    } else {
      int c = compare(left, right, budget_);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.throw_undefined();
  if (obj.is_dict()) {
    if (obj.is_namespace()) {
      if (const Value* v = obj.dict_obj().find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    }
    Value m = get_method(*this, obj, name);
    if (!m.is_undefined()) return m;
    if (const Value* v = obj.dict_obj().find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  Value m = get_method(*this, obj, name);
  if (!m.is_undefined()) return m;
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.throw_undefined();
  if (obj.is_dict() && !obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict_obj().find(key.str())) return *v;
      Value m = get_method(*this, obj, key.str());
      if (!m.is_undefined()) return m;
    }
    std::string k = key.is_string() ? key.str() : to_str(key, budget_);
    return Value::undefined("'dict object' has no attribute '" + k + "'");
  }
  if ((obj.is_list() || obj.is_string()) && key.is_number() && !key.is_float()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
      return Value::undefined(std::string(obj.type_name()) + " object has no element " +
                              std::to_string(key.as_int()));
    }
    std::vector<std::string> chars = utf8_chars(obj.str());
    int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return Value::string(chars[static_cast<size_t>(i)]);
    return Value::undefined("str object has no element " + std::to_string(key.as_int()));
  }
  if (key.is_string()) return getattr(obj, key.str());
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no such element");
}

static int64_t slice_index(const Value& v, const char* what) {
  if (!v.is_number() || v.is_float())
    throw TemplateError(std::string("slice ") + what + " must be an integer or None");
  return v.as_int();
}

Value Interpreter::slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) obj.throw_undefined();
  if (!obj.is_list() && !obj.is_string())
    throw TemplateError(std::string("'") + obj.type_name() + "' object is not subscriptable");
  std::vector<std::string> chars;
  int64_t len;
  if (obj.is_string()) {
    chars = utf8_chars(obj.str());
    len = static_cast<int64_t>(chars.size());
  } else {
    len = static_cast<int64_t>(obj.items().size());
  }
  int64_t step = step_v.is_none() ? 1 : slice_index(step_v, "step");
  if (step == 0) throw TemplateError("slice step cannot be zero");
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  auto adjust = [&](const Value& v, int64_t dflt, const char* what) {
    if (v.is_none()) return dflt;
    int64_t x = slice_index(v, what);
    if (x < 0) {
      x += len;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  int64_t start = adjust(start_v, step > 0 ? lower : upper, "start");
  int64_t stop = adjust(stop_v, step > 0 ? upper : lower, "stop");
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    budget_.step();
    idx.push_back(i);
  }
  if (obj.is_string()) {
    std::string s;
    for (int64_t i : idx) s += chars[static_cast<size_t>(i)];
    return make_string(std::move(s));
  }
  std::vector<Value> items;
  for (int64_t i : idx) items.push_back(obj.items()[static_cast<size_t>(i)]);
  return make_list(std::move(items), obj.is_tuple());
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.items();
  if (v.is_dict() && !v.is_namespace()) {
    std::vector<Value> keys;
    for (const auto& kv : v.dict_obj().items) keys.push_back(Value::string(kv.first));
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> out;
    for (auto& c : utf8_chars(v.str())) out.push_back(Value::string(std::move(c)));
    budget_.alloc(out.size() * sizeof(Value));
    return out;
  }
  throw TemplateError(std::string("'") + v.type_name() + "' object is not iterable");
}

bool Interpreter::contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string())
      throw TemplateError(std::string("'in <string>' requires string as left operand, not ") +
                          item.type_name());
    budget_.step(static_cast<int64_t>(container.str().size() / 64));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.items())
      if (equals(x, item, budget_)) return true;
    return false;
  }
  if (container.is_dict() && !container.is_namespace()) {
    return item.is_string() && container.dict_obj().find(item.str()) != nullptr;
  }
  throw TemplateError(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

}  // namespace kiln::tokenizer::jinja
