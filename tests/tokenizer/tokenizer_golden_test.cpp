// Golden tests: the real Qwen3 tokenizer against ids and decodes produced by Hugging Face
// tokenizers (../shared/testdata/tokenizer/*.jsonl), plus round-trip properties.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/tokenizer/decode_stream.h"
#include "kiln/tokenizer/tokenizer.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {
namespace {

const std::string kShared = KILN_SHARED_DIR;

std::shared_ptr<Tokenizer> qwen3() {
  static std::shared_ptr<Tokenizer> tok =
      kiln::AutoTokenizer::from_pretrained(kShared + "/testdata/models/tiny");
  return tok;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

TEST(Qwen3Golden, EncodeEveryLine) {
  auto tok = qwen3();
  auto rows = read_jsonl(kShared + "/testdata/tokenizer/qwen3_encode.jsonl");
  ASSERT_EQ(rows.size(), 193u);
  int failures = 0;
  for (const auto& row : rows) {
    std::string text = row["text"];
    auto want = row["ids"].get<std::vector<int32_t>>();
    auto got = tok->encode(text);
    EXPECT_EQ(got, want) << "group " << row["group"] << " text " << row["text"].dump()
                         << "\n got  " << show(got) << "\n want " << show(want);
    EXPECT_EQ(tok->decode(want), row["decoded"].get<std::string>()) << row["text"].dump();
    EXPECT_EQ(tok->decode(want, {.skip_special_tokens = true}),
              row["decoded_skip_special"].get<std::string>())
        << row["text"].dump();
    if (got != want && ++failures > 10) break;
  }
}

TEST(Qwen3Golden, DecodeEveryLine) {
  auto tok = qwen3();
  auto rows = read_jsonl(kShared + "/testdata/tokenizer/qwen3_decode.jsonl");
  ASSERT_EQ(rows.size(), 18u);
  for (const auto& row : rows) {
    auto ids = row["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->decode(ids), row["decoded"].get<std::string>()) << row["note"];
    EXPECT_EQ(tok->decode(ids, {.skip_special_tokens = true}),
              row["decoded_skip_special"].get<std::string>())
        << row["note"];
  }
}

TEST(Qwen3Golden, PrettyPrintedFileLoadsTheSame) {
  auto pretty = kiln::AutoTokenizer::from_pretrained(kShared + "/models/qwen3-tokenizer");
  auto compact = qwen3();
  EXPECT_EQ(pretty->vocab_size(), 151669);
  EXPECT_EQ(compact->vocab_size(), 151669);
  auto rows = read_jsonl(kShared + "/testdata/tokenizer/qwen3_encode.jsonl");
  for (size_t i = 0; i < rows.size(); i += 7) {
    std::string text = rows[i]["text"];
    EXPECT_EQ(pretty->encode(text), rows[i]["ids"].get<std::vector<int32_t>>()) << text;
  }
}

TEST(Qwen3, SpecialTokensAndAccessors) {
  auto tok = qwen3();
  EXPECT_EQ(tok->eos_token(), "<|im_end|>");
  EXPECT_EQ(tok->eos_token_id(), 151645);
  EXPECT_EQ(tok->pad_token(), "<|endoftext|>");
  EXPECT_EQ(tok->pad_token_id(), 151643);
  EXPECT_FALSE(tok->bos_token().has_value());
  EXPECT_FALSE(tok->bos_token_id().has_value());
  EXPECT_EQ(tok->model_max_length(), 131072);
  EXPECT_EQ(tok->token_to_id("Ġworld"), 1879);
  EXPECT_EQ(tok->token_to_id("<think>"), 151667);
  EXPECT_FALSE(tok->token_to_id("no such token at all").has_value());
  EXPECT_EQ(tok->id_to_token(9707), "Hello");
  EXPECT_FALSE(tok->id_to_token(151700).has_value());
  std::vector<int32_t> ids{9707, 1879, 151645};
  EXPECT_EQ(tok->convert_ids_to_tokens(ids),
            (std::vector<std::string>{"Hello", "Ġworld", "<|im_end|>"}));
  std::vector<int32_t> bad{151700};
  EXPECT_THROW(tok->convert_ids_to_tokens(bad), kiln::Error);
  EXPECT_TRUE(tok->is_special_id(151645));
  EXPECT_FALSE(tok->is_special_id(151667));  // <think> is special=false: kept by skip
  // Qwen3 has no template that adds tokens: add_special_tokens changes nothing.
  EXPECT_EQ(tok->encode("Hello world", {.add_special_tokens = true}),
            tok->encode("Hello world", {.add_special_tokens = false}));
  EXPECT_THROW(tok->encode("bad \xFF utf8"), kiln::Error);
}

TEST(Qwen3, LongPiecesAreFast) {
  auto tok = qwen3();
  std::string x(200000, 'x');  // one piece: the merge loop must be O(n log n)
  auto ids = tok->encode(x);
  EXPECT_EQ(tok->decode(ids), x);
  EXPECT_LT(ids.size(), x.size() / 4);
}

// Random strings over ranges that exercise every pre-tokenizer rule and NFC.
std::string random_text(std::mt19937& rng, size_t max_len) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},   {0x09, 0x0D},     {0xA0, 0x17F},
      {0x300, 0x36F},   {0x370, 0x3FF},   {0x400, 0x4FF}, {0x590, 0x6FF},   {0x900, 0x97F},
      {0xE00, 0xE7F},   {0x1100, 0x11FF}, {0x2000, 0x206F}, {0x2100, 0x218F}, {0x3000, 0x30FF},
      {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFE00, 0xFEFF}, {0xFF00, 0xFFEF},
      {0x1F300, 0x1F6FF}, {0x1D400, 0x1D7FF}, {0x20000, 0x2A6DF}};
  std::uniform_int_distribution<size_t> len_d(0, max_len), range_d(0, ranges.size() - 1);
  size_t len = len_d(rng);
  std::string s;
  for (size_t i = 0; i < len; ++i) {
    auto [lo, hi] = ranges[range_d(rng)];
    char32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (rng() % 50 == 0) {
      s += "<|im_end|>";
      continue;
    }
    utf8_append(s, cp);
  }
  return s;
}

TEST(Qwen3Property, DecodeEncodeIsNfc) {
  auto tok = qwen3();
  std::mt19937 rng(1234);
  for (int n = 0; n < 400; ++n) {
    std::string x = random_text(rng, 60);
    // Added tokens are matched before NFC, so normalize around them as the reference does.
    std::string want;
    size_t i = 0;
    while (true) {
      size_t k = x.find("<|im_end|>", i);
      want += normalize(std::string_view(x).substr(i, k == std::string::npos ? k : k - i),
                        NormForm::NFC);
      if (k == std::string::npos) break;
      want += "<|im_end|>";
      i = k + 10;
    }
    auto ids = tok->encode(x);
    ASSERT_EQ(tok->decode(ids), want) << "case " << n;
    // Streaming gives the same text.
    DecodeStream stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.step(id);
    streamed += stream.flush();
    ASSERT_EQ(streamed, want) << "case " << n;
  }
}

TEST(Qwen3, DecodeStreamHoldsBackIncompleteUtf8) {
  auto tok = qwen3();
  DecodeStream stream(tok);
  // E6 97 A5 (日) as three byte tokens, then "a".
  EXPECT_EQ(stream.step(162), "");
  EXPECT_EQ(stream.step(245), "");
  EXPECT_EQ(stream.step(98), "日");
  EXPECT_EQ(stream.step(64), "a");
  EXPECT_EQ(stream.step(172), "");  // F0: incomplete at the end
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  DecodeStream skip(tok, {.skip_special_tokens = true});
  EXPECT_EQ(skip.step(162), "");
  EXPECT_EQ(skip.step(245), "");
  EXPECT_EQ(skip.step(151645), "");
  EXPECT_EQ(skip.step(98), "日");
}

TEST(Qwen3, ConcurrentEncodesAgree) {
  auto tok = qwen3();
  auto rows = read_jsonl(kShared + "/testdata/tokenizer/qwen3_encode.jsonl");
  std::vector<std::string> texts;
  for (const auto& r : rows) texts.push_back(r["text"]);
  auto batch = tok->encode_batch(texts, {.padding = Padding::kLongest});
  ASSERT_EQ(batch.ids.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(batch.ids[i], rows[i]["ids"].get<std::vector<int32_t>>()) << texts[i];
}

}  // namespace
}  // namespace kiln::tokenizer
