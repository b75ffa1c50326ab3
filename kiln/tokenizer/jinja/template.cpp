#include "kiln/tokenizer/jinja/template.h"

#include "kiln/core/error.h"
#include "kiln/tokenizer/jinja/interpreter.h"
#include "kiln/tokenizer/jinja/lexer.h"
#include "kiln/tokenizer/jinja/parser.h"

namespace kiln::tokenizer::jinja {

std::string render(const std::string& source, const nlohmann::ordered_json& context,
                   const std::string& where, const Limits& limits) {
  if (!context.is_object()) throw kiln::Error(where, "template context must be a JSON object");
  Budget budget(limits);
  int line = 0;
  try {
    Template tpl = parse(tokenize(source, budget), budget);
    Interpreter interp(budget, Value::from_json(context, budget));
    return interp.render(tpl);
  } catch (const RaisedError& e) {
    line = e.line();
    throw kiln::Error(line ? where + ":" + std::to_string(line) : where, e.what());
  } catch (const TemplateError& e) {
    line = e.line();
    throw kiln::Error(line ? where + ":" + std::to_string(line) : where,
                      std::string("chat template error: ") + e.what());
  }
}

}  // namespace kiln::tokenizer::jinja
