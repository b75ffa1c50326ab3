// kiln bench MODEL_DIR [--batch B] [--prompt-tokens P] [--new-tokens N] [--dtype ...] [--repeats R]
// [--json]: prefill and decode speed, each against a roofline the command measures itself.
//
//   prefill: B rows of P random (seeded) ids into a cache of P + N slots; one warm-up run, then the
//            median of R timed runs; tokens/s = B * P / time.
//   decode:  after each prefill, N greedy decode steps; the median step time over all timed steps;
//            tokens/s = B / step time.
// Rooflines (what the hardware could do at best for this model and shape):
//   decode  = measured read bandwidth / bytes one step must read: the backend's packed weights
//             (every linear layer, lm_head included) + norms + the KV cache read at the average fill
//             P + N / 2 (attention reads slots up to the current one). The bandwidth is the best
//             of several reads of one buffer of that many bytes (256 MiB to 2 GiB): on this VM a
//             256 MiB buffer read 4-16 % faster (median) than a 1.2 GB one, interleaved, and a
//             step has to read all of its bytes. The 256 MiB reading is reported beside it
//             (*_256mib);
//   prefill = measured GEMM peak / FLOPs per prompt token: 2 * the decoder layers' matmul parameters
//             + causal attention (4 * Hq * D * (P + 1) / 2 per layer), except that lm_head and the
//             last layer's o_proj and MLP run once per row (prefill computes the last position's
//             logits only), divided over P. The same FLOPs are also set against the machine's
//             arithmetic peak (vdpbf16ps with AVX512_BF16, else f32 FMAs; register-only loops on
//             all threads): the GEMM peak is kiln's own kernel, so only this one says how far that
//             kernel is from the hardware.
// This VM's read bandwidth drifts between phases (28-90 GB/s, often within one run), and so does its
// arithmetic speed (the vdpbf16ps peak measured 763-848 GFLOP/s within one hour), so both rooflines
// are paired with each timed repeat: the bandwidth, the GEMM peak and the machine's peak are
// measured (each a best of several passes) right before the repeat, its prefill time and its median
// decode step are set against them, and each fraction reported is the median of those paired
// fractions (the *_per_repeat fields hold them all). The bandwidth is also measured (256 MiB)
// before the model loads and after the timed runs (memory_bandwidth_gbs_before_after), and both
// peaks before the model loads (*_peak_gflops_before), for reference. Peak RSS is read after the
// warm-up run, before any of those measurements, so their buffers are not added to the model's.
// Before each repeat the latency of dependent loads is measured too, from a 4 MiB buffer (in the
// L3 on the Zen 5 VM) and from memory (measure_load_latency): not a roofline, but a sign of one
// kind of slow phase on that VM, in which other tenants' traffic evicts the L3 (4 MiB read 110-175
// ns instead of 17-29). On one day those phases ran the prefill 10-20 % slower against peaks that
// did not move; on another the chase did not track the prefill at all, whose slow phases were
// ones where kernels with loads slowed more than the register-only peak (bench/bench_phases.cpp;
// docs/benchmarks.md, forty-fourth and forty-fifth sessions).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/error.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"
#include "tools/cli/command.h"
#include "tools/cli/common.h"

namespace {

using kiln::cli::median;
using kiln::cli::seconds_since;

struct BenchFlags {
  std::string model_dir;
  int64_t batch = 1, prompt_tokens = 128, new_tokens = 64, repeats = 3;
  uint64_t seed = 0;
  kiln::cli::ModelFlags model;
  bool json = false;
};

// The latency probes' buffers (measure_load_latency): one that a share of an L3 holds, one far
// beyond every cache. On the Zen 5 VM 4 MiB read 17-29 ns in the L3's good phases, 8 MiB often
// 60-70 (other tenants hold much of the L3), and 16 MiB ~150, memory's latency.
constexpr size_t kCacheProbeBytes = size_t(4) << 20, kMemoryProbeBytes = size_t(64) << 20;

void require_positive(int64_t v, const char* name) {
  if (v <= 0) throw kiln::Error(name, "must be positive, got " + std::to_string(v));
}

}  // namespace

KILN_COMMAND(bench, "Prefill and decode speed against measured rooflines") {
  auto f = std::make_shared<BenchFlags>();
  cmd.add_option("MODEL_DIR", f->model_dir, "Model folder (config.json, model.safetensors)")
      ->required();
  cmd.add_option("--batch", f->batch, "Rows per call")->capture_default_str();
  cmd.add_option("--prompt-tokens", f->prompt_tokens, "Prompt tokens per row")
      ->capture_default_str();
  cmd.add_option("--new-tokens", f->new_tokens, "Decode steps")->capture_default_str();
  cmd.add_option("--repeats", f->repeats, "Timed repeats (after one warm-up)")
      ->capture_default_str();
  cmd.add_option("--seed", f->seed, "Seed of the random prompt ids")->capture_default_str();
  kiln::cli::add_model_flags(cmd, f->model);
  cmd.add_flag("--json", f->json, "Print one JSON object");
  return [f]() -> int {
    require_positive(f->batch, "--batch");
    require_positive(f->prompt_tokens, "--prompt-tokens");
    require_positive(f->new_tokens, "--new-tokens");
    require_positive(f->repeats, "--repeats");
    const kiln::DType dtype = kiln::parse_dtype(f->model.dtype, "--dtype");

    // Rooflines first (see the header comment on the bandwidth and peak RSS).
    const double bandwidth_before = kiln::cpu::measure_memory_bandwidth();
    const double gemm_peak_before = kiln::cpu::measure_gemm_peak(dtype);
    const double machine_peak_before = kiln::cpu::measure_arithmetic_peak(dtype);

    auto t_load = std::chrono::steady_clock::now();
    auto model = kiln::cli::load_model(f->model_dir, f->model);
    const double load_s = seconds_since(t_load);
    const size_t rss_after_load = kiln::current_rss_bytes();
    const auto& c = model->config();
    const int64_t B = f->batch, P = f->prompt_tokens, N = f->new_tokens, L = P + N;
    if (L > c.max_position_embeddings)
      throw kiln::Error("--prompt-tokens", "prompt + new tokens (" + std::to_string(L) +
                                               ") exceed max_position_embeddings (" +
                                               std::to_string(c.max_position_embeddings) + ")");

    // Compile both graphs up front: their compile time, and packed weights for the roofline.
    model->warmup("prefill", B, P, L);
    model->warmup("decode", B, 1, L);
    const size_t rss_after_compile = kiln::current_rss_bytes();

    // Work per token.
    const double act = double(kiln::dtype_size(model->dtype()));
    const double H = double(c.hidden_size), D = double(c.head_dim);
    const double Hq = double(c.num_attention_heads), Hkv = double(c.num_key_value_heads);
    const double layers = double(c.num_hidden_layers);
    // A layer's matmul parameters up to attention (qkv) and after it (o_proj, the MLP).
    const double qkv_params = H * double(c.q_dim() + 2 * c.kv_dim());
    const double post_attention_params =
        double(c.q_dim()) * H + 3.0 * H * double(c.intermediate_size);
    const double lm_head_params = double(c.vocab_size) * H;
    const double norm_bytes = (layers * (2 * H + (c.qk_norm ? 2 * D : 0)) + H) * act;
    const double kv_fill = double(P) + double(N) / 2;
    const double kv_read_per_row = layers * 2 * kv_fill * Hkv * D * act;
    const double decode_step_bytes =
        double(model->packed_bytes()) + norm_bytes + double(B) * kv_read_per_row;
    // The decode yardstick reads as many bytes as a step does (see the header comment), up to
    // 2 GiB, so that a big batch's cache does not make it a buffer of many GB.
    const size_t step_read_bytes = size_t(std::min(decode_step_bytes, double(size_t(2) << 30)));

    std::mt19937_64 rng(f->seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(c.vocab_size - 1));
    kiln::Tensor ids = kiln::Tensor::empty({B, P}, kiln::DType::i32);
    kiln::Tensor pos = kiln::Tensor::empty({B, P}, kiln::DType::i32);
    for (int64_t i = 0; i < B * P; ++i) {
      ids.data<int32_t>()[i] = pick(rng);
      pos.data<int32_t>()[i] = int32_t(i % P);
    }
    kiln::Tensor step_ids = kiln::Tensor::empty({B, 1}, kiln::DType::i32);
    kiln::Tensor step_pos = kiln::Tensor::empty({B, 1}, kiln::DType::i32);
    kiln::Tensor kv_mask = kiln::Tensor::zeros({B, L}, kiln::DType::i32);
    kiln::models::KVCache cache = model->make_cache(B, L);
    const int64_t V = c.vocab_size;

    std::vector<double> prefill_s, step_s;
    // Per timed repeat, the rooflines measured right before it (paired).
    std::vector<double> rep_bandwidth, rep_bandwidth_256mib, rep_step_s, rep_gemm_peak,
        rep_machine_peak, rep_cache_latency, rep_memory_latency;
    size_t rss = 0;
    for (int64_t rep = 0; rep <= f->repeats; ++rep) {  // rep 0 is the warm-up
      if (rep == 1) rss = kiln::peak_rss_bytes();
      if (rep > 0) {
        rep_bandwidth.push_back(kiln::cpu::measure_memory_bandwidth(step_read_bytes));
        rep_bandwidth_256mib.push_back(kiln::cpu::measure_memory_bandwidth());
        rep_gemm_peak.push_back(kiln::cpu::measure_gemm_peak(dtype));
        rep_machine_peak.push_back(kiln::cpu::measure_arithmetic_peak(dtype));
        rep_cache_latency.push_back(kiln::cpu::measure_load_latency(kCacheProbeBytes, false));
        rep_memory_latency.push_back(kiln::cpu::measure_load_latency(kMemoryProbeBytes, true));
      }
      const size_t first_step = step_s.size();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < L; ++s) kv_mask.data<int32_t>()[b * L + s] = s < P ? 1 : 0;
      auto t0 = std::chrono::steady_clock::now();
      kiln::Tensor logits = model->forward("prefill", ids, pos, kv_mask, cache, 0);
      if (rep > 0) prefill_s.push_back(seconds_since(t0));
      for (int64_t step = 0; step < N; ++step) {
        for (int64_t b = 0; b < B; ++b) {  // greedy, so the ids are what generation would feed
          const float* row = logits.data<float>() + b * V;
          step_ids.data<int32_t>()[b] = int32_t(std::max_element(row, row + V) - row);
          step_pos.data<int32_t>()[b] = int32_t(P + step);
          kv_mask.data<int32_t>()[b * L + P + step] = 1;
        }
        t0 = std::chrono::steady_clock::now();
        logits = model->forward("decode", step_ids, step_pos, kv_mask, cache, P + step);
        if (rep > 0) step_s.push_back(seconds_since(t0));
      }
      if (rep > 0)
        rep_step_s.push_back(median(std::vector<double>(step_s.begin() + first_step, step_s.end())));
    }
    const double bandwidth_after = kiln::cpu::measure_memory_bandwidth();
    const double bandwidth = median(rep_bandwidth);
    const double prefill_tps = double(B * P) / median(prefill_s);
    const double decode_tps = double(B) / median(step_s);

    const double decode_roofline = double(B) * bandwidth / decode_step_bytes;
    // Each repeat's tokens/s over its own roofline: (B / step) / (B * bandwidth / bytes).
    std::vector<double> rep_fraction, rep_fraction_256mib;
    for (size_t r = 0; r < rep_step_s.size(); ++r) {
      rep_fraction.push_back(decode_step_bytes / (rep_step_s[r] * rep_bandwidth[r]));
      rep_fraction_256mib.push_back(decode_step_bytes / (rep_step_s[r] * rep_bandwidth_256mib[r]));
    }
    const double attn_flops = layers * 4 * Hq * D * double(P + 1) / 2;
    // The last layer's o_proj and MLP, like lm_head, run on the last position only.
    const double prefill_flops_per_token =
        2 * (layers * qkv_params + (layers - 1) * post_attention_params +
             post_attention_params / double(P)) +
        attn_flops + 2 * lm_head_params / double(P);
    // Each repeat's prefill FLOP/s over the peaks measured right before it.
    std::vector<double> rep_prefill_fraction, rep_machine_fraction;
    for (size_t r = 0; r < prefill_s.size(); ++r) {
      const double flops = double(B * P) * prefill_flops_per_token / prefill_s[r];
      rep_prefill_fraction.push_back(flops / rep_gemm_peak[r]);
      rep_machine_fraction.push_back(rep_machine_peak[r] > 0 ? flops / rep_machine_peak[r] : 0.0);
    }
    const double gemm_peak = median(rep_gemm_peak), machine_peak = median(rep_machine_peak);
    const double prefill_roofline = gemm_peak / prefill_flops_per_token;
    const double prefill_fraction = median(rep_prefill_fraction);
    const double prefill_machine_fraction = median(rep_machine_fraction);
    auto in_units = [](std::vector<double> v, double unit) {  // as the JSON reports them
      for (double& x : v) x /= unit;
      return v;
    };

    const double param_count = double(model->weight_bytes()) / act;
    const double bf16_weight_bytes = param_count * 2;
    const size_t kv_bytes = cache.bytes();
    auto stats = model->compile_cache().stats();
    auto compile_ms = [&](const char* fn) {
      auto it = stats.find(fn);
      return it == stats.end() ? 0.0 : it->second.compile_ms;
    };

    nlohmann::json j = {
        {"model_dir", f->model_dir},
        {"batch", B},
        {"prompt_tokens", P},
        {"new_tokens", N},
        {"repeats", f->repeats},
        {"dtype", std::string(kiln::dtype_name(model->dtype()))},
        {"threads", kiln::num_threads()},
        {"prefill_tokens_per_s", prefill_tps},
        {"prefill_roofline_tokens_per_s", prefill_roofline},
        {"prefill_roofline_fraction", prefill_fraction},
        {"prefill_roofline_fraction_per_repeat", rep_prefill_fraction},
        {"decode_tokens_per_s", decode_tps},
        {"decode_roofline_tokens_per_s", decode_roofline},
        {"decode_roofline_fraction", median(rep_fraction)},
        {"decode_roofline_fraction_per_repeat", rep_fraction},
        {"decode_step_ms_median", median(step_s) * 1e3},
        {"prefill_ms_median", median(prefill_s) * 1e3},
        {"memory_bandwidth_gbs", bandwidth / 1e9},
        {"memory_bandwidth_gbs_per_repeat", in_units(rep_bandwidth, 1e9)},
        {"memory_bandwidth_gbs_before_after", {bandwidth_before / 1e9, bandwidth_after / 1e9}},
        {"memory_bandwidth_read_bytes", std::max(step_read_bytes, kiln::cpu::kMinBandwidthBytes)},
        {"memory_bandwidth_256mib_gbs_per_repeat", in_units(rep_bandwidth_256mib, 1e9)},
        {"decode_roofline_fraction_256mib", median(rep_fraction_256mib)},
        {"prefill_ms_per_repeat", in_units(prefill_s, 1e-3)},
        {"gemm_peak_gflops", gemm_peak / 1e9},
        {"gemm_peak_gflops_per_repeat", in_units(rep_gemm_peak, 1e9)},
        {"gemm_peak_gflops_before", gemm_peak_before / 1e9},
        {"machine_peak_gflops", machine_peak / 1e9},
        {"machine_peak_gflops_per_repeat", in_units(rep_machine_peak, 1e9)},
        {"machine_peak_gflops_before", machine_peak_before / 1e9},
        {"prefill_machine_peak_fraction", prefill_machine_fraction},
        {"prefill_machine_peak_fraction_per_repeat", rep_machine_fraction},
        {"cache_latency_ns", median(rep_cache_latency)},
        {"cache_latency_ns_per_repeat", rep_cache_latency},
        {"cache_latency_probe_bytes", kCacheProbeBytes},
        {"memory_latency_ns", median(rep_memory_latency)},
        {"memory_latency_ns_per_repeat", rep_memory_latency},
        {"decode_bytes_per_token", decode_step_bytes / double(B)},
        {"prefill_flops_per_token", prefill_flops_per_token},
        {"compile_ms", {{"prefill", compile_ms("prefill")}, {"decode", compile_ms("decode")}}},
        {"pack_ms", stats["prefill"].pack_ms + stats["decode"].pack_ms},
        {"load_ms", load_s * 1e3},
        {"peak_rss_bytes", rss},
        {"rss_after_load_bytes", rss_after_load},
        {"rss_after_compile_bytes", rss_after_compile},
        {"weight_bytes", model->weight_bytes()},
        {"packed_weight_bytes", model->packed_bytes()},
        {"kv_cache_bytes", kv_bytes},
        {"rss_ratio_to_bf16_weights_plus_kv", double(rss) / (bf16_weight_bytes + double(kv_bytes))},
    };
    if (f->json) {
      std::cout << j.dump() << "\n";
      return 0;
    }
    std::cout.precision(4);
    std::cout << "model " << f->model_dir << ", " << j["dtype"].get<std::string>() << ", batch " << B
              << ", prompt " << P << ", new " << N << ", " << kiln::num_threads() << " threads\n"
              << "prefill: " << prefill_tps << " tokens/s (" << 100 * prefill_fraction
              << "% of its roofline, paired per repeat; " << prefill_roofline << " = "
              << gemm_peak / 1e9 << " GFLOP/s median / " << prefill_flops_per_token / 1e9
              << " GFLOP per token";
    if (machine_peak > 0)
      std::cout << "; " << 100 * prefill_machine_fraction
                << "% of the machine's arithmetic peak, paired per repeat, " << machine_peak / 1e9
                << " GFLOP/s median";
    std::cout << ")\n"
              << "decode:  " << decode_tps << " tokens/s (" << 100 * median(rep_fraction)
              << "% of its roofline, paired per repeat; " << decode_roofline << " = "
              << bandwidth / 1e9 << " GB/s median / " << decode_step_bytes / 1e6
              << " MB per step)\n"
              << "latency: " << median(rep_cache_latency) << " ns per dependent load from "
              << (kCacheProbeBytes >> 20) << " MiB, " << median(rep_memory_latency)
              << " ns from memory (medians; where the first nears the second, other work is "
                 "evicting the L3)\n"
              << "compile: prefill " << compile_ms("prefill") << " ms, decode "
              << compile_ms("decode") << " ms (weight packing, once per model: "
              << stats["prefill"].pack_ms + stats["decode"].pack_ms << " ms)\n"
              << "peak RSS: " << double(rss) / 1e6 << " MB ("
              << double(rss) / (bf16_weight_bytes + double(kv_bytes))
              << "x bf16 weights + KV cache of " << (bf16_weight_bytes + double(kv_bytes)) / 1e6
              << " MB)\n";
    return 0;
  };
}
