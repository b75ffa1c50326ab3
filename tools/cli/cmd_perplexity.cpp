// kiln perplexity MODEL_DIR (--text-file F | --ids 1,2,3) [--context N] [--logprobs] [--json]:
// mean negative log-likelihood and perplexity over non-overlapping windows of N tokens.
//
// A window of n tokens scores n - 1 of them (token t + 1 given tokens 0..t); each window starts a
// fresh context at position 0, as Transformers' "perplexity of fixed-length models" with stride N.
// The "score" graph returns the logits of every position it is given, so a window is fed in chunks
// of at most --chunk tokens (default 512) into a static cache of the window's size: the logits held
// at once stay [chunk, V] however long the window is, and every window and chunk has the same
// shape, so one graph serves the whole text. A last window shorter than N is padded on the right with kv_mask 0;
// attention is causal by slot, so real positions never see the padding and padded rows are dropped.
// Log-softmax runs in f64 over the f32 logits.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

struct PerplexityFlags {
  std::string model_dir, text_file, ids;
  std::optional<int64_t> context;
  int64_t chunk = 512;
  bool logprobs = false, json = false;
  kiln::cli::ModelFlags model;
};

std::vector<int32_t> read_tokens(const PerplexityFlags& f) {
  if (!f.text_file.empty() && !f.ids.empty())
    throw kiln::Error("--ids", "give either --text-file or --ids, not both");
  if (!f.ids.empty()) return kiln::cli::parse_ids(f.ids, "--ids");
  if (f.text_file.empty()) throw kiln::Error("--text-file", "give --text-file or --ids");
  std::ifstream in(f.text_file, std::ios::binary);
  if (!in) throw kiln::Error(f.text_file, "cannot open text file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto tok = kiln::cli::load_tokenizer_if_present(f.model_dir);
  if (!tok)
    throw kiln::Error("--text-file",
                      "text needs a tokenizer.json in " + f.model_dir + " (or pass --ids)");
  return tok->encode(ss.str(), {.add_special_tokens = false});
}

// log p(target_r | row r) for rows [0, n) of f32 logits [*, V], in f64.
std::vector<double> row_logprobs(const kiln::Tensor& logits, const std::vector<int32_t>& targets) {
  const int64_t V = logits.dim(1), n = int64_t(targets.size());
  std::vector<double> out(size_t(n), 0.0);
  const float* base = logits.data<float>();
  kiln::parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = base + r * V;
      double m = -INFINITY;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, double(x[v]));
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) - m);
      out[size_t(r)] = double(x[targets[size_t(r)]]) - (m + std::log(s));
    }
  });
  return out;
}

}  // namespace

KILN_COMMAND(perplexity, "Mean NLL and perplexity of a text over fixed-length windows") {
  auto f = std::make_shared<PerplexityFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder (config.json, model.safetensors)")
      ->required();
  cmd.add_option("--text-file", f->text_file, "Text to score (encoded without special tokens)");
  cmd.add_option("--ids", f->ids, "Token ids to score: 1,2,3");
  cmd.add_option("--context", f->context,
                 "Window length in tokens (default: the whole text if it fits "
                 "max_position_embeddings, else max_position_embeddings)");
  cmd.add_option("--chunk", f->chunk,
                 "Tokens per score call within a window (bounds the logits held at once)")
      ->capture_default_str();
  cmd.add_flag("--logprobs", f->logprobs, "Also print the log-probability of every scored token");
  cmd.add_flag("--json", f->json, "Print one JSON object");
  kiln::cli::add_model_flags(cmd, f->model);
  return [f]() -> int {
    if (f->text_file.empty() && f->ids.empty())
      throw kiln::Error("--text-file", "give --text-file or --ids");
    auto model = kiln::cli::load_model(f->model_dir, f->model);
    const auto& mc = model->config();
    const std::vector<int32_t> ids = read_tokens(*f);
    const int64_t total = int64_t(ids.size());
    if (total < 2)
      throw kiln::Error(f->ids.empty() ? "--text-file" : "--ids",
                        "needs at least 2 tokens to score, got " + std::to_string(total));
    for (int32_t id : ids)
      if (id < 0 || id >= mc.vocab_size)
        throw kiln::Error(f->ids.empty() ? "--text-file" : "--ids",
                          "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(mc.vocab_size) + ")");
    int64_t N = std::min<int64_t>(total, mc.max_position_embeddings);
    if (f->context) {
      N = *f->context;
      if (N < 2 || N > mc.max_position_embeddings)
        throw kiln::Error("--context", "must be in [2, max_position_embeddings = " +
                                           std::to_string(mc.max_position_embeddings) + "], got " +
                                           std::to_string(N));
    }
    // Chunks of C tokens into a cache of S = ceil(N / C) * C slots (slots past N stay masked).
    if (f->chunk <= 0)
      throw kiln::Error("--chunk", "must be positive, got " + std::to_string(f->chunk));
    const int64_t C = std::min(N, f->chunk);
    const int64_t S = (N + C - 1) / C * C;
    kiln::models::KVCache cache = model->make_cache(1, S);
    kiln::Tensor chunk_ids = kiln::Tensor::empty({1, C}, kiln::DType::i32);
    kiln::Tensor chunk_pos = kiln::Tensor::empty({1, C}, kiln::DType::i32);
    kiln::Tensor kv_mask = kiln::Tensor::empty({1, S}, kiln::DType::i32);

    std::vector<double> logprobs;
    int64_t windows = 0;
    for (int64_t start = 0; start + 1 < total; start += N) {
      const int64_t n = std::min(N, total - start);  // real tokens in this window
      ++windows;
      for (int64_t s = 0; s < S; ++s) kv_mask.data<int32_t>()[s] = s < n ? 1 : 0;
      // Chunks that hold a scored row (rows 0..n-2); later chunks are all padding.
      for (int64_t off = 0; off < n - 1; off += C) {
        std::vector<int32_t> targets;
        for (int64_t i = 0; i < C; ++i) {
          const int64_t t = off + i;
          chunk_ids.data<int32_t>()[i] = t < n ? ids[size_t(start + t)] : 0;
          chunk_pos.data<int32_t>()[i] =
              int32_t(std::min<int64_t>(t, mc.max_position_embeddings - 1));
          if (t < n - 1) targets.push_back(ids[size_t(start + t + 1)]);
        }
        kiln::Tensor logits = model->forward("score", chunk_ids, chunk_pos, kv_mask, cache, off);
        auto lp = row_logprobs(logits, targets);
        logprobs.insert(logprobs.end(), lp.begin(), lp.end());
      }
    }
    double nll = 0;
    for (double lp : logprobs) nll -= lp;
    const int64_t scored = int64_t(logprobs.size());
    const double mean_nll = nll / double(scored);
    const double ppl = std::exp(mean_nll);

    if (f->json) {
      nlohmann::json j = {{"tokens_scored", scored}, {"mean_nll", mean_nll},
                          {"perplexity", ppl},       {"windows", windows},
                          {"context", N}};
      if (f->logprobs) j["logprobs"] = logprobs;
      std::cout << j.dump() << "\n";
      return 0;
    }
    std::cout.precision(10);
    std::cout << "tokens_scored: " << scored << "\nmean_nll: " << mean_nll
              << "\nperplexity: " << ppl << "\nwindows: " << windows << "\ncontext: " << N << "\n";
    if (f->logprobs) {
      std::cout << "logprobs:\n";
      for (double lp : logprobs) std::cout << lp << "\n";
    }
    return 0;
  };
}
