// Fuzz target: arbitrary bytes parsed as config.json and generation_config.json. Any input must give
// a config or a kiln::Error, never a crash.
#include <string>

#include "kiln/core/error.h"
#include "kiln/generation/generation_config.h"
#include "kiln/io/json.h"
#include "kiln/models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto j = kiln::io::parse_json(text, "config.json");
    try {
      auto c = kiln::models::ModelConfig::from_json(j, "config.json");
      (void)c.rope_inv_freq();
      (void)c.num_parameters();
    } catch (const kiln::Error&) {
    }
    try {
      auto g = kiln::generation::GenerationConfig::from_json(j, "generation_config.json");
      g.validate();
    } catch (const kiln::Error&) {
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
