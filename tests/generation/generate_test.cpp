// generate(): golden greedy continuations, the compile counters, eager == compiled, batched ==
// unbatched, and errors for bad arguments.
#include "kiln/generation/generate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"
#include "kiln/graph/executor.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/create_model.h"
#include "tests/support.h"

namespace {

const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";
constexpr int32_t kPad = 151643;

std::vector<nlohmann::json> prompt_rows() { return kiln::test_support::tiny_golden_rows("prompt"); }

kiln::GenerationConfig greedy(int64_t n, const kiln::models::CausalLM& m) {
  auto cfg = kiln::GenerationConfig::from_pretrained(kTiny, m.config());
  cfg.max_new_tokens = n;
  return cfg;
}

// The golden rows continue with pad after an eos, as Transformers does; kiln stops at the eos.
std::vector<int32_t> golden_until_eos(const nlohmann::json& row) {
  auto ids = row["greedy_new_ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == 151645 || ids[i] == 151643) return {ids.begin(), ids.begin() + long(i) + 1};
  return ids;
}

TEST(Generate, GreedyF32MatchesGoldenCompiledAndEager) {
  for (bool eager : {false, true}) {
    auto m = kiln::AutoModelForCausalLM::from_pretrained(
        kTiny, {.dtype = kiln::DType::f32, .disable_compile = eager});
    for (const auto& row : prompt_rows()) {
      auto prompt = row["prompt_ids"].get<std::vector<int32_t>>();
      auto out = kiln::generation::generate(*m, {prompt}, greedy(24, *m));
      EXPECT_EQ(out.new_tokens[0], golden_until_eos(row))
          << (eager ? "eager" : "compiled") << " prompt " << row["index"];
    }
  }
}

TEST(Generate, FiftyTokensCompileOnePrefillAndOneDecodeThenNothing) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::bf16});
  auto cfg = greedy(50, *m);
  cfg.eos_token_id.clear();  // run all 50 steps
  cfg.pad_token_id = kPad;
  std::vector<int32_t> prompt = {785, 8585, 49041, 7506, 5302};
  auto out = kiln::generation::generate(*m, {prompt}, cfg);
  EXPECT_EQ(out.new_tokens[0].size(), 50u);
  auto stats = m->compile_cache().stats();
  EXPECT_EQ(stats["prefill"].compiles, 1);
  EXPECT_EQ(stats["decode"].compiles, 1);
  EXPECT_EQ(stats["decode"].hits, 48);
  auto again = kiln::generation::generate(*m, {prompt}, cfg);
  EXPECT_EQ(again.new_tokens, out.new_tokens);
  stats = m->compile_cache().stats();
  EXPECT_EQ(stats["prefill"].compiles, 1);
  EXPECT_EQ(stats["decode"].compiles, 1);
}

// The logits of one prompt's prefill (positions 0..T-1) into a cache of `cache_len` slots, the
// slots past the prompt left unwritten.
std::vector<float> prefill_logits(kiln::models::CausalLM& m, const std::vector<int32_t>& ids,
                                  int64_t cache_len) {
  const int64_t T = int64_t(ids.size());
  std::vector<int32_t> pos(ids.size()), kv(static_cast<size_t>(cache_len), 0);
  for (int64_t i = 0; i < T; ++i) pos[size_t(i)] = int32_t(i);
  std::fill(kv.begin(), kv.begin() + T, 1);
  auto cache = m.make_cache(1, cache_len);
  return m.forward("prefill", kiln::Tensor::from_vector(ids, {1, T}),
                   kiln::Tensor::from_vector(pos, {1, T}),
                   kiln::Tensor::from_vector(kv, {1, cache_len}), cache, 0)
      .to_f32_vector();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

TEST(Generate, CompiledEqualsEagerLogits) {
  auto compiled = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  auto eager = kiln::AutoModelForCausalLM::from_pretrained(
      kTiny, {.dtype = kiln::DType::f32, .disable_compile = true});
  const std::vector<int32_t> ids = {785, 8585, 49041, 7506, 5302, 13, 576};
  const int64_t L = int64_t(ids.size()) + 3;
  EXPECT_LT(max_abs_diff(prefill_logits(*compiled, ids, L), prefill_logits(*eager, ids, L)), 1e-4);
}

TEST(Generate, PrefillLogitsAreTheScoresOfTheLastPosition) {
  // Prefill runs the last layer's o_proj and MLP on the last position only; "score" runs them on
  // every position. Batch of two, the second row left-padded, as generate() lays a batch out.
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  const std::vector<int32_t> ids = {785, 8585, 49041, 7506, 5302, 13, 576,
                                    kPad, kPad, 3555, 374, 264, 1273, 30};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 1, 2, 3, 4};
  const std::vector<int32_t> mask = {1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
  auto run = [&](const char* function) {
    auto cache = m->make_cache(2, 7);
    return m->forward(function, kiln::Tensor::from_vector(ids, {2, 7}),
                      kiln::Tensor::from_vector(pos, {2, 7}), kiln::Tensor::from_vector(mask, {2, 7}),
                      cache, 0);
  };
  const kiln::Tensor last = run("prefill"), all = run("score");
  const int64_t V = m->config().vocab_size;
  ASSERT_EQ(last.shape(), kiln::Shape({2, V}));
  const std::vector<float> got = last.to_f32_vector(), every = all.to_f32_vector();
  for (int64_t b = 0; b < 2; ++b) {
    const auto row = every.begin() + (b * 7 + 6) * V;
    EXPECT_LT(max_abs_diff({got.begin() + b * V, got.begin() + (b + 1) * V}, {row, row + V}), 1e-4)
        << "row " << b;
  }
}

TEST(Generate, CompiledEqualsEagerLogitsBf16WithTheGemmEpilogues) {
  // The `small` preset with head_dim 128 (Qwen3's) and two layers: its intermediate (768) is a
  // multiple of 64 and its heads are two GEMM panels, so a compiled bf16 prefill of more than 4
  // tokens runs SwiGLU and the q/k-norm + RoPE + cache prologue in the GEMM's stores where this
  // CPU has AVX512_BF16 (the tiny model's shapes take the fallbacks).
  const std::string dir =
      (std::filesystem::temp_directory_path() / "kiln_generate_test_epilogues").string();
  std::filesystem::create_directories(dir);
  auto j = kiln::models::preset_config_json("small", kiln::DType::bf16);
  j["head_dim"] = 128;
  j["num_hidden_layers"] = 2;
  kiln::io::write_file_atomic(dir + "/config.json", j.dump(2));
  kiln::io::save_safetensors(
      dir + "/model.safetensors",
      kiln::models::random_weights(kiln::models::ModelConfig::from_json(j, "config.json"), 3,
                                   kiln::DType::bf16));
  auto compiled = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = kiln::DType::bf16});
  auto eager = kiln::AutoModelForCausalLM::from_pretrained(
      dir, {.dtype = kiln::DType::bf16, .disable_compile = true});
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % 150000);
  // The fused ops call the unfused ops' helpers, so the logits agree bit for bit here (0 measured);
  // the tolerance is the f32 one of CompiledEqualsEagerLogits.
  EXPECT_LT(max_abs_diff(prefill_logits(*compiled, ids, 48), prefill_logits(*eager, ids, 48)), 1e-4);
  // And the compiled prefill did take the epilogues where the CPU has the kernel.
  std::map<kiln::graph::Op, int> fused;
  for (const auto& key : compiled->compile_cache().keys()) {
    auto exe = compiled->compile_cache().get_or_compile(key, [] {
      ADD_FAILURE() << "the prefill graph was not cached";
      return std::shared_ptr<kiln::graph::Executable>();
    });
    if (key.function != "prefill" || !exe) continue;
    for (const auto& n : exe->graph().nodes)
      if (!n.dead) ++fused[n.op];
  }
  const int want = kiln::cpu::detail::avx512_bf16_kernels() ? 2 : 0;
  EXPECT_EQ(fused[kiln::graph::Op::LinearSiluMul], want);
  EXPECT_EQ(fused[kiln::graph::Op::LinearQKNormRopeCache], want);
  std::filesystem::remove_all(dir);
}

TEST(Generate, BatchedRowsEqualUnbatched) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  auto rows = prompt_rows();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& r : rows) prompts.push_back(r["prompt_ids"].get<std::vector<int32_t>>());
  auto cfg = greedy(12, *m);
  auto batched = kiln::generation::generate(*m, prompts, cfg);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto single = kiln::generation::generate(*m, {prompts[i]}, cfg);
    EXPECT_EQ(batched.new_tokens[i], single.new_tokens[0]) << "row " << i;
  }
}

TEST(Generate, SameSeedSameSample) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::bf16});
  auto cfg = greedy(16, *m);
  cfg.do_sample = true;
  cfg.temperature = 0.8;
  cfg.top_k = 40;
  cfg.top_p = 0.95;
  cfg.seed = 1234;
  std::vector<int32_t> prompt = {785, 8585, 49041};
  auto a = kiln::generation::generate(*m, {prompt}, cfg);
  auto b = kiln::generation::generate(*m, {prompt}, cfg);
  EXPECT_EQ(a.new_tokens, b.new_tokens);
}

TEST(Generate, BadArgumentsAreErrorsNamingThem) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  auto expect_error = [&](const std::vector<std::vector<int32_t>>& prompts,
                          kiln::GenerationConfig cfg, const std::string& where) {
    try {
      kiln::generation::generate(*m, prompts, cfg);
      ADD_FAILURE() << "expected an error naming " << where;
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  };
  auto cfg = greedy(4, *m);
  expect_error({{1, 2, 999999}}, cfg, "input_ids");
  expect_error({{1, -5}}, cfg, "input_ids");
  auto zero = cfg;
  zero.max_new_tokens = 0;
  expect_error({{1, 2}}, zero, "max_new_tokens");
  auto neg = cfg;
  neg.max_new_tokens = -3;
  expect_error({{1, 2}}, neg, "max_new_tokens");
  auto huge = cfg;
  huge.max_new_tokens = 40960;
  expect_error({{1, 2}}, huge, "max_position_embeddings");
}

}  // namespace
