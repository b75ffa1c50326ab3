// Syntax tree of a Jinja template. Built by the parser, walked by the interpreter; every node keeps
// its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tokenizer/jinja/value.h"

namespace kiln::tokenizer::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,     // literal
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key0, value0, key1, value1, ...
  kGetattr,   // args[0].name
  kGetitem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (missing parts are null)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..], kwargs); negated
  kUnary,     // name ("-", "+", "not") args[0]
  kBinary,    // args[0] name args[1]: + - * / // % ** ~
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  std::string name;
  Value value;  // kConst
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest
};

enum class StmtKind {
  kData,      // text
  kPrint,     // {{ expr }}
  kIf,        // if expr: body else else_body (elif is a nested If)
  kFor,       // for target in expr [if cond]: body else else_body
  kSet,       // set target = expr
  kSetBlock,  // set target: body (captured), optional filter in expr (applied to a null arg)
  kMacro,     // macro name(params=defaults): body
  kBreak,
  kContinue,
  kBlock,     // a plain body (e.g. {% generation %})
  kFilterBlock,  // {% filter f %}body{% endfilter %}: expr is the filter with a null operand
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;  // for-loop filter
  StmtList body;
  StmtList else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null when none
  bool uses_loop = true;  // kFor: the body or filter names `loop` (else the loop object is skipped)
};

struct Template {
  StmtList body;
};

}  // namespace kiln::tokenizer::jinja
