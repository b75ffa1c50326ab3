// Tokenizer throughput on a few MB of mixed English / code / CJK text, generated deterministically
// here (plus /usr/share/common-licenses when present), cut into 4 KB chunks.
//   build-*/bench/bench_tokenizer [--benchmark_filter=Encode]
// Reports bytes_per_second (MB/s of UTF-8 input). KILN_TOKENIZER_DIR overrides the tokenizer folder.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kiln/core/threads.h"
#include "kiln/tokenizer/tokenizer.h"
#include "kiln/tokenizer/unicode.h"

namespace {

std::string tokenizer_dir() {
  if (const char* d = std::getenv("KILN_TOKENIZER_DIR")) return d;
  // The repository's sibling shared/ folder, found from this file's path.
  auto repo = std::filesystem::path(__FILE__).parent_path().parent_path();
  return (repo.parent_path() / "shared/testdata/models/tiny").string();
}

std::shared_ptr<kiln::tokenizer::Tokenizer> tok() {
  static auto t = kiln::AutoTokenizer::from_pretrained(tokenizer_dir());
  return t;
}

std::string mixed_text(size_t bytes) {
  std::mt19937 rng(42);
  static const char* words[] = {"the", "model", "tokenizer", "runs", "quickly", "on", "every",
                                "core", "and", "returns", "exactly", "what", "Hugging", "Face",
                                "produces", "for", "Qwen3", "don't", "it's", "we'll", "data",
                                "inference", "training", "batch", "of", "12345", "3.14159"};
  static const char* code[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += x[i] * w[i];\n}\n",
      "def forward(self, x):\n    return self.proj(torch.relu(x)) + 1e-6\n",
      "    if (!ok) throw kiln::Error(\"where\", \"what\");\n",
      "SELECT id, name FROM users WHERE age > 30 ORDER BY name;\n",
      "https://example.com/path?q=tokenizer&lang=en#section-2\n"};
  static const char* cjk[] = {"日本語のテキストを処理します。", "机器学习模型的推理速度很快。",
                              "한국어 문장도 포함됩니다. ", "Ελληνικά και русский текст. ",
                              "emoji 😀👍🏽 and accents: café naïve résumé. "};
  std::string out;
  // Real prose first, when the machine has it.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses", ec)) {
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    if (kiln::tokenizer::utf8_invalid_at(s) == kiln::tokenizer::kNpos) out += s;
    if (out.size() > bytes / 3) break;
  }
  while (out.size() < bytes) {
    int kind = int(rng() % 10);
    if (kind < 5) {
      for (int k = 0; k < 12; ++k) {
        out += words[rng() % (sizeof(words) / sizeof(*words))];
        out += (k == 11 ? ". " : " ");
      }
    } else if (kind < 8) {
      out += code[rng() % (sizeof(code) / sizeof(*code))];
    } else {
      out += cjk[rng() % (sizeof(cjk) / sizeof(*cjk))];
    }
  }
  return out;
}

// 4 KB chunks cut at character boundaries.
const std::vector<std::string>& chunks() {
  static const std::vector<std::string> c = [] {
    std::string text = mixed_text(size_t(4) << 20);
    std::vector<std::string> out;
    size_t i = 0;
    while (i < text.size()) {
      size_t e = std::min(text.size(), i + 4096);
      while (e < text.size() && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) ++e;
      out.push_back(text.substr(i, e - i));
      i = e;
    }
    return out;
  }();
  return c;
}

int64_t total_bytes() {
  int64_t n = 0;
  for (const auto& c : chunks()) n += int64_t(c.size());
  return n;
}

void BM_LoadTokenizer(benchmark::State& state) {
  for (auto _ : state) {
    auto t = kiln::AutoTokenizer::from_pretrained(tokenizer_dir());
    benchmark::DoNotOptimize(t.get());
  }
}
BENCHMARK(BM_LoadTokenizer)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_EncodeSingleThread(benchmark::State& state) {
  auto t = tok();
  const auto& c = chunks();
  int64_t tokens = 0;
  for (auto _ : state)
    for (const auto& s : c) tokens += int64_t(t->encode(s).size());
  state.SetBytesProcessed(state.iterations() * total_bytes());
  state.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeSingleThread)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EncodeBatch(benchmark::State& state) {
  auto t = tok();
  const auto& c = chunks();
  for (auto _ : state) {
    auto b = t->encode_batch(c, {.padding = kiln::tokenizer::Padding::kLongest});
    benchmark::DoNotOptimize(b.input_ids.raw());
  }
  state.SetBytesProcessed(state.iterations() * total_bytes());
  state.counters["threads"] = kiln::num_threads();
}
BENCHMARK(BM_EncodeBatch)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Decode(benchmark::State& state) {
  auto t = tok();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : chunks()) ids.push_back(t->encode(s));
  for (auto _ : state)
    for (const auto& v : ids) benchmark::DoNotOptimize(t->decode(v).size());
  state.SetBytesProcessed(state.iterations() * total_bytes());
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
