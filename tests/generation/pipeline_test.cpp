// pipeline("text-generation"): its ids equal generate() on the tokenizer's ids, batches equal their
// rows alone; warmup_service compiles exactly the planned set, after which strict mode serves a
// fixed-cache generate with no compile and refuses any other shape with an error naming it.
#include "kiln/generation/pipeline.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "tests/support.h"

namespace {

const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

std::vector<nlohmann::json> prompt_rows() { return kiln::test_support::tiny_golden_rows("prompt"); }

int64_t compiles(kiln::models::CausalLM& m) {
  int64_t n = 0;
  for (const auto& [fn, s] : m.compile_cache().stats()) n += s.compiles;
  return n;
}

// Sets KILN_STRICT_COMPILE for the lifetime of the guard.
struct StrictEnv {
  StrictEnv() { setenv("KILN_STRICT_COMPILE", "1", 1); }
  ~StrictEnv() { unsetenv("KILN_STRICT_COMPILE"); }
};

TEST(Pipeline, TextEqualsGenerateOnTokenizerIds) {
  auto pipe = kiln::pipeline("text-generation", kTiny, {.model = {.dtype = kiln::DType::f32}});
  ASSERT_NE(pipe.tokenizer(), nullptr);
  auto cfg = pipe.generation_config();
  cfg.max_new_tokens = 10;
  auto model = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  for (const auto& row : prompt_rows()) {
    const std::string text = row["text"];
    auto ids = pipe.tokenizer()->encode(text);
    EXPECT_EQ(ids, row["prompt_ids"].get<std::vector<int32_t>>());
    auto out = pipe(text, cfg);
    auto ref = kiln::generation::generate(*model, {ids}, cfg);
    EXPECT_EQ(out.prompt_ids, ids);
    EXPECT_EQ(out.output_ids, ref.new_tokens[0]) << text;
    EXPECT_EQ(out.stop_reason, ref.stop_reasons[0]);
    EXPECT_EQ(out.generated_text,
              pipe.tokenizer()->decode(ref.new_tokens[0], {.skip_special_tokens = true}));
    // The golden greedy ids (f32) start the same way.
    auto golden = row["greedy_new_ids"].get<std::vector<int32_t>>();
    ASSERT_FALSE(out.output_ids.empty());
    EXPECT_EQ(out.output_ids[0], golden[0]);
  }
}

TEST(Pipeline, BatchIsLeftPaddedAndEqualsEachRowAlone) {
  auto pipe = kiln::pipeline("text-generation", kTiny, {.model = {.dtype = kiln::DType::f32}});
  auto cfg = pipe.generation_config();
  cfg.max_new_tokens = 8;
  std::vector<std::string> texts;
  for (const auto& row : prompt_rows()) texts.push_back(row["text"]);
  auto batch = pipe(texts, cfg);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto alone = pipe(texts[i], cfg);
    EXPECT_EQ(batch[i].output_ids, alone.output_ids) << i;
    EXPECT_EQ(batch[i].generated_text, alone.generated_text) << i;
  }
  // Token ids work the same way.
  auto by_ids = pipe.generate_ids({batch[0].prompt_ids}, cfg);
  EXPECT_EQ(by_ids[0].output_ids, batch[0].output_ids);
}

TEST(Pipeline, StreamingCallbackSeesEveryNewToken) {
  std::vector<int32_t> streamed;
  kiln::generation::PipelineOptions o;
  o.model.dtype = kiln::DType::f32;
  o.generate.on_token = [&](int64_t row, int32_t id) {
    EXPECT_EQ(row, 0);
    streamed.push_back(id);
  };
  auto pipe = kiln::pipeline("text-generation", kTiny, o);
  auto cfg = pipe.generation_config();
  cfg.max_new_tokens = 5;
  auto out = pipe(prompt_rows()[0]["text"].get<std::string>(), cfg);
  EXPECT_EQ(streamed, out.output_ids);
}

TEST(Pipeline, BadArguments) {
  EXPECT_THROW(kiln::pipeline("summarization", kTiny), kiln::Error);
  try {
    kiln::pipeline("fill-mask", kTiny);
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fill-mask"), std::string::npos);
  }
  auto pipe = kiln::pipeline("text-generation", kTiny);
  EXPECT_THROW(pipe(std::vector<std::string>{}), kiln::Error);
  EXPECT_THROW(pipe(std::string()), kiln::Error);  // encodes to no tokens
  EXPECT_THROW(pipe.warmup(1), kiln::Error);       // no fixed cache_len
}

TEST(ServiceWarmup, BucketsBelowTheCache) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny);
  EXPECT_EQ(kiln::generation::service_buckets(m->config(), 100),
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(kiln::generation::service_buckets(m->config(), 65), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(kiln::generation::service_buckets(m->config(), 64), (std::vector<int64_t>{32}));
  EXPECT_EQ(kiln::generation::service_buckets(m->config(), 40, {8, 16, 64}),
            (std::vector<int64_t>{8, 16}));
  EXPECT_THROW(kiln::generation::service_buckets(m->config(), 32), kiln::Error);
  EXPECT_THROW(kiln::generation::service_buckets(m->config(), 1 << 20), kiln::Error);
  EXPECT_THROW(kiln::generation::service_buckets(m->config(), 64, {0, 8}), kiln::Error);
}

TEST(ServiceWarmup, StrictModeServesThePlanAndRefusesOtherShapes) {
  StrictEnv strict;
  const int64_t L = 100;
  kiln::generation::PipelineOptions o;
  o.generate.cache_len = L;
  auto pipe = kiln::pipeline("text-generation", kTiny, o);
  auto& m = pipe.model();
  ASSERT_TRUE(m.compile_cache().strict());

  // Before warmup nothing is planned: the first generate is refused, naming the function.
  auto cfg = pipe.generation_config();
  cfg.max_new_tokens = 20;
  cfg.eos_token_id.clear();
  const std::string text = prompt_rows()[0]["text"];
  try {
    pipe(text, cfg);
    FAIL() << "compiled an unplanned shape in strict mode";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefill"), std::string::npos) << e.what();
  }

  auto entries = pipe.warmup(1);
  ASSERT_EQ(entries.size(), 3u);  // prefill 32, prefill 64, decode (1, 100)
  EXPECT_EQ(entries[0].seq, 32);
  EXPECT_EQ(entries[1].seq, 64);
  EXPECT_EQ(entries[2].function, "decode");
  EXPECT_EQ(entries[2].cache_len, L);
  const int64_t planned = compiles(m);
  EXPECT_EQ(planned, 3);

  // Prompts in either bucket, batch 1, any length that fits: no compile.
  auto out = pipe(text, cfg);
  EXPECT_EQ(out.output_ids.size(), 20u);
  std::vector<int32_t> long_prompt(40, 785);  // bucket 64
  cfg.max_new_tokens = 30;
  pipe.generate_ids({long_prompt}, cfg);
  EXPECT_EQ(compiles(m), planned);

  // Outside the plan: batch 2 changes input_ids dim 0.
  try {
    pipe.generate_ids({long_prompt, long_prompt}, cfg);
    FAIL() << "batch 2 compiled in strict mode";
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("input_ids dim 0"), std::string::npos) << msg;
  }
  // A prompt in the 128 bucket changes input_ids dim 1 (the bucket) of prefill... but it does not
  // fit the cache of 100 either, which generate reports first, naming the cache.
  std::vector<int32_t> too_long(70, 785);
  cfg.max_new_tokens = 10;
  EXPECT_THROW(pipe.generate_ids({too_long}, cfg), kiln::Error);
  // A different cache length changes kv_cache dim 1.
  auto model = kiln::AutoModelForCausalLM::from_pretrained(kTiny);
  kiln::generation::warmup_service(*model, 1, L);
  auto gcfg = cfg;
  gcfg.max_new_tokens = 4;
  kiln::generation::generate(*model, {{785, 8585}}, gcfg, {.cache_len = L});
  try {
    kiln::generation::generate(*model, {{785, 8585}}, gcfg, {.cache_len = L + 1});
    FAIL() << "cache of L + 1 compiled in strict mode";
  } catch (const kiln::Error& e) {
    // The message names the new key's shapes and a changed dimension. (It compares against one
    // planned key of the function, not necessarily the closest, so the dimension it names may be
    // input_ids dim 1 rather than kv_cache dim 1; see the report to the compile-cache owner.)
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kv_cache=[1, 101]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(" dim "), std::string::npos) << msg;
  }
  EXPECT_EQ(compiles(*model), 3);
  EXPECT_EQ(compiles(m), planned);
}

TEST(ServiceWarmup, StrictOffCompilesOnDemand) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny);
  ASSERT_FALSE(m->compile_cache().strict());
  auto entries = kiln::generation::warmup_service(*m, 1, 64, {16});
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_GT(entries[0].compile_ms, 0);
  // Warming the same set again compiles nothing and reports 0 ms.
  auto again = kiln::generation::warmup_service(*m, 1, 64, {16});
  EXPECT_EQ(again[0].compile_ms, 0);
  EXPECT_EQ(again[1].compile_ms, 0);
  EXPECT_EQ(compiles(*m), 2);
}

}  // namespace
