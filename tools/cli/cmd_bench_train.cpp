// kiln bench-train MODEL_DIR [--batch B] [--seq-len L] [--steps S] [--f32] [--no-compile] [--json]:
// training throughput of one optimizer step on random ids (every position a label), against the
// GEMM roofline the command measures itself.
//
//   step      = zero the gradients + the compiled forward+backward (one graph per (B, L)) + global
//               norm clipping at 1.0 + AdamW, exactly what Trainer::train runs per step with
//               gradient_accumulation_steps = 1; one warm-up step (compiles), then the median of S.
//   tokens/s  = B * L / median step time.
//   FLOPs     = 6 * (matmul parameters: the decoder's linears and lm_head) per token, plus causal
//               attention, 3 x its forward 4 * Hq * D * (L + 1) / 2 per token and layer; the
//               embedding lookup and the elementwise ops are not counted. MFU = FLOP/s over the
//               measured peak of kiln's own bf16 (or f32) GEMM, as `kiln bench` does for prefill.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/error.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"
#include "kiln/training/causal_lm_model.h"
#include "kiln/training/optimizer.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

using kiln::cli::median;
using kiln::cli::seconds_since;

struct BenchTrainFlags {
  std::string model_dir;
  int64_t batch = 8, seq_len = 128, steps = 3;
  uint64_t seed = 0;
  bool f32 = false, no_compile = false, json = false;
};

kiln::cli::CommandRun setup_bench_train(CLI::App& cmd) {
  auto f = std::make_shared<BenchTrainFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder (config.json, model.safetensors)")
      ->required();
  cmd.add_option("--batch", f->batch, "Rows per step")->capture_default_str();
  cmd.add_option("--seq-len", f->seq_len, "Tokens per row")->capture_default_str();
  cmd.add_option("--steps", f->steps, "Timed steps (after one warm-up)")->capture_default_str();
  cmd.add_option("--seed", f->seed, "Seed of the random ids")->capture_default_str();
  cmd.add_flag("--f32", f->f32, "f32 compute (default: bf16 autocast with f32 master weights)");
  cmd.add_flag("--no-compile", f->no_compile, "Run the train graph eagerly");
  cmd.add_flag("--json", f->json, "Print one JSON object");
  return [f]() -> int {
    for (auto [v, name] : {std::pair{f->batch, "--batch"}, std::pair{f->seq_len, "--seq-len"},
                           std::pair{f->steps, "--steps"}})
      if (v <= 0) throw kiln::Error(name, "must be positive, got " + std::to_string(v));
    const double gemm_peak =
        kiln::cpu::measure_gemm_peak(f->f32 ? kiln::DType::f32 : kiln::DType::bf16);

    auto t_load = std::chrono::steady_clock::now();
    auto model = kiln::training::CausalLMTrainable::from_pretrained(
        f->model_dir, {.bf16 = !f->f32, .compile = !f->no_compile});
    const double load_s = seconds_since(t_load);
    const auto& c = model->config();
    const int64_t B = f->batch, L = f->seq_len;
    if (L > c.max_position_embeddings)
      throw kiln::Error("--seq-len", std::to_string(L) + " exceeds max_position_embeddings (" +
                                         std::to_string(c.max_position_embeddings) + ")");

    std::mt19937_64 rng(f->seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(c.vocab_size - 1));
    kiln::training::TrainBatch batch{kiln::Tensor::empty({B, L}, kiln::DType::i32),
                                     kiln::Tensor::empty({B, L}, kiln::DType::i32),
                                     kiln::Tensor::empty({B, L}, kiln::DType::i32)};
    for (int64_t i = 0; i < B * L; ++i) {
      batch.input_ids.data<int32_t>()[i] = pick(rng);
      batch.attention_mask.data<int32_t>()[i] = 1;
      batch.labels.data<int32_t>()[i] = batch.input_ids.data<int32_t>()[i];
    }
    auto& params = model->parameters();
    std::vector<kiln::Tensor> grads = kiln::training::zeros_like(params);
    kiln::training::AdamW optimizer(params, {.weight_decay = 0.0});
    const float loss_scale = 1.0f / float(kiln::training::count_label_tokens(batch));

    std::vector<double> step_s, fwd_bwd_s, clip_s, optimizer_s;
    double loss = 0;
    for (int64_t step = 0; step <= f->steps; ++step) {  // step 0 is the warm-up (compiles)
      const auto t0 = std::chrono::steady_clock::now();
      for (kiln::Tensor& g : grads) std::fill_n(g.data<float>(), g.numel(), 0.0f);
      loss = model->forward_backward(batch, loss_scale, grads).loss_sum * double(loss_scale);
      const double t_fb = seconds_since(t0);
      // As Trainer does it: the norm here, the clipping inside the AdamW pass.
      const double norm = kiln::training::global_grad_norm(grads);
      const double t_clip = seconds_since(t0);
      optimizer.step(params, grads, 1e-5, kiln::training::clip_coefficient(norm, 1.0));
      if (step == 0) continue;
      step_s.push_back(seconds_since(t0));
      fwd_bwd_s.push_back(t_fb);
      clip_s.push_back(t_clip - t_fb);
      optimizer_s.push_back(step_s.back() - t_clip);
    }
    const double tokens_per_s = double(B * L) / median(step_s);

    const double H = double(c.hidden_size), D = double(c.head_dim);
    const double layers = double(c.num_hidden_layers);
    const double matmul_params =
        layers * (H * double(c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * H +
                  3.0 * H * double(c.intermediate_size)) +
        double(c.vocab_size) * H;
    const double attn_flops =
        3 * layers * 4 * double(c.num_attention_heads) * D * double(L + 1) / 2;
    const double flops_per_token = 6 * matmul_params + attn_flops;
    int64_t param_count = 0;
    for (const auto& p : params) param_count += p.value.numel();

    nlohmann::json j = {
        {"model_dir", f->model_dir},
        {"batch", B},
        {"seq_len", L},
        {"steps", f->steps},
        {"dtype", f->f32 ? "f32" : "bf16"},
        {"compiled", !f->no_compile},
        {"threads", kiln::num_threads()},
        {"parameters", param_count},
        {"tokens_per_s", tokens_per_s},
        {"step_ms_median", median(step_s) * 1e3},
        {"step_ms", [&] {
           std::vector<double> ms;
           for (double s : step_s) ms.push_back(s * 1e3);
           return ms;
         }()},
        {"forward_backward_ms_median", median(fwd_bwd_s) * 1e3},
        {"clip_ms_median", median(clip_s) * 1e3},
        {"adamw_ms_median", median(optimizer_s) * 1e3},
        {"flops_per_token", flops_per_token},
        {"gemm_peak_gflops", gemm_peak / 1e9},
        {"mfu", tokens_per_s * flops_per_token / gemm_peak},
        {"loss", loss},
        {"load_ms", load_s * 1e3},
        {"peak_rss_bytes", kiln::peak_rss_bytes()},
        {"compile", model->compile_stats()},
    };
    if (f->json) {
      std::cout << j.dump() << "\n";
      return 0;
    }
    std::cout.precision(4);
    std::cout << "model " << f->model_dir << " (" << double(param_count) / 1e6 << " M parameters), "
              << j["dtype"].get<std::string>() << ", batch " << B << " x " << L << ", "
              << kiln::num_threads() << " threads\n"
              << "train: " << tokens_per_s << " tokens/s, step " << median(step_s) * 1e3
              << " ms (forward+backward " << median(fwd_bwd_s) * 1e3 << " ms, clip "
              << median(clip_s) * 1e3 << " ms, AdamW " << median(optimizer_s) * 1e3 << " ms)\n"
              << "MFU:   " << 100 * tokens_per_s * flops_per_token / gemm_peak << "% of "
              << gemm_peak / 1e9 << " GFLOP/s (" << flops_per_token / 1e9 << " GFLOP per token)\n"
              << "peak RSS " << double(kiln::peak_rss_bytes()) / 1e9 << " GB, loss " << loss
              << "\n";
    return 0;
  };
}

const kiln::cli::CommandRegistrar bench_train_registrar(
    "bench-train", "Training step speed (forward+backward+AdamW) against the GEMM peak",
    setup_bench_train);

}  // namespace
