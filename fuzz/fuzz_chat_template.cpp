// libFuzzer target: arbitrary bytes as a chat template, rendered with a fixed conversation. Must
// never crash, hang or exhaust memory: every failure is a kiln::Error. Limits are lowered so each
// input finishes fast.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/tokenizer/chat_template.h"
#include "kiln/tokenizer/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are kiln."},
      {"role": "user", "content": "Hi <tool_response>é🙂</tool_response>"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello",
       "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "42"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  kiln::tokenizer::jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_loop_iterations = 20'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_alloc_bytes = 64 << 20;
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    kiln::tokenizer::jinja::render(source, context, "fuzz", limits);
  } catch (const kiln::Error&) {
  }
  return 0;
}
