#include "kiln/generation/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/models/config.h"

namespace kiln::generation {
namespace {

const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

std::string error_where(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.where();
  }
  return "<no error>";
}

TEST(GenerationConfig, DefaultsMatchTransformers) {
  GenerationConfig c;
  EXPECT_EQ(c.max_new_tokens, 20);
  EXPECT_FALSE(c.max_length);
  EXPECT_FALSE(c.do_sample);
  EXPECT_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_EQ(c.top_p, 1.0);
  EXPECT_FALSE(c.min_p);
  EXPECT_EQ(c.repetition_penalty, 1.0);
  EXPECT_FALSE(c.seed);
  EXPECT_TRUE(c.eos_token_id.empty());
  EXPECT_FALSE(c.disable_compile);
  EXPECT_NO_THROW(c.validate());
}

TEST(GenerationConfig, ReadsTheTinyModelsFile) {
  auto model = models::ModelConfig::from_pretrained(kTiny);
  auto c = GenerationConfig::from_pretrained(kTiny, model);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(c.pad_token_id, 151643);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_FALSE(c.do_sample);
  EXPECT_TRUE(c.is_eos(151643));
  EXPECT_FALSE(c.is_eos(0));
}

TEST(GenerationConfig, ReadsQwen3SamplingDefaults) {
  // Qwen3-0.6B's generation_config.json.
  auto j = io::parse_json(R"({"bos_token_id": 151643, "do_sample": true,
      "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6,
      "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})", "g.json");
  auto c = GenerationConfig::from_json(j, "g.json");
  EXPECT_TRUE(c.do_sample);
  EXPECT_DOUBLE_EQ(c.temperature, 0.6);
  EXPECT_EQ(c.top_k, 20);
  EXPECT_DOUBLE_EQ(c.top_p, 0.95);
  EXPECT_EQ(c.max_new_tokens, 20);
}

TEST(GenerationConfig, ScalarsListsAndNulls) {
  auto c = GenerationConfig::from_json(
      io::parse_json(R"({"eos_token_id": 2, "top_k": null, "temperature": 1, "min_p": 0.1,
          "stop_strings": "###", "max_new_tokens": 64, "max_length": 100, "seed": 5,
          "_from_model_config": true, "use_cache": true, "num_beams": 1, "typical_p": 1.0,
          "output_scores": false, "disable_compile": true})",
                     "g"),
      "g");
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.top_k, 0);  // null: no top-k, as Transformers skips the warper
  EXPECT_EQ(c.min_p, 0.1);
  EXPECT_EQ(c.stop_strings, (std::vector<std::string>{"###"}));
  EXPECT_EQ(c.max_new_tokens, 64);
  EXPECT_EQ(c.max_length, 100);
  EXPECT_EQ(c.seed, 5u);
  EXPECT_TRUE(c.disable_compile);
  EXPECT_EQ(c.effective_pad_token_id(), 2);  // no pad: the first eos
}

TEST(GenerationConfig, RefusesWhatItCannotHonour) {
  auto parse = [](const std::string& text) {
    return [text] { GenerationConfig::from_json(io::parse_json(text, "g.json"), "g.json"); };
  };
  EXPECT_EQ(error_where(parse(R"({"num_beams": 4})")), "g.json: num_beams");
  EXPECT_EQ(error_where(parse(R"({"no_repeat_ngram_size": 3})")), "g.json: no_repeat_ngram_size");
  EXPECT_EQ(error_where(parse(R"({"frobnicate": 1})")), "g.json: frobnicate");
  EXPECT_EQ(error_where(parse(R"({"eos_token_id": "x"})")), "g.json: eos_token_id");
  EXPECT_EQ(error_where(parse(R"({"stop_strings": [1]})")), "g.json: stop_strings");
  EXPECT_EQ(error_where(parse(R"({"top_k": "many"})")), "g.json: top_k");
  EXPECT_EQ(error_where(parse(R"({"do_sample": true, "temperature": 0})")), "g.json: temperature");
  EXPECT_EQ(error_where(parse(R"([1, 2])")), "g.json");
}

TEST(GenerationConfig, ValidateNamesTheField) {
  auto bad = [](auto mutate) {
    return [mutate] {
      GenerationConfig c;
      mutate(c);
      c.validate();
    };
  };
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.max_new_tokens = 0; })), "max_new_tokens");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.max_new_tokens = -3; })), "max_new_tokens");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) {
              c.do_sample = true;
              c.temperature = 0;
            })),
            "temperature");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.top_p = 0; })), "top_p");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.top_p = 1.01; })), "top_p");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.top_k = -1; })), "top_k");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.min_p = -0.1; })), "min_p");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.min_p = 1.5; })), "min_p");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.repetition_penalty = 0; })),
            "repetition_penalty");
  EXPECT_EQ(error_where(bad([](GenerationConfig& c) { c.stop_strings = {""}; })), "stop_strings");
  // Greedy ignores temperature, so 0 is accepted there (as Transformers, which warns).
  GenerationConfig greedy;
  greedy.temperature = 0;
  EXPECT_NO_THROW(greedy.validate());
}

TEST(GenerationConfig, MaxLengthCapsNewTokens) {
  GenerationConfig c;
  c.max_new_tokens = 50;
  EXPECT_EQ(c.max_new_tokens_for(1000), 50);
  c.max_length = 40;
  EXPECT_EQ(c.max_new_tokens_for(10), 30);
  EXPECT_EQ(c.max_new_tokens_for(39), 1);
  EXPECT_EQ(error_where([&] { c.max_new_tokens_for(40); }), "max_length");
}

TEST(GenerationConfig, WithoutAFileIdsComeFromTheModelConfig) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / "kiln_genconfig_test").string();
  fs::create_directories(dir);
  fs::remove(dir + "/generation_config.json");
  auto model = models::ModelConfig::from_pretrained(kTiny);
  auto c = GenerationConfig::from_pretrained(dir, model);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{151645}));
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_FALSE(c.pad_token_id);
  EXPECT_EQ(c.effective_pad_token_id(), 151645);
  // A broken file is an error naming it.
  io::write_file_atomic(dir + "/generation_config.json", "{\"top_p\": 2}");
  EXPECT_EQ(error_where([&] { GenerationConfig::from_pretrained(dir, model); }),
            dir + "/generation_config.json: top_p");
  fs::remove_all(dir);
}

TEST(GenerationConfig, JsonRoundTrip) {
  GenerationConfig c;
  c.do_sample = true;
  c.temperature = 0.7;
  c.top_k = 10;
  c.top_p = 0.8;
  c.min_p = 0.02;
  c.repetition_penalty = 1.1;
  c.seed = 3;
  c.eos_token_id = {1, 2};
  c.pad_token_id = 0;
  c.stop_strings = {"a", "b"};
  c.max_new_tokens = 7;
  auto back = GenerationConfig::from_json(c.to_json(), "roundtrip");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.top_k, 10);
  EXPECT_EQ(back.seed, 3u);
  EXPECT_EQ(back.stop_strings, c.stop_strings);
}

}  // namespace
}  // namespace kiln::generation
