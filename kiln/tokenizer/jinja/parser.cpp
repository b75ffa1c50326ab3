#include "kiln/tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

namespace kiln::tokenizer::jinja {
namespace {

const char* describe(TokenType t) {
  switch (t) {
    case TokenType::kData: return "template data";
    case TokenType::kVarBegin: return "begin of print statement";
    case TokenType::kVarEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "?";
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const Budget& budget) : t_(tokens), budget_(budget) {}

  Template run() {
    Template tpl;
    tpl.body = subparse({});
    return tpl;
  }

 private:
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > p->budget_.limits().max_depth)
        throw TemplateError("template nested more than " +
                                std::to_string(p->budget_.limits().max_depth) + " levels deep",
                            p->cur().line);
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(what, cur().line); }
  std::string token_text(const Token& tok) const {
    if (tok.type == TokenType::kOperator || tok.type == TokenType::kName) return "'" + tok.value + "'";
    return describe(tok.type);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected token '") + op + "', got " + token_text(cur()));
    next();
  }
  void expect_name(const char* name) {
    if (!is_name(name)) fail(std::string("expected token '") + name + "', got " + token_text(cur()));
    next();
  }
  std::string expect_identifier() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + token_text(cur()));
    std::string v = cur().value;
    next();
    return v;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd)
      fail("expected token 'end of statement block', got " + token_text(cur()));
    next();
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  StmtPtr make_stmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // ---- statements ----

  bool at_end_tag(std::initializer_list<const char*> ends) const {
    if (cur().type != TokenType::kBlockBegin) return false;
    const Token& n = peek();
    if (n.type != TokenType::kName) return false;
    for (const char* e : ends)
      if (n.value == e) return true;
    return false;
  }

  StmtList subparse(std::initializer_list<const char*> ends) {
    DepthGuard guard(this);
    StmtList body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TokenType::kEof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("unexpected end of template; Jinja was looking for the following tags: " + want);
      }
      if (tok.type == TokenType::kData) {
        auto s = make_stmt(StmtKind::kData, tok.line);
        s->text = tok.value;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::kVarBegin) {
        auto s = make_stmt(StmtKind::kPrint, tok.line);
        next();
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::kVarEnd)
          fail("expected token 'end of print statement', got " + token_text(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        if (at_end_tag(ends)) {
          next();  // the caller reads the tag name
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + token_text(tok));
      }
    }
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::kName) fail("tag name expected");
    std::string tag = cur().value;
    int line = cur().line;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      next();
      expect_block_end();
      return make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    if (tag == "generation") {  // Transformers' AssistantTracker tag: renders its body
      next();
      expect_block_end();
      auto s = make_stmt(StmtKind::kBlock, line);
      s->body = subparse({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (tag == "filter") {
      next();
      auto s = make_stmt(StmtKind::kFilterBlock, line);
      s->expr = parse_filter(nullptr, line);
      while (is_op("|")) s->expr = parse_filter(std::move(s->expr), line);
      expect_block_end();
      s->body = subparse({"endfilter"});
      next();
      expect_block_end();
      return s;
    }
    static const char* kUnsupported[] = {"include", "import", "from", "extends", "block", "call",
                                          "with", "do", "autoescape"};
    for (const char* u : kUnsupported)
      if (tag == u) fail("tag '" + tag + "' is not supported in chat templates");
    fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtKind::kIf, cur().line);
    next();
    s->expr = parse_tuple(false, false, {}, false);
    expect_block_end();
    s->body = subparse({"elif", "else", "endif"});
    if (is_name("elif")) {
      s->else_body.push_back(parse_if());  // consumes through endif
      return s;
    }
    if (is_name("else")) {
      next();
      expect_block_end();
      s->else_body = subparse({"endif"});
    }
    expect_name("endif");
    expect_block_end();
    return s;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtKind::kFor, cur().line);
    next();
    int loop_names_before = loop_names_;
    s->target = parse_assign_target(false, {"in"});
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive", "if"}, false);
    if (is_name("if")) {
      next();
      s->cond = parse_expression(true);
    }
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (is_name("else")) {
      next();
      expect_block_end();
      s->else_body = subparse({"endfor"});
    }
    expect_name("endfor");
    expect_block_end();
    s->uses_loop = loop_names_ != loop_names_before;
    return s;
  }

  StmtPtr parse_set() {
    int line = cur().line;
    next();
    ExprPtr target = parse_assign_target(true, {});
    if (is_op("=")) {
      next();
      auto s = make_stmt(StmtKind::kSet, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->target = std::move(target);
    while (is_op("|")) s->expr = parse_filter(std::move(s->expr), line);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endset"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtKind::kMacro, cur().line);
    next();
    s->text = expect_identifier();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_identifier());
      if (is_op("=")) {
        next();
        s->defaults.push_back(parse_expression(true));
      } else {
        if (!s->defaults.empty() && s->defaults.back()) fail("non-default argument follows default argument");
        s->defaults.push_back(nullptr);
      }
    }
    next();
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  // Names, tuples of names, or (with_namespace) `ns.attr`.
  ExprPtr parse_assign_target(bool with_namespace, std::initializer_list<const char*> extra_end) {
    int line = cur().line;
    if (with_namespace && cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == ".") {
      auto e = make(ExprKind::kGetattr, line);
      auto base = make(ExprKind::kName, line);
      base->name = cur().value;
      next();
      next();
      e->name = expect_identifier();
      e->args.push_back(std::move(base));
      return e;
    }
    ExprPtr target = parse_tuple(true, false, extra_end, false);
    auto check = [&](const Expr& e) {
      if (e.kind != ExprKind::kName) fail("can't assign to this expression");
    };
    if (target->kind == ExprKind::kTuple) {
      for (auto& a : target->args) check(*a);
    } else {
      check(*target);
    }
    return target;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    TokenType t = cur().type;
    if (t == TokenType::kVarEnd || t == TokenType::kBlockEnd || t == TokenType::kEof) return true;
    if (is_op(")")) return true;
    for (const char* e : extra_end)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parentheses) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified) {
        args.push_back(parse_primary());
      } else {
        args.push_back(parse_expression(with_condexpr));
      }
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail("Expected an expression, got " + token_text(cur()));
    }
    auto e = make(ExprKind::kTuple, line);
    e->args = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      next();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression(true);
      }
      auto e = make(ExprKind::kCond, line);
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(other));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(kind, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto e = make(ExprKind::kUnary, cur().line);
      e->name = "not";
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    auto e = make(ExprKind::kCompare, line);
    e->args.push_back(std::move(first));
    while (true) {
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      if (cur().type == TokenType::kOperator) {
        for (const char* o : kOps)
          if (cur().value == o) op = o;
      }
      if (!op.empty()) {
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      e->ops.push_back(op);
      e->args.push_back(parse_math1());
    }
    if (e->ops.empty()) return std::move(e->args[0]);
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(ExprKind::kUnary, cur().line);
      node->name = cur().value;
      next();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == TokenType::kName) {
      auto e = make(ExprKind::kConst, line);
      const std::string& v = tok.value;
      if (v == "true" || v == "True") {
        e->value = Value::boolean(true);
      } else if (v == "false" || v == "False") {
        e->value = Value::boolean(false);
      } else if (v == "none" || v == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = v;
        if (v == "loop") ++loop_names_;
      }
      next();
      return e;
    }
    if (tok.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().value;
        next();
      }
      auto e = make(ExprKind::kConst, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.type == TokenType::kInteger) {
      auto e = make(ExprKind::kConst, line);
      int64_t v = 0;
      auto res = std::from_chars(tok.value.data(), tok.value.data() + tok.value.size(), v);
      if (res.ec != std::errc()) fail("integer literal too large: " + tok.value);
      e->value = Value::integer(v);
      next();
      return e;
    }
    if (tok.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, line);
      e->value = Value::floating(std::strtod(tok.value.c_str(), nullptr));
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprKind::kList, line);
      next();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      auto e = make(ExprKind::kDict, line);
      next();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    fail("unexpected " + token_text(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), cur().line);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(this);
    int line = cur().line;
    if (is_op(".")) {
      next();
      if (cur().type == TokenType::kName) {
        auto e = make(ExprKind::kGetattr, line);
        e->name = cur().value;
        e->args.push_back(std::move(node));
        next();
        return e;
      }
      if (cur().type == TokenType::kInteger) {
        auto e = make(ExprKind::kGetitem, line);
        e->args.push_back(std::move(node));
        e->args.push_back(parse_primary());
        return e;
      }
      fail("expected name or number");
    }
    next();  // [
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    next();
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      // x[a:b, c] would index with a tuple holding a slice, which no value here supports (Python
      // raises TypeError for lists, strings and dicts alike); a slice node is only valid whole.
      for (const ExprPtr& a : args)
        if (a->kind == ExprKind::kSlice) fail("a slice inside a tuple subscript is not supported");
      index = make(ExprKind::kTuple, line);
      index->args = std::move(args);
    }
    if (index->kind == ExprKind::kSlice) {
      index->args.insert(index->args.begin(), std::move(node));
      return index;
    }
    auto e = make(ExprKind::kGetitem, line);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(index));
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      parts.push_back(std::move(node));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) {
        parts.push_back(parse_expression(true));
      } else {
        parts.push_back(nullptr);
      }
    } else {
      parts.push_back(nullptr);
    }
    auto e = make(ExprKind::kSlice, line);
    e->args = std::move(parts);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("invalid syntax for function call expression");
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(this);
    auto e = make(ExprKind::kCall, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  // `| name(args)`; node may be null for filter blocks.
  ExprPtr parse_filter(ExprPtr node, int line) {
    DepthGuard guard(this);
    if (is_op("|")) next();
    auto e = make(ExprKind::kFilter, line);
    e->name = expect_identifier();
    while (is_op(".")) {
      next();
      e->name += "." + expect_identifier();
    }
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(this);
    auto e = make(ExprKind::kTest, cur().line);
    next();  // is
    if (is_name("not")) {
      e->negated = true;
      next();
    }
    e->name = expect_identifier();
    while (is_op(".")) {
      next();
      e->name += "." + expect_identifier();
    }
    e->args.push_back(std::move(node));
    TokenType t = cur().type;
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
                t == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::vector<Token>& t_;
  const Budget& budget_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int loop_names_ = 0;  // `loop` names parsed so far
};

}  // namespace

Template parse(const std::vector<Token>& tokens, const Budget& budget) {
  return Parser(tokens, budget).run();
}

}  // namespace kiln::tokenizer::jinja
