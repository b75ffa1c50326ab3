// Jinja parser: tokens to syntax tree, following jinja2's grammar and operator precedence (filters
// and tests bind tighter than arithmetic, `**` is left-associative, `a if c` without else is
// Undefined). Nesting deeper than Limits::max_depth is a TemplateError, so hostile templates cannot
// overflow the stack.
//
// Example:
//   jinja::Template t = jinja::parse(jinja::tokenize(source, budget), budget);
#pragma once

#include <vector>

#include "kiln/tokenizer/jinja/ast.h"
#include "kiln/tokenizer/jinja/lexer.h"

namespace kiln::tokenizer::jinja {

Template parse(const std::vector<Token>& tokens, const Budget& budget);

}  // namespace kiln::tokenizer::jinja
