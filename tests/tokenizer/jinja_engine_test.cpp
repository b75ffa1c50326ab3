// The Jinja engine's guarantees beyond jinja2 parity: errors name the template line, and hostile
// templates stop quickly with kiln::Error at the limits instead of hanging or exhausting memory.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiln/core/error.h"
#include "kiln/tokenizer/jinja/template.h"

namespace jinja = kiln::tokenizer::jinja;
using OJ = nlohmann::ordered_json;

namespace {

std::string render(const std::string& src, const OJ& ctx = OJ::object(), const jinja::Limits& limits = {}) {
  return jinja::render(src, ctx, "t.jinja", limits);
}

// Renders `src`, expects a kiln::Error within a second, and returns it.
kiln::Error expect_error(const std::string& src, const jinja::Limits& limits = {}) {
  auto start = std::chrono::steady_clock::now();
  try {
    render(src, OJ::object(), limits);
  } catch (const kiln::Error& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 5.0) << "took too long to stop: " << src.substr(0, 80);
    return e;
  }
  ADD_FAILURE() << "expected an error for: " << src.substr(0, 80);
  return kiln::Error("", "");
}

}  // namespace

TEST(JinjaEngine, ErrorsNameTheLine) {
  EXPECT_EQ(expect_error("a\nb\n{{ x.y }}").where(), "t.jinja:3");
  EXPECT_EQ(expect_error("{% if true %}\n\n\n{% endfor %}").where(), "t.jinja:4");
  EXPECT_EQ(expect_error("{# one\ntwo #}\n{{ 'unterminated }}").where(), "t.jinja:3");
  kiln::Error e = expect_error("{% for m in [1] %}\n  {{ raise_exception('no ' ~ m) }}\n{% endfor %}");
  EXPECT_EQ(e.where(), "t.jinja:2");
  EXPECT_EQ(std::string(e.what()), "[t.jinja:2] no 1");
  EXPECT_EQ(expect_error("{% set x = 1 %}\n{{ x + none }}").where(), "t.jinja:2");
}

TEST(JinjaEngine, LoopLimit) {
  jinja::Limits limits;
  limits.max_loop_iterations = 1000;
  EXPECT_EQ(render("{% for i in range(1000) %}{% endfor %}ok", OJ::object(), limits), "ok");
  kiln::Error e = expect_error("{% for i in range(1001) %}{% endfor %}", limits);
  EXPECT_NE(std::string(e.what()).find("loop iterations"), std::string::npos) << e.what();
  // Nested loops count together: 100000^3 iterations would never finish.
  limits.max_loop_iterations = 200'000;
  expect_error(
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      limits);
}

TEST(JinjaEngine, OutputAndAllocationLimits) {
  jinja::Limits limits;
  limits.max_output_bytes = 1 << 20;
  kiln::Error e = expect_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", limits);
  EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  expect_error("{{ 'x' * 1000000000000 }}", limits);
  // An empty sequence times any count is empty, at once (it once looped the count's times).
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(render("{{ [] * 6666666670 }}|{{ '' * 6666666670 }}|{{ (() * 9000000000)|length }}|"
                   "{{ 3000000000 * [] }}",
                   OJ::object(), limits),
            "[]||0|[]");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  // Doubling a string or a list quickly exceeds the limits.
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", limits);
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", limits);
  // Shared sub-lists: printing 2^40 elements stops at the output limit.
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
               "{% endfor %}{{ ns.l }}", limits);
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
               "{% endfor %}{{ ns.l|tojson }}", limits);
}

TEST(JinjaEngine, DepthLimits) {
  // Deep expressions and statements in the source: parser limit.
  std::string deep_expr = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  expect_error(deep_expr);
  std::string deep_list = "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}";
  expect_error(deep_list);
  std::string deep_if;
  for (int i = 0; i < 5000; ++i) deep_if += "{% if true %}";
  expect_error(deep_if);
  std::string nots = "{{ " ;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  expect_error(nots + "1 }}");
  // Unbounded macro recursion: evaluator limit.
  kiln::Error e = expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(std::string(e.what()).find("deep"), std::string::npos) << e.what();
  // Exponential macro recursion: step limit.
  jinja::Limits limits;
  limits.max_steps = 200'000;
  expect_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
               limits);
  // Values nested by a loop: value depth limit.
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}");
  // A namespace cannot hold itself (no reference cycles).
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}");
  expect_error("{% set ns = namespace() %}{% set ns.l = [ns] %}");
}

// Found by the chat-template fuzzer: a slice inside a tuple subscript was evaluated as a whole
// slice expression and read past its operands.
TEST(JinjaEngine, SliceInsideATupleSubscriptIsAnError) {
  kiln::Error e = expect_error("{{ x[1:2, 3] }}");
  EXPECT_NE(std::string(e.what()).find("slice inside a tuple subscript"), std::string::npos) << e.what();
  expect_error("{{ 'abc'[0, ::2] }}");
  EXPECT_EQ(render("{{ 'abcdef'[1:5:2] }}|{{ [1, 2, 3][:2] }}|{{ {'a': 1}['a'] }}"), "bd|[1, 2]|1");
}

TEST(JinjaEngine, NoIoAndOnlyGivenData) {
  expect_error("{% include '/etc/passwd' %}");
  expect_error("{% import 'x' as y %}");
  expect_error("{% extends 'base' %}");
  // Python internals are not reachable.
  EXPECT_EQ(render("{{ ''.__class__ }}|{{ messages.__init__ }}|{{ cycler }}", OJ{{"messages", OJ::array()}}), "||");
}

TEST(JinjaEngine, WhitespaceControlEdgeCases) {
  // lstrip_blocks applies only when the tag starts its line; trim_blocks removes one newline.
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("a {% if true %}\nb{% endif %}"), "a b");
  EXPECT_EQ(render("  {{ 'x' }}\n"), "  x");
  EXPECT_EQ(render("{% if true %}\n\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("{{- ' a ' -}}"), " a ");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}
