// The compile pipeline on the real decoder graph: which fusions fire, that the memory plan never
// lets two live buffers overlap, and the compile-cache counters and strict mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"
#include "kiln/graph/passes.h"
#include "kiln/models/causal_lm.h"
#include "kiln/models/decoder.h"

namespace {

using kiln::graph::Op;
const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

std::map<Op, int> op_counts(const kiln::graph::Graph& g) {
  std::map<Op, int> n;
  for (const auto& node : g.nodes)
    if (!node.dead) ++n[node.op];
  return n;
}

kiln::graph::Graph fused(const kiln::graph::Graph& g0) {
  auto g = kiln::graph::fuse_sibling_linears(g0);
  g = kiln::graph::fuse_silu_mul(g);
  g = kiln::graph::fuse_qk_norm_rope(g);
  g = kiln::graph::eliminate_dead_code(g);
  g = kiln::graph::fuse_residual(g);
  return kiln::graph::eliminate_dead_code(g);
}

TEST(Compile, Qwen3FusionsFireOncePerLayer) {
  auto cfg = kiln::models::ModelConfig::from_pretrained(kTiny);
  auto g0 = kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "prefill", 2, 32, 64);
  auto before = op_counts(g0);
  auto after = op_counts(fused(g0));
  const int layers = int(cfg.num_hidden_layers);
  EXPECT_EQ(before[Op::Linear], 7 * layers + 1);
  EXPECT_EQ(after[Op::QKNormRopeCache], layers);
  EXPECT_EQ(after[Op::SiluMul], layers);
  EXPECT_EQ(after[Op::LinearResidual], 2 * layers);
  EXPECT_EQ(after[Op::Linear], 2 * layers + 1);  // fused qkv, fused gate_up, lm_head
  EXPECT_EQ(after[Op::KVCacheWrite], 0);
  EXPECT_EQ(after[Op::Rope], 0);
  EXPECT_EQ(after[Op::Add], 0);
}

TEST(Compile, GenerationRunsTheLastLayersMlpOnTheLastPositionOnly) {
  auto cfg = kiln::models::ModelConfig::from_pretrained(kTiny);
  const int64_t last = cfg.num_hidden_layers - 1, B = 2, T = 32;
  auto rows_of = [&](const kiln::graph::Graph& g, int64_t layer) {
    const std::string name = "model.layers." + std::to_string(layer) + ".mlp.down_proj";
    for (const auto& n : g.nodes)
      if (n.op == Op::Linear && n.name == name) return n.shape[0];
    ADD_FAILURE() << "no " << name;
    return int64_t(-1);
  };
  auto prefill = kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "prefill", B, T, 64);
  EXPECT_EQ(rows_of(prefill, last), B);
  EXPECT_EQ(rows_of(prefill, last - 1), B * T);
  // The last layer still writes every position's k and v.
  int writes = 0;
  for (const auto& n : prefill.nodes)
    if (n.op == Op::KVCacheWrite && n.name.rfind("model.layers." + std::to_string(last), 0) == 0) {
      EXPECT_EQ(prefill.node(n.inputs[1]).shape[1], T) << n.name;  // (cache, x)
      ++writes;
    }
  EXPECT_EQ(writes, 2);
  // Scoring needs every position's logits.
  auto score = kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "score", B, T, 64);
  EXPECT_EQ(rows_of(score, last), B * T);
}

TEST(Compile, LinearEpiloguesTakeTheProjectionsOfABf16Model) {
  auto cfg = kiln::models::ModelConfig::from_pretrained(kTiny);
  const int layers = int(cfg.num_hidden_layers);
  auto all = [](Op) { return true; };
  auto g = kiln::graph::eliminate_dead_code(kiln::graph::fuse_linear_epilogues(
      fused(kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "prefill", 1, 32, 64)), all));
  auto n = op_counts(g);
  EXPECT_EQ(n[Op::LinearSiluMul], layers);
  EXPECT_EQ(n[Op::LinearQKNormRopeCache], layers);
  EXPECT_EQ(n[Op::SiluMul], 0);
  EXPECT_EQ(n[Op::QKNormRopeCache], 0);
  EXPECT_EQ(n[Op::Linear], 1);  // lm_head
  // Only the ops the backend supports.
  auto only_swiglu = op_counts(kiln::graph::eliminate_dead_code(kiln::graph::fuse_linear_epilogues(
      fused(kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "prefill", 1, 32, 64)),
      [](Op op) { return op == Op::LinearSiluMul; })));
  EXPECT_EQ(only_swiglu[Op::LinearSiluMul], layers);
  EXPECT_EQ(only_swiglu[Op::QKNormRopeCache], layers);
  // An f32 model keeps both over stored projections (the reference path).
  auto f = op_counts(kiln::graph::fuse_linear_epilogues(
      fused(kiln::models::build_decoder_graph(cfg, kiln::DType::f32, "prefill", 1, 32, 64)), all));
  EXPECT_EQ(f[Op::LinearSiluMul] + f[Op::LinearQKNormRopeCache], 0);
  EXPECT_EQ(f[Op::SiluMul], layers);
  EXPECT_EQ(f[Op::QKNormRopeCache], layers);
}

TEST(Compile, Qwen2WithBiasKeepsTheUnfusedPrologue) {
  auto j = kiln::io::load_json(kTiny + "/config.json");
  j["model_type"] = "qwen2";
  j["architectures"] = {"Qwen2ForCausalLM"};
  auto cfg = kiln::models::ModelConfig::from_json(j, "config.json");
  auto g = fused(kiln::models::build_decoder_graph(cfg, kiln::DType::f32, "decode", 1, 1, 40));
  auto n = op_counts(g);
  EXPECT_EQ(n[Op::QKNormRopeCache], 0);  // bias between split and rope: reference path
  EXPECT_EQ(n[Op::BiasAdd], 3 * int(cfg.num_hidden_layers));
  EXPECT_EQ(n[Op::KVCacheWrite], 2 * int(cfg.num_hidden_layers));
  g.verify();
}

TEST(Compile, CountersHitsAndStrictMode) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  m->warmup("decode", 1, 1, 64);
  m->warmup("decode", 1, 1, 64);
  auto s = m->compile_cache().stats();
  EXPECT_EQ(s["decode"].compiles, 1);
  EXPECT_EQ(s["decode"].hits, 1);
  m->compile_cache().set_strict(true);
  m->warmup("decode", 1, 1, 64);  // planned: fine
  try {
    auto cache = m->make_cache(1, 128);
    std::vector<int32_t> one = {1}, zero = {0}, mask(128, 1);
    m->forward("decode", kiln::Tensor::from_vector(one, {1, 1}), kiln::Tensor::from_vector(zero, {1, 1}),
               kiln::Tensor::from_vector(mask, {1, 128}), cache, 0);
    FAIL() << "strict mode compiled an unplanned shape";
  } catch (const kiln::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("kv_cache dim 1 (64 -> 128)"), std::string::npos) << msg;
  }
}

// Decode steps and prefills keep the CPU backend's threads spinning between their loops (a
// parallel region per loop costs ~3 us, ~170 loops a decode step; a prefill's waiting threads read
// the next linear's weights ahead) wherever no op calls oneDNN: an f32 model's linears do. A
// linear's rows are those of its input: the fused qkv op returns q, [B, T, Hq, D], whose
// B * T * Hq rows (8 here, at batch 2) once kept every decode step off the spinning team.
TEST(Compile, Bf16GraphsKeepTheThreadsSpinning) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::bf16});
  m->warmup("decode", 2, 1, 64);
  m->warmup("prefill", 2, 32, 64);
  std::shared_ptr<kiln::graph::Executable> decode, prefill;
  for (const auto& key : m->compile_cache().keys())
    (key.function == "decode" ? decode : prefill) = m->compile_cache().find(key);
  ASSERT_TRUE(decode && prefill);
  EXPECT_EQ(decode->threads_spin(), kiln::cpu::detail::bf16_linear_on_kiln());
  if (!kiln::cpu::detail::gemm_onednn_only()) {  // KILN_GEMM_ONEDNN=1 sends GEMMs to oneDNN
    EXPECT_EQ(prefill->threads_spin(), kiln::cpu::detail::bf16_linear_on_kiln());
  }
  if (kiln::cpu::detail::avx512_bf16_kernels()) {  // where the backend fuses the qkv epilogue
    const auto& nodes = decode->graph().nodes;
    EXPECT_TRUE(std::any_of(nodes.begin(), nodes.end(), [](const auto& n) {
      return !n.dead && n.op == Op::LinearQKNormRopeCache;
    }));
  }
  EXPECT_EQ(m->compile_cache().stats()["decode"].hits, 0);  // find() counts nothing

  auto f32 = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  f32->warmup("prefill", 1, 32, 64);
  const auto keys = f32->compile_cache().keys();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_FALSE(f32->compile_cache().find(keys[0])->threads_spin());
}

// Where the attention kernel takes its q grouped (bf16 [B, Hkv, T, G, D], scaled: cpu/kernels.h),
// the qkv prologue writes it so, and only a q that the attention alone reads.
TEST(Compile, PrefillAttentionTakesItsQGroupedFromTheQkvPrologue) {
  using kiln::graph::Graph, kiln::graph::Node;
  auto cfg = kiln::models::ModelConfig::from_pretrained(kTiny);
  const int layers = int(cfg.num_hidden_layers);
  const int64_t hkv = cfg.num_key_value_heads, G = cfg.num_attention_heads / hkv;
  auto grouped = [](const Graph& g) {
    int n = 0;
    for (const auto& node : g.nodes)
      if (!node.dead && (node.op == Op::QKNormRopeCache || node.op == Op::LinearQKNormRopeCache) &&
          node.dtype == kiln::DType::bf16 && node.shape.size() == 5)
        ++n;
    return n;
  };
  auto always = [](const Graph&, const Node&) { return true; };
  auto g = fused(kiln::models::build_decoder_graph(cfg, kiln::DType::bf16, "prefill", 2, 32, 64));
  const Graph all = kiln::graph::group_attention_q(g, always);
  EXPECT_EQ(grouped(all), layers);
  for (const auto& n : all.nodes) {
    if (n.op == Op::QKNormRopeCache) {
      EXPECT_EQ(n.shape, kiln::Shape({2, hkv, 32, G, cfg.head_dim}));
    }
  }
  for (auto& n : g.nodes)  // a q that the graph also returns stays f32
    if (n.op == Op::QKNormRopeCache) {
      g.outputs.push_back(kiln::graph::Value(&n - g.nodes.data()));
      break;
    }
  EXPECT_EQ(grouped(kiln::graph::group_attention_q(g, always)), layers - 1);

  // The CPU backend's kernel takes it in a prefill over a bf16 cache (T >= 32) where kiln's
  // AVX512_BF16 kernels are built; never in decode or in an f32 model.
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::bf16});
  m->warmup("decode", 1, 1, 64);
  m->warmup("prefill", 1, 32, 64);
  for (const auto& key : m->compile_cache().keys()) {
    const int want = key.function == "prefill" && kiln::cpu::detail::avx512_bf16_kernels() ? layers : 0;
    EXPECT_EQ(grouped(m->compile_cache().find(key)->graph()), want) << key.function;
  }
  auto f32 = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  f32->warmup("prefill", 1, 32, 64);
  EXPECT_EQ(grouped(f32->compile_cache().find(f32->compile_cache().keys().at(0))->graph()), 0);
}

// A forward's logits are the caller's: the next run never writes over logits still held, and
// once they are let go their buffer is written again, with no allocation and no copy.
TEST(Compile, OutputsHeldByTheCallerSurviveTheNextRun) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  const int64_t L = 16;
  auto cache = m->make_cache(1, L);
  std::vector<int32_t> mask(L, 0);
  auto step = [&](int32_t id, int64_t slot) {
    mask[size_t(slot)] = 1;
    return m->forward("decode", kiln::Tensor::from_vector(std::vector<int32_t>{id}, {1, 1}),
                      kiln::Tensor::from_vector(std::vector<int32_t>{int32_t(slot)}, {1, 1}),
                      kiln::Tensor::from_vector(mask, {1, L}), cache, slot);
  };
  kiln::Tensor first = step(5, 0);
  const std::vector<float> kept(first.data<float>(), first.data<float>() + first.numel());
  kiln::Tensor second = step(7, 1);
  EXPECT_NE(first.raw(), second.raw());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), first.data<float>()));
  const void* second_buffer = second.raw();
  second = kiln::Tensor();
  kiln::Tensor third = step(9, 2);  // first is still held: the third takes second's buffer
  EXPECT_EQ(third.raw(), second_buffer);
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), first.data<float>()));
}

TEST(Compile, MissingOrMisshapenTensorsAndBadConfigsNameTheCulprit) {
  auto j = kiln::io::load_json(kTiny + "/config.json");
  auto err = [](const kiln::io::Json& cfg) {
    try {
      kiln::models::ModelConfig::from_json(cfg, "config.json");
    } catch (const kiln::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto bad = j;
  bad["model_type"] = "gpt2";
  EXPECT_NE(err(bad).find("model_type"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(err(bad).find("rope_type"), std::string::npos);
  bad = j;
  bad["flash_mode"] = true;
  EXPECT_NE(err(bad).find("flash_mode"), std::string::npos);
  // Newer Transformers keep rope settings in rope_parameters; untied unless the file says so.
  auto modern = j;
  modern.erase("rope_theta");
  modern.erase("tie_word_embeddings");
  modern["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 5000.0}};
  auto mc = kiln::models::ModelConfig::from_json(modern, "config.json");
  EXPECT_EQ(mc.rope_theta, 5000.0);
  EXPECT_EQ(mc.rope_scaling.rope_type, "linear");
  EXPECT_FALSE(mc.tie_word_embeddings);
  // A checkpoint whose tensors disagree with config.json.
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::f32});
  EXPECT_THROW(kiln::AutoModelForCausalLM::from_pretrained("/nonexistent/model"), kiln::Error);
  EXPECT_THROW(kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.device_map = "cuda:7"}),
               kiln::Error);
}

}  // namespace

// The cache is one allocation (mapped in huge pages) holding every layer's k and v as views: each
// [B, L, Hkv, D], zeroed, and no two overlapping (an overlap would let one layer's writes
// overwrite another's keys, which a batch-1 golden test at a short prompt might not notice).
TEST(KVCache, OneAllocationOfDisjointZeroedViews) {
  auto m = kiln::AutoModelForCausalLM::from_pretrained(kTiny, {.dtype = kiln::DType::bf16});
  const auto& c = m->config();
  const int64_t B = 3, L = 40;
  kiln::models::KVCache cache = m->make_cache(B, L);
  ASSERT_EQ(int64_t(cache.k.size()), c.num_hidden_layers);
  ASSERT_EQ(int64_t(cache.v.size()), c.num_hidden_layers);
  const kiln::Shape shape = {B, L, c.num_key_value_heads, c.head_dim};
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto* side : {&cache.k, &cache.v})
    for (const kiln::Tensor& t : *side) {
      EXPECT_EQ(t.shape(), shape);
      EXPECT_EQ(t.dtype(), kiln::DType::bf16);
      EXPECT_EQ(t.storage(), cache.k[0].storage());
      ranges.emplace_back(t.offset(), t.offset() + t.nbytes());
      for (float x : t.to_f32_vector()) ASSERT_EQ(x, 0.f);
    }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_EQ(cache.bytes(), size_t(2 * c.num_hidden_layers * B * L * c.num_key_value_heads *
                                  c.head_dim * 2));
}
