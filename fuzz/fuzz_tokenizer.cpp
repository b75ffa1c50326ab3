// libFuzzer target for the tokenizer. The first input byte picks the mode:
//   even: the rest is a tokenizer.json to load (then, if it loads, some text to encode/decode);
//   odd:  the rest is text (arbitrary bytes) for the real Qwen3 tokenizer, which is loaded once from
//         $KILN_FUZZ_TOKENIZER_DIR or else ../shared/testdata/models/tiny next to the repository.
// kiln::Error is the expected outcome of bad input; any other exception, crash or sanitizer report
// is a bug. For Qwen3, decode(encode(x)) must equal x's NFC form when x has no added tokens.
//   CXX=clang++ cmake -DKILN_FUZZ=ON ... && fuzz_tokenizer -max_total_time=60
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kiln/core/error.h"
#include "kiln/tokenizer/tokenizer.h"
#include "kiln/tokenizer/unicode.h"

namespace {

std::shared_ptr<kiln::tokenizer::Tokenizer> qwen3() {
  static std::shared_ptr<kiln::tokenizer::Tokenizer> tok = [] {
    std::string dir;
    if (const char* d = std::getenv("KILN_FUZZ_TOKENIZER_DIR")) {
      dir = d;
    } else {
      auto repo = std::filesystem::path(__FILE__).parent_path().parent_path();
      dir = (repo.parent_path() / "shared/testdata/models/tiny").string();
    }
    return kiln::AutoTokenizer::from_pretrained(dir);
  }();
  return tok;
}

void exercise(const kiln::tokenizer::Tokenizer& tok, const std::string& text, bool check_round_trip) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const kiln::Error&) {
    return;  // invalid UTF-8
  }
  std::string back = tok.decode(ids);
  (void)tok.decode(ids, {.skip_special_tokens = true});
  if (check_round_trip && text.find("<") == std::string::npos) {
    std::string want = kiln::tokenizer::normalize(text, kiln::tokenizer::NormForm::NFC);
    if (back != want) std::abort();
  }
  // Arbitrary ids, including unknown ones, decode without failing.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 4 <= text.size() && raw.size() < 64; i += 4)
    raw.push_back(int32_t(uint32_t(uint8_t(text[i])) | uint32_t(uint8_t(text[i + 1])) << 8 |
                          uint32_t(uint8_t(text[i + 2])) << 16 | uint32_t(uint8_t(text[i + 3])) << 24));
  (void)tok.decode(raw);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1) {
    exercise(*qwen3(), rest, true);
    return 0;
  }
  std::shared_ptr<kiln::tokenizer::Tokenizer> tok;
  try {
    tok = kiln::tokenizer::Tokenizer::from_json(rest, "", "fuzz/tokenizer.json");
  } catch (const kiln::Error&) {
    return 0;
  }
  exercise(*tok, "Hello world! 123 héllo 日本語 <s> </s>", false);
  return 0;
}
