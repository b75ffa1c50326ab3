// Jinja lexer, following jinja2's lexer rule for rule with trim_blocks and lstrip_blocks on (as
// Transformers configures it): newlines normalised to "\n", one trailing newline dropped, `{%-`
// and `-%}` strip whitespace, lstrip_blocks strips a block's indentation, trim_blocks drops the
// newline after a block or comment tag, comments vanish, raw blocks become data.
//
// Example:
//   auto tokens = jinja::tokenize("{% if x %}\n  hi\n{% endif %}", budget);
#pragma once

#include <string>
#include <vector>

#include "kiln/tokenizer/jinja/value.h"

namespace kiln::tokenizer::jinja {

enum class TokenType { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString,
                       kInteger, kFloat, kOperator, kEof };

struct Token {
  TokenType type;
  std::string value;  // data text, name, decoded string literal, number text, operator
  int line;
};

// Throws TemplateError (with the line) on lexical errors.
std::vector<Token> tokenize(const std::string& source, Budget& budget);

}  // namespace kiln::tokenizer::jinja
