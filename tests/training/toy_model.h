// A bigram language model with analytic gradients, implementing TrainableModel for the Trainer's
// tests: logits[b, t, :] = W[ids[b, t], :] + bias, cross-entropy against labels[b, t + 1].
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/training/trainable_model.h"

namespace kiln::training::testing {

class BigramModel : public TrainableModel {
 public:
  explicit BigramModel(int64_t vocab, uint64_t seed = 1) : vocab_(vocab) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 0.1f);
    Tensor w = Tensor::empty({vocab, vocab}, DType::f32);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = nd(rng);
    params_.push_back({"bigram.weight", w});
    params_.push_back({"bigram.bias", Tensor::zeros({vocab}, DType::f32)});
  }

  std::vector<Parameter>& parameters() override { return params_; }

  LossSum forward_backward(const TrainBatch& batch, float loss_scale,
                           std::vector<Tensor>& grads) override {
    ++calls_;
    LossSum s = run(batch, loss_scale, &grads);
    if (calls_ == nan_at_call) s.loss_sum = NAN;
    return s;
  }
  LossSum evaluate(const TrainBatch& batch) override { return run(batch, 0.f, nullptr); }

  void save_pretrained(const std::string& dir) override {
    io::write_file_atomic(dir + "/config.json",
                          "{\"model_type\": \"bigram\", \"vocab_size\": " +
                              std::to_string(vocab_) + "}\n");
    if (fail_save) throw Error(dir + "/model.safetensors", "No space left on device (injected)");
    io::write_file_atomic(dir + "/generation_config.json", "{}\n");
    std::vector<std::pair<std::string, Tensor>> t;
    for (const auto& p : params_) t.emplace_back(p.name, p.value);
    io::save_safetensors(dir + "/model.safetensors", t);
  }

  int64_t calls_ = 0;
  int64_t nan_at_call = -1;
  bool fail_save = false;

 private:
  LossSum run(const TrainBatch& batch, float scale, std::vector<Tensor>* grads) {
    const int32_t* ids = batch.input_ids.data<int32_t>();
    const int32_t* labels = batch.labels.data<int32_t>();
    const float* w = params_[0].value.data<float>();
    const float* bias = params_[1].value.data<float>();
    int64_t B = batch.batch_size(), L = batch.seq_len(), V = vocab_;
    LossSum s;
    std::vector<double> p(static_cast<size_t>(V));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t + 1 < L; ++t) {
        int32_t y = labels[b * L + t + 1];
        if (y == -100) continue;
        int32_t x = ids[b * L + t];
        double mx = -1e300;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(w[x * V + v] + bias[v]));
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += p[size_t(v)] = std::exp(double(w[x * V + v] + bias[v]) - mx);
        s.loss_sum += std::log(z) + mx - double(w[x * V + y] + bias[y]);
        s.num_tokens += 1;
        if (!grads) continue;
        float* gw = (*grads)[0].data<float>();
        float* gb = (*grads)[1].data<float>();
        for (int64_t v = 0; v < V; ++v) {
          float d = float(p[size_t(v)] / z - (v == y ? 1.0 : 0.0)) * scale;
          gw[x * V + v] += d;
          gb[v] += d;
        }
      }
    return s;
  }

  int64_t vocab_;
  std::vector<Parameter> params_;
};

// Letters a..z -> 1..26, space -> 27, anything else -> 28; pad 0, EOS 29; vocabulary 30.
inline std::vector<int32_t> char_tokenize(const std::string& s) {
  std::vector<int32_t> out;
  for (unsigned char c : s) out.push_back(c >= 'a' && c <= 'z' ? int32_t(c - 'a' + 1) : c == ' ' ? 27 : 28);
  return out;
}
constexpr int64_t kToyVocab = 30;
constexpr int32_t kToyPad = 0;
constexpr int32_t kToyEos = 29;

// A fresh, empty folder under the system temp dir, unique per test; removed when the test binary
// exits unless KILN_KEEP_TEST_DIRS is set (to look at the files a test wrote).
struct TestDirs {
  std::vector<std::string> dirs;
  ~TestDirs() {
    if (std::getenv("KILN_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
inline std::string fresh_dir(const std::string& name) {
  static TestDirs registry;
  auto dir = std::filesystem::temp_directory_path() /
             ("kiln_training_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  registry.dirs.push_back(dir.string());
  return dir.string();
}

inline void write_text(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, text);
}

}  // namespace kiln::training::testing
