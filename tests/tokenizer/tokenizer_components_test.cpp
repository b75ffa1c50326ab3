// Components beyond what Qwen3 uses (a hand-written Llama-style tokenizer.json), batch encoding,
// errors, the BPE merge paths, the hand-coded regexes, and the CLI.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/tokenizer/bpe.h"
#include "kiln/tokenizer/pre_tokenizer.h"
#include "kiln/tokenizer/tokenizer.h"
#include "kiln/tokenizer/tokenizer_json.h"
#include "kiln/tokenizer/unicode.h"
#include "tests/support.h"

namespace kiln::tokenizer {
namespace {

using nlohmann::json;
const std::string kShared = KILN_SHARED_DIR;
const std::string kTiny = kShared + "/testdata/models/tiny";

std::shared_ptr<Tokenizer> qwen3() {
  static std::shared_ptr<Tokenizer> tok = Tokenizer::from_pretrained(kTiny);
  return tok;
}

// A SentencePiece-style BPE tokenizer.json as Llama 2 ships it: Prepend/Replace normalizers,
// byte_fallback, <0xXX> tokens, a decoder that undoes all that, and a BOS template.
json llama_json() {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* t : {"▁", "h", "e", "l", "o", "w", "r", "d", "ll", "▁h", "▁he", "llo", "▁hello",
                        "▁w", "or", "▁wor", "▁worl", "▁world"})
    vocab[t] = next++;
  json merges = {"l l",   "▁ h",      "▁h e",   "ll o",    "▁he llo",
                 "▁ w",   "o r",      "▁w or",  "▁wor l",  "▁worl d"};
  auto special = [](int id, const char* content) {
    return json{{"id", id},         {"content", content}, {"single_word", false},
                {"lstrip", false},  {"rstrip", false},    {"normalized", false},
                {"special", true}};
  };
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merges}}}};
}

int32_t id(const std::shared_ptr<Tokenizer>& t, const char* token) {
  auto v = t->token_to_id(token);
  EXPECT_TRUE(v.has_value()) << token;
  return v.value_or(-1);
}

TEST(LlamaStyle, PrependReplaceByteFallbackTemplate) {
  auto t = Tokenizer::from_json(llama_json().dump());
  const int32_t hello = id(t, "▁hello"), world = id(t, "▁world");
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{1, hello, world}));
  EXPECT_EQ(t->encode("hello world", {.add_special_tokens = false}),
            (std::vector<int32_t>{hello, world}));
  // é is not in the vocabulary: its UTF-8 bytes C3 A9 become <0xC3> <0xA9>.
  std::vector<int32_t> ids = t->encode("hé");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, id(t, "▁h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(ids), "<s> hé");
  EXPECT_EQ(t->decode(ids, {.skip_special_tokens = true}), "hé");
  // Special tokens split the text; Prepend applies to each remaining segment.
  EXPECT_EQ(t->encode("hello</s>"), (std::vector<int32_t>{1, hello, 2}));
  EXPECT_EQ(t->encode("</s>hello"), (std::vector<int32_t>{1, 2, hello}));
  // Invalid byte sequences decode to one U+FFFD per byte (ByteFallback).
  std::vector<int32_t> bad{3 + 0xE6, 3 + 0x97};
  EXPECT_EQ(t->decode(bad), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t->vocab_size(), 3 + 256 + 18);
}

TEST(LlamaStyle, UnkAndFuseUnk) {
  json j = llama_json();
  j["model"]["byte_fallback"] = false;
  auto fused = Tokenizer::from_json(j.dump());
  EXPECT_EQ(fused->encode("héé", {.add_special_tokens = false}),
            (std::vector<int32_t>{id(fused, "▁h"), 0}));
  j["model"]["fuse_unk"] = false;
  auto unfused = Tokenizer::from_json(j.dump());
  EXPECT_EQ(unfused->encode("héé", {.add_special_tokens = false}),
            (std::vector<int32_t>{id(unfused, "▁h"), 0, 0}));
}

TEST(LlamaStyle, MetaspacePreTokenizerAndDecoder) {
  json j = llama_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"},
                        {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"},
                  {"split", false}};
  auto t = Tokenizer::from_json(j.dump());
  const int32_t hello = id(t, "▁hello"), world = id(t, "▁world");
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{1, hello, world}));
  // "first": only the segment at the start of the input gets the prefix.
  EXPECT_EQ(t->encode("</s>hello", {.add_special_tokens = false}),
            (std::vector<int32_t>{2, id(t, "h"), id(t, "e"), id(t, "llo")}));
  std::vector<int32_t> ids{hello, world};
  EXPECT_EQ(t->decode(ids), "hello world");
  // split=true cuts before each ▁; the result is the same pieces here.
  j["pre_tokenizer"]["split"] = true;
  auto t2 = Tokenizer::from_json(j.dump());
  EXPECT_EQ(t2->encode("hello world"), (std::vector<int32_t>{1, hello, world}));
}

TEST(LlamaStyle, AddedTokenStripAndSingleWord) {
  json j = llama_json();
  j["added_tokens"].push_back({{"id", 300}, {"content", "[X]"}, {"single_word", true},
                               {"lstrip", true}, {"rstrip", true}, {"normalized", false},
                               {"special", false}});
  auto t = Tokenizer::from_json(j.dump());
  const int32_t hello = id(t, "▁hello");
  // lstrip/rstrip swallow the spaces around the token.
  EXPECT_EQ(t->encode("hello [X] hello", {.add_special_tokens = false}),
            (std::vector<int32_t>{hello, 300, hello}));
  // single_word: not matched inside a word.
  auto ids = t->encode("hello[X]", {.add_special_tokens = false});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 300), 0);
  EXPECT_FALSE(t->is_special_id(300));
  std::vector<int32_t> one{300};
  EXPECT_EQ(t->decode(one, {.skip_special_tokens = true}), "[X]");
}

TEST(Batch, PaddingAndTruncation) {
  auto t = qwen3();
  // "Hello world" = [9707, 1879], "a" = [64]; pad = <|endoftext|> 151643.
  auto right = t->encode_batch({"Hello world", "a"}, {.padding = Padding::kLongest});
  ASSERT_EQ(right.input_ids.shape(), (Shape{2, 2}));
  EXPECT_EQ(right.input_ids.dtype(), DType::i32);
  const int32_t* p = right.input_ids.data<int32_t>();
  const int32_t* m = right.attention_mask.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(p, p + 4), (std::vector<int32_t>{9707, 1879, 64, 151643}));
  EXPECT_EQ(std::vector<int32_t>(m, m + 4), (std::vector<int32_t>{1, 1, 1, 0}));

  auto left = t->encode_batch({"Hello world", "a"},
                              {.padding = Padding::kMaxLength, .max_length = 4,
                               .padding_side = Side::kLeft});
  ASSERT_EQ(left.input_ids.shape(), (Shape{2, 4}));
  p = left.input_ids.data<int32_t>();
  m = left.attention_mask.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(p, p + 8),
            (std::vector<int32_t>{151643, 151643, 9707, 1879, 151643, 151643, 151643, 64}));
  EXPECT_EQ(std::vector<int32_t>(m, m + 8), (std::vector<int32_t>{0, 0, 1, 1, 0, 0, 0, 1}));

  auto cut = t->encode_batch({"Hello world", "a"},
                             {.padding = Padding::kLongest, .truncation = true, .max_length = 1});
  ASSERT_EQ(cut.input_ids.shape(), (Shape{2, 1}));
  EXPECT_EQ(cut.ids[0], (std::vector<int32_t>{9707}));
  auto cut_left = t->encode_batch({"Hello world"}, {.padding = Padding::kNone, .truncation = true,
                                                    .max_length = 1,
                                                    .truncation_side = Side::kLeft});
  EXPECT_EQ(cut_left.ids[0], (std::vector<int32_t>{1879}));

  auto multiple = t->encode_batch({"Hello world", "a"},
                                  {.padding = Padding::kLongest, .pad_to_multiple_of = 8});
  EXPECT_EQ(multiple.input_ids.shape(), (Shape{2, 8}));

  EXPECT_THROW(t->encode_batch({"Hello world", "a"}, {.padding = Padding::kNone}), kiln::Error);
  auto same = t->encode_batch({"a", "b"}, {.padding = Padding::kNone});
  EXPECT_EQ(same.input_ids.shape(), (Shape{2, 1}));
  auto empty = t->encode_batch({}, {});
  EXPECT_EQ(empty.input_ids.shape(), (Shape{0, 0}));
}

TEST(Batch, BosTemplateCountsTowardsMaxLength) {
  auto t = Tokenizer::from_json(llama_json().dump());
  auto b = t->encode_batch({"hello world"}, {.padding = Padding::kNone, .truncation = true,
                                             .max_length = 2});
  EXPECT_EQ(b.ids[0], (std::vector<int32_t>{1, id(t, "▁hello")}));
  // No pad token in this tokenizer: padding that needs one is an error naming it.
  try {
    t->encode_batch({"hello world", "hello"}, {.padding = Padding::kLongest});
    FAIL() << "expected kiln::Error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad_token"), std::string::npos) << e.what();
  }
}

void expect_error(const std::string& tokenizer_json, const std::string& needle) {
  try {
    Tokenizer::from_json(tokenizer_json, "", "/models/x/tokenizer.json");
    FAIL() << "expected kiln::Error containing " << needle;
  } catch (const kiln::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("/models/x/tokenizer.json"), std::string::npos) << what;
  }
}

TEST(Errors, UnsupportedComponentsAreNamed) {
  json j = llama_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j.dump(), "BertNormalizer");
  j = llama_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+|[^\\w\\s]+"}}},
                        {"behavior", "Isolated"}, {"invert", false}};
  expect_error(j.dump(), "\\w+|[^\\w\\s]+");
  j = llama_json();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_error(j.dump(), "BertPreTokenizer");
  j = llama_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j.dump(), "WordPiece");
  j = llama_json();
  j["post_processor"] = {{"type", "SomethingNew"}};
  expect_error(j.dump(), "SomethingNew");
  j = llama_json();
  j["model"]["type"] = "Unigram";
  expect_error(j.dump(), "Unigram");
  j = llama_json();
  j["model"]["dropout"] = 0.1;
  expect_error(j.dump(), "dropout");
  j = llama_json();
  j["model"]["merges"].push_back("▁hello zzz");
  expect_error(j.dump(), "zzz");
  j = llama_json();
  j["model"]["merges"].push_back("no_space");
  expect_error(j.dump(), "merges[10]");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, ", "invalid JSON");
  expect_error("[1, 2]", "object");
}

TEST(Errors, MissingFiles) {
  EXPECT_THROW(Tokenizer::from_pretrained("/nonexistent/kiln/model"), kiln::Error);
  auto dir = std::filesystem::temp_directory_path() / "kiln_tok_missing_test";
  std::filesystem::create_directories(dir);
  try {
    Tokenizer::from_pretrained(dir.string());
    FAIL() << "expected kiln::Error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  }
  // Malformed JSON: the error names the file and the line.
  std::ofstream(dir / "tokenizer.json") << "{\n  \"model\": {\n    \"vocab\": {\"a\": 0,}\n";
  try {
    Tokenizer::from_pretrained(dir.string());
    FAIL() << "expected kiln::Error";
  } catch (const kiln::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find((dir / "tokenizer.json").string()), std::string::npos) << what;
    EXPECT_NE(what.find("line 3"), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

TEST(Bpe, HeapAndShortPathsAgree) {
  std::string text = io::read_file(kTiny + "/tokenizer.json");
  TokenizerJson tj = parse_tokenizer_json(text, "tokenizer.json");
  auto bpe = BpeModel::from_json(tj.doc["model"], tj, "tokenizer.json");
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    size_t len = 2 + rng() % 60;
    std::vector<int32_t> symbols;
    for (size_t k = 0; k < len; ++k) {
      char c = "aaabcdeeefghiilmnnooprssttu "[rng() % 28];
      symbols.push_back(*bpe->token_to_id(c == ' ' ? "Ġ" : std::string(1, c)));
    }
    auto small = symbols, heap = symbols;
    bpe->merge(small, false);
    bpe->merge(heap, true);
    ASSERT_EQ(small, heap) << "case " << n;
  }
}

std::vector<std::string> split(KnownRegex re, const std::string& s) {
  std::vector<std::string> out;
  for (auto [b, e] : find_regex_matches(re, s)) out.push_back(s.substr(b, e - b));
  return out;
}

TEST(Regex, QwenLlamaGpt2Rules) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split(KnownRegex::kQwen2, "x  \n  y"), (V{"x", "  \n", " ", " y"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "abc   "), (V{"abc", "   "}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "!!!\n\nx"), (V{"!!!\n\n", "x"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "I'M HERE"), (V{"I", "'M", " HERE"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "'tis"), (V{"'t", "is"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(KnownRegex::kLlama3, "12345"), (V{"123", "45"}));
  EXPECT_EQ(split(KnownRegex::kQwen2, "$hello\tworld"), (V{"$hello", "\tworld"}));
  EXPECT_EQ(split(KnownRegex::kGpt2, "Hello  world's 42!!"),
            (V{"Hello", " ", " world", "'s", " 42", "!!"}));
  EXPECT_EQ(split(KnownRegex::kGpt2, "I'M"), (V{"I", "'", "M"}));  // case-sensitive
}

TEST(Unicode, LossyUtf8MaximalSubparts) {
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80").size(), 12u);
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80").size(), 9u);
  EXPECT_EQ(utf8_lossy("\xEF\xBB\xBFx"), "\xEF\xBB\xBFx");  // BOM kept
  EXPECT_EQ(utf8_incomplete_tail("ab\xE6\x97"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE6\x97\xA5"), 0u);
}

std::string run(const std::string& cmd) { return kiln::test_support::run_command(cmd); }

TEST(Cli, TokenizeAndDetokenize) {
  const std::string kiln_bin = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln";
  if (!std::filesystem::exists(kiln_bin)) GTEST_SKIP() << "kiln binary not built: " << kiln_bin;
  // A folder holding only tokenizer files works.
  std::string dir = kShared + "/models/qwen3-tokenizer";
  json out = json::parse(run(kiln_bin + " tokenize " + dir + " 'Hello world' --json"));
  EXPECT_EQ(out["ids"], json({9707, 1879}));
  EXPECT_EQ(out["tokens"], json({"Hello", "Ġworld"}));
  EXPECT_EQ(run(kiln_bin + " tokenize " + kTiny + " 'Hello world'"), "9707 1879\nHello Ġworld\n");
  json text = json::parse(
      run(kiln_bin + " detokenize " + kTiny + " 9707,1879,151645 --skip-special-tokens --json"));
  EXPECT_EQ(text["text"], "Hello world");
  EXPECT_EQ(run(kiln_bin + " detokenize " + kTiny + " 9707,1879,151645"),
            "Hello world<|im_end|>\n");
  EXPECT_NE(run(kiln_bin + " detokenize " + kTiny + " 1,x 2>&1").find("IDS"), std::string::npos);
}

}  // namespace
}  // namespace kiln::tokenizer
