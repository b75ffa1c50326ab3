#include "kiln/generation/stopping.h"

#include <gtest/gtest.h>

#include <map>

#include "kiln/core/error.h"

namespace kiln::generation {
namespace {

GenerationConfig eos_config(std::vector<int64_t> eos, std::optional<int64_t> pad = std::nullopt) {
  GenerationConfig c;
  c.eos_token_id = std::move(eos);
  c.pad_token_id = pad;
  return c;
}

// A toy detokenizer: each id maps to a fixed piece of text.
struct ToyDecoder {
  std::map<int32_t, std::string> pieces = {{1, "Hel"}, {2, "lo"}, {3, " wor"}, {4, "ld"},
                                           {5, "!"},   {6, "x"},  {0, ""}};
  std::vector<std::vector<int32_t>> calls;
  std::string operator()(std::span<const int32_t> ids) {
    calls.emplace_back(ids.begin(), ids.end());
    std::string s;
    for (int32_t id : ids) s += pieces.at(id);
    return s;
  }
};

TEST(Stopping, StopsOnEos) {
  StoppingCriteria stop(eos_config({9}), 1, 10);
  std::vector<int32_t> t = {1};
  EXPECT_FALSE(stop.update(t));
  t = {2};
  EXPECT_FALSE(stop.update(t));
  t = {9};
  EXPECT_TRUE(stop.update(t));
  EXPECT_EQ(stop.reason(0), StopReason::eos);
  EXPECT_EQ(stop.tokens(0), (std::vector<int32_t>{1, 2, 9}));
  EXPECT_EQ(stop.steps(), 3);
  t = {1};
  EXPECT_THROW(stop.update(t), Error);  // already done
}

TEST(Stopping, AnyOfSeveralEosIds) {
  StoppingCriteria stop(eos_config({151645, 151643}), 1, 10);
  std::vector<int32_t> t = {151643};
  EXPECT_TRUE(stop.update(t));
  EXPECT_EQ(stop.reason(0), StopReason::eos);
}

TEST(Stopping, MaxNewTokens) {
  StoppingCriteria stop(eos_config({}), 2, 3);
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> t = {1, 2};
    EXPECT_FALSE(stop.update(t));
  }
  std::vector<int32_t> t = {1, 2};
  EXPECT_TRUE(stop.update(t));
  EXPECT_EQ(stop.reason(0), StopReason::max_new_tokens);
  EXPECT_EQ(stop.reason(1), StopReason::max_new_tokens);
  EXPECT_EQ(stop.tokens(1).size(), 3u);
  EXPECT_STREQ(stop_reason_name(stop.reason(0)), "max_new_tokens");
}

TEST(Stopping, FinishedRowsEmitPad) {
  StoppingCriteria stop(eos_config({9}, 0), 2, 10);
  std::vector<int32_t> t = {9, 1};
  EXPECT_FALSE(stop.update(t));
  EXPECT_TRUE(stop.finished(0));
  EXPECT_FALSE(stop.finished(1));
  t = {5, 2};  // the model's choice for row 0 is replaced by pad
  EXPECT_FALSE(stop.update(t));
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[1], 2);
  t = {5, 9};
  EXPECT_TRUE(stop.update(t));
  EXPECT_EQ(stop.tokens(0), (std::vector<int32_t>{9, 0, 0}));
  EXPECT_EQ(stop.tokens(1), (std::vector<int32_t>{1, 2, 9}));
  auto g = stop.generated(0);
  EXPECT_EQ(std::vector<int32_t>(g.begin(), g.end()), (std::vector<int32_t>{9}));
}

TEST(Stopping, PadDefaultsToFirstEos) {
  StoppingCriteria stop(eos_config({7, 8}), 2, 10);
  EXPECT_EQ(stop.pad_token_id(), 7);
  std::vector<int32_t> t = {8, 1};
  stop.update(t);
  t = {3, 1};
  stop.update(t);
  EXPECT_EQ(t[0], 7);
}

TEST(Stopping, StopStringSpanningTokens) {
  GenerationConfig c;
  c.stop_strings = {"o w"};
  ToyDecoder dec;
  StoppingCriteria stop(c, 1, 10, std::ref(dec));
  std::vector<int32_t> t = {1};
  EXPECT_FALSE(stop.update(t));
  t = {2};
  EXPECT_FALSE(stop.update(t));  // "Hello"
  t = {3};
  EXPECT_TRUE(stop.update(t));  // "Hello wor": "o w" spans "lo" and " wor"
  EXPECT_EQ(stop.reason(0), StopReason::stop_string);
  EXPECT_EQ(stop.tokens(0), (std::vector<int32_t>{1, 2, 3}));  // kept, as Transformers
}

TEST(Stopping, StopStringEndingInsideAToken) {
  GenerationConfig c;
  c.stop_strings = {"xyz", "wo"};
  ToyDecoder dec;
  StoppingCriteria stop(c, 1, 10, std::ref(dec));
  std::vector<int32_t> t = {2};
  EXPECT_FALSE(stop.update(t));
  t = {3};  // " wor" contains "wo" with "r" after it
  EXPECT_TRUE(stop.update(t));
}

TEST(Stopping, StopStringInABatchPadsTheStoppedRow) {
  GenerationConfig c;
  c.stop_strings = {"!"};
  c.pad_token_id = 0;
  ToyDecoder dec;
  StoppingCriteria stop(c, 2, 5, std::ref(dec));
  std::vector<int32_t> t = {5, 1};
  EXPECT_FALSE(stop.update(t));
  EXPECT_EQ(stop.reason(0), StopReason::stop_string);
  dec.calls.clear();
  t = {6, 2};
  EXPECT_FALSE(stop.update(t));
  EXPECT_EQ(t[0], 0);
  // Only the running row is decoded, and never with pads.
  ASSERT_EQ(dec.calls.size(), 1u);
  EXPECT_EQ(dec.calls[0], (std::vector<int32_t>{1, 2}));
  t = {6, 5};
  EXPECT_TRUE(stop.update(t));
  EXPECT_EQ(stop.reason(1), StopReason::stop_string);
}

TEST(Stopping, Errors) {
  GenerationConfig c;
  c.stop_strings = {"a"};
  try {
    StoppingCriteria s(c, 1, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "stop_strings");
  }
  try {
    StoppingCriteria s(GenerationConfig{}, 1, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "max_new_tokens");
  }
  EXPECT_THROW(StoppingCriteria(GenerationConfig{}, 0, 5), Error);
  // Stop strings in a batch with nothing to pad with.
  ToyDecoder dec;
  EXPECT_THROW(StoppingCriteria(c, 2, 5, std::ref(dec)), Error);
  StoppingCriteria s(GenerationConfig{}, 2, 5);
  std::vector<int32_t> one = {1};
  EXPECT_THROW(s.update(one), Error);
}

}  // namespace
}  // namespace kiln::generation
