// One call to render a Jinja template as Transformers does (jinja2 with trim_blocks and
// lstrip_blocks, loop controls, raise_exception, strftime_now, Python-json tojson), under Limits.
//
// Example:
//   std::string s = jinja::render("{{ x | tojson }}", {{"x", {1, 2}}}, "inline");  // "[1, 2]"
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/tokenizer/jinja/value.h"

namespace kiln::tokenizer::jinja {

// Renders `source` with the members of `context` (a JSON object) as variables. Syntax and runtime
// errors, including raise_exception and exceeded limits, are kiln::Error("<where>:<line>", ...).
std::string render(const std::string& source, const nlohmann::ordered_json& context,
                   const std::string& where, const Limits& limits = {});

}  // namespace kiln::tokenizer::jinja
