// Fuzz target: arbitrary bytes parsed as a safetensors file, then every tensor read. Any input must
// give a SafetensorsFile or a kiln::Error, never a crash, a hang or an out-of-bounds read.
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto buffer = kiln::allocate_host(size);
  if (size) std::memcpy(buffer->data(), data, size);
  try {
    auto f = kiln::io::SafetensorsFile::from_buffer(buffer, "fuzz.safetensors");
    for (const auto& name : f->names()) {
      try {
        kiln::Tensor t = f->tensor(name);
        volatile unsigned char sink = 0;
        const auto* p = static_cast<const unsigned char*>(t.raw());
        for (size_t i = 0; i < t.nbytes(); i += 64) sink = sink ^ p[i];
        if (t.nbytes()) sink = sink ^ p[t.nbytes() - 1];
      } catch (const kiln::Error&) {
      }
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
