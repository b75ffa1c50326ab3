// Linear-layer benchmark on the Qwen3-0.6B shapes (hidden 1024, 28 layers, intermediate 3072,
// vocab 151936), bf16, against rooflines measured in the same process:
//   decode  (M = 1..8): GB/s of packed weights streamed, vs measure_memory_bandwidth() over as
//           many bytes
//   prefill (M = 128, 512): GFLOP/s, vs the machine's bf16 arithmetic peak measured in the process
//   (measure_arithmetic_peak: vdpbf16ps where the CPU has AVX512_BF16, 850-950 GFLOP/s on the
//   2-core Zen 5 VM with 24 chains, ~836 with the 12 it had before the thirty-seventh session;
//   f32 FMAs elsewhere) or --peak, and vs measure_gemm_peak(bf16).
// Every layer gets its own packed copy, as in the real model, so decode cannot hit in cache.
// Decode's model order alternates with plain reads of the same bytes, repeat by repeat, each with
// one prefetch per 4 KiB page as the GEMVs take (kick_page_ahead): one block at a time (one stream
// a core, as the GEMVs walk them), and two blocks side by side (two streams a core, which
// measure_memory_bandwidth takes too); the medians of the paired ratios are the figures this VM's
// bandwidth phases move least.
//
// Usage: OMP_NUM_THREADS=2 bench_linear [--reps R] [--layers L] [--peak GFLOPS] [--m 1,128,512]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/threads.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::cpu::PackedLinear;

using kiln::bench::now_s;
using kiln::bench::random_bf16;

struct Shape {
  const char* name;
  int64_t n, k;
};

// Times of `reps` runs of each step on a spinning team (kiln/core/threads.h), taken in turn so
// that all meet the same phases of the machine's memory bandwidth, each round starting one step
// later (a b c, b c a, c a b, ...): on this VM the first of a round often ran ahead. times[i][r] is
// step i's time in round r.
std::vector<std::vector<double>> time_in_turn(int reps,
                                              const std::vector<std::function<void()>>& steps) {
  const size_t n = steps.size();
  std::vector<std::vector<double>> times(n);
  for (int r = 0; r < reps; ++r)
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (size_t(r) + j) % n;
      const double t0 = now_s();
      kiln::run_with_spinning_team(steps[i]);
      times[i].push_back(now_s() - t0);
    }
  return times;
}

// Bytes to read in blocks of one packed 64-column block's size (K x 64 bf16).
struct ReadBuffer {
  Tensor bytes;
  int64_t block_bytes;
};

ReadBuffer touched_bytes(size_t n, int64_t k) {
  Tensor t = Tensor::empty({int64_t(n / 2)}, DType::bf16);
  std::memset(t.data<uint16_t>(), 1, n);
  return {t, k * 64 * 2};
}

std::atomic<uint64_t> read_sink{0};

// Reads every byte of r once, its blocks shared as gemv_bf16 shares a weight's blocks, `streams`
// blocks at a time side by side (kiln::cpu::sum_lines): one, as gemv_bf16 walks them, or two;
// with one prefetch per 4 KiB page, as gemv_bf16 takes off Intel cores.
void read_blocks(const ReadBuffer& r, int streams) {
  const auto* base = reinterpret_cast<const char*>(r.bytes.data<uint16_t>());
  const int64_t blocks = int64_t(r.bytes.numel() * 2) / r.block_bytes;
  kiln::parallel_for_stealing(blocks, streams, [&](int64_t b0, int64_t b1) {
    read_sink += kiln::cpu::sum_lines(reinterpret_cast<const uint64_t*>(base + b0 * r.block_bytes),
                                      (b1 - b0) * r.block_bytes / 64,
                                      kiln::cpu::ReadPrefetch::kPageKick,
                                      /*streams=*/int(b1 - b0));
  });
}

// The GEMM epilogues against the pairs they replace, over all layers' weights, alternated in one
// process (a pair's f32 projection goes to memory and back; the fused op's never leaves the
// tile): qkv then q/k-norm + RoPE + cache (one prompt of M tokens, Qwen3's 16/8 heads of 128),
// and gate_up then SiLU * up.
void time_epilogues(int64_t M, const Tensor& x_all,
                    const std::vector<std::shared_ptr<PackedLinear>>& qkv,
                    const std::vector<std::shared_ptr<PackedLinear>>& gate_up, int reps) {
  const int64_t hq = 16, hkv = 8, d = 128, inter = 3072;
  Tensor x = x_all.reshape({M * 3072}).slice0(0, M * 1024).reshape({M, 1024});
  std::vector<int32_t> pos(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) pos[size_t(i)] = int32_t(i);
  const Tensor positions = Tensor::from_vector(pos, {1, M});
  std::vector<float> table(static_cast<size_t>(M * d));
  for (int64_t p = 0; p < M; ++p)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = double(p) * std::pow(1e6, -2.0 * double(i) / double(d));
      table[size_t(p * d + i)] = float(std::cos(a));
      table[size_t(p * d + d / 2 + i)] = float(std::sin(a));
    }
  const Tensor cos_sin = Tensor::from_vector(table, {M, d});
  const Tensor norm = random_bf16(1, d, 11).reshape({d});
  Tensor q = Tensor::empty({1, M, hq, d}, DType::f32);
  Tensor k_cache = Tensor::zeros({1, M, hkv, d}, DType::bf16);
  Tensor v_cache = Tensor::zeros({1, M, hkv, d}, DType::bf16);
  Tensor proj = Tensor::empty({M, (hq + 2 * hkv) * d}, DType::f32);
  Tensor gu = Tensor::empty({M, 2 * inter}, DType::f32), act = Tensor::empty({M, inter}, DType::bf16);
  std::vector<double> t[4];  // qkv pair, qkv fused, gate_up pair, gate_up fused
  for (int r = 0; r < reps; ++r) {
    for (int variant = 0; variant < 4; ++variant) {
      const double t0 = now_s();
      for (size_t l = 0; l < qkv.size(); ++l) {
        if (variant == 0) {
          linear(x, *qkv[l], proj);
          kiln::cpu::qk_norm_rope_cache(proj, norm, norm, 1e-6f, positions, cos_sin, 0, q, k_cache, v_cache);
        } else if (variant == 1) {
          linear_qk_norm_rope_cache(x, *qkv[l], norm, norm, 1e-6f, positions, cos_sin, 0, q, k_cache,
                                    v_cache);
        } else if (variant == 2) {
          linear(x, *gate_up[l], gu);
          kiln::cpu::silu_mul(gu, act);
        } else {
          linear_silu_mul(x, *gate_up[l], act);
        }
      }
      t[variant].push_back(now_s() - t0);
    }
  }
  for (auto& v : t) std::sort(v.begin(), v.end());
  auto range = [](const std::vector<double>& v) {
    static char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f-%.1f (median %.1f)", v.front() * 1e3, v.back() * 1e3,
                  v[v.size() / 2] * 1e3);
    return std::string(buf);
  };
  std::printf("M=%-4lld epilogues, %zu layers, ms: qkv + q/k-norm/RoPE/cache %s -> fused %s;"
              " gate_up + SiLU * up %s -> fused %s\n",
              (long long)M, qkv.size(), range(t[0]).c_str(), range(t[1]).c_str(),
              range(t[2]).c_str(), range(t[3]).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, layers = 28;
  std::vector<int64_t> ms = {1, 2, 4, 8, 128, 512};
  double machine_peak = 0;  // measured below unless --peak gives it
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--peak")) machine_peak = std::atof(argv[i + 1]) * 1e9;
    if (!std::strcmp(argv[i], "--m")) {
      ms.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        ms.push_back(std::strtoll(p, &end, 10));
        if (end == p || ms.back() <= 0) {
          std::fprintf(stderr, "--m: expected a comma-separated list of positive row counts\n");
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  std::printf("threads %d, layers %d, best of %d repeats\n", kiln::num_threads(), layers, reps);
  if (machine_peak <= 0) machine_peak = kiln::cpu::measure_arithmetic_peak(DType::bf16);
  const double peak = kiln::cpu::measure_gemm_peak(DType::bf16);
  std::printf("measured: linear() bf16 peak (M=512 N=K=2048) %.0f GFLOP/s (%.0f%% of %.0f machine"
              " peak)\n",
              peak / 1e9, 100 * peak / machine_peak, machine_peak / 1e9);

  const std::vector<Shape> shapes = {{"qkv", 4096, 1024},
                                     {"o_proj", 1024, 2048},
                                     {"gate_up", 6144, 1024},
                                     {"down", 1024, 3072}};
  std::vector<std::vector<std::shared_ptr<PackedLinear>>> packed(shapes.size());
  size_t total_bytes = 0;
  const double t_pack = now_s();
  for (size_t s = 0; s < shapes.size(); ++s) {
    Tensor w = random_bf16(shapes[s].n, shapes[s].k, uint32_t(s + 1));
    for (int l = 0; l < layers; ++l) {
      packed[s].push_back(PackedLinear::pack(w, DType::bf16));
      total_bytes += packed[s].back()->bytes();
    }
  }
  auto lm_head = PackedLinear::pack(random_bf16(151936, 1024, 99), DType::bf16);
  total_bytes += lm_head->bytes();
  std::printf("packed %.3f GB of bf16 weights in %.2f s\n\n", total_bytes / 1e9, now_s() - t_pack);

  double bw = 0;
  std::vector<ReadBuffer> read_bufs;  // made on first use, kept for every M
  for (int64_t M : ms) {
    const bool decode = M <= 8;
    if (decode) {
      // The VM's bandwidth drifts (33-76 GB/s, shared/MACHINE.md): re-measure next to each run,
      // reading as many bytes as a token step does (kernels.h: the read rate depends on it).
      bw = kiln::cpu::measure_memory_bandwidth(total_bytes);
      std::printf("stream read now (%.2f GB buffer): %.1f GB/s\n", total_bytes / 1e9, bw / 1e9);
    }
    Tensor x = random_bf16(M, 3072, 7);
    Tensor y = Tensor::zeros({M, 151936}, DType::f32);
    double sum_t = 0, sum_bytes = 0, sum_flops = 0;
    for (size_t s = 0; s < shapes.size(); ++s) {
      const int64_t n = shapes[s].n, k = shapes[s].k;
      Tensor xs = x.reshape({M * 3072}).slice0(0, M * k).reshape({M, k});
      Tensor ys = Tensor::empty({M, n}, DType::f32);
      linear(xs, *packed[s][0], ys);  // warm the primitive cache
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        for (int l = 0; l < layers; ++l) linear(xs, *packed[s][l], ys);
        best = std::min(best, (now_s() - t0) / layers);
      }
      const double bytes = double(packed[s][0]->bytes()), flops = 2.0 * M * n * k;
      sum_t += best * layers;
      sum_bytes += bytes * layers;
      sum_flops += flops * layers;
      if (decode) {
        std::printf("M=%-4lld %-8s N=%-6lld K=%-5lld %8.1f us %6.1f GB/s (%3.0f%% of bw)\n",
                    (long long)M, shapes[s].name, (long long)n, (long long)k, best * 1e6,
                    bytes / best / 1e9, 100 * bytes / best / bw);
      } else {
        std::printf("M=%-4lld %-8s N=%-6lld K=%-5lld %8.1f us %6.0f GFLOP/s (%3.0f%% of machine"
                    " peak, %3.0f%% of linear peak)\n",
                    (long long)M, shapes[s].name, (long long)n, (long long)k, best * 1e6,
                    flops / best / 1e9, 100 * flops / best / machine_peak,
                    100 * flops / best / peak);
      }
    }
    // lm_head: decode runs it on the last token only.
    {
      Tensor xs = x.reshape({M * 3072}).slice0(0, M * 1024).reshape({M, 1024});
      linear(xs, *lm_head, y);
      double best = 1e30;
      for (int r = 0; r < std::max(3, reps / 2); ++r) {
        const double t0 = now_s();
        linear(xs, *lm_head, y);
        best = std::min(best, now_s() - t0);
      }
      const double bytes = double(lm_head->bytes()), flops = 2.0 * M * 151936 * 1024;
      sum_t += best;
      sum_bytes += bytes;
      sum_flops += flops;
      if (decode) {
        std::printf("M=%-4lld lm_head  N=151936 K=1024  %8.1f us %6.1f GB/s (%3.0f%% of bw)\n",
                    (long long)M, best * 1e6, bytes / best / 1e9, 100 * bytes / best / bw);
      } else {
        std::printf("M=%-4lld lm_head  N=151936 K=1024  %8.1f us %6.0f GFLOP/s (%3.0f%% of"
                    " machine peak)\n",
                    (long long)M, best * 1e6, flops / best / 1e9, 100 * flops / best / machine_peak);
      }
    }
    if (decode) {
      std::printf("M=%-4lld all linears of one token step: %.2f ms, %.1f GB/s (%.0f%% of bw),"
                  " %.1f steps/s\n",
                  (long long)M, sum_t * 1e3, sum_bytes / sum_t / 1e9, 100 * sum_bytes / sum_t / bw,
                  1 / sum_t);
      // The same calls in a decode step's order (layer by layer, then lm_head) on a spinning team,
      // as a model's decode step runs them: what a model sees.
      std::vector<Tensor> ys;
      for (const Shape& sh : shapes) ys.push_back(Tensor::empty({M, sh.n}, DType::f32));
      // Plain reads of as many bytes, in buffers of the same sizes, in the same calls split the
      // same way (64-column blocks shared by work stealing): one block at a time, the GEMVs'
      // access pattern, and two side by side, the fastest read found (what a GEMV at the
      // roofline would match). Each repeat of the model order is paired with one of each, the
      // order of the three turning every repeat.
      if (read_bufs.empty()) {
        for (int l = 0; l < layers; ++l)
          for (size_t s = 0; s < shapes.size(); ++s)
            read_bufs.push_back(touched_bytes(packed[s][0]->bytes(), shapes[s].k));
        read_bufs.push_back(touched_bytes(lm_head->bytes(), 1024));
      }
      const auto timed = time_in_turn(
          reps, {[&] {
                   for (int l = 0; l < layers; ++l)
                     for (size_t s = 0; s < shapes.size(); ++s) {
                       Tensor xs = x.reshape({M * 3072})
                                       .slice0(0, M * shapes[s].k)
                                       .reshape({M, shapes[s].k});
                       linear(xs, *packed[s][size_t(l)], ys[s]);
                     }
                   Tensor xs = x.reshape({M * 3072}).slice0(0, M * 1024).reshape({M, 1024});
                   linear(xs, *lm_head, y);
                 },
                 [&] {
                   for (const ReadBuffer& r : read_bufs) read_blocks(r, 2);
                 },
                 [&] {
                   for (const ReadBuffer& r : read_bufs) read_blocks(r, 1);
                 }});
      std::vector<double> times = timed[0], reads = timed[1], reads_one = timed[2];
      // The model order's speed over its paired reads': two streams a core, and one.
      std::vector<double> paired, paired_one;
      for (size_t r = 0; r < times.size(); ++r) {
        paired.push_back(reads[r] / times[r]);
        paired_one.push_back(reads_one[r] / times[r]);
      }
      std::sort(times.begin(), times.end());
      std::sort(reads.begin(), reads.end());
      std::sort(paired.begin(), paired.end());
      std::sort(paired_one.begin(), paired_one.end());
      // The best repeat, as the rows above, and the median, which is what `kiln bench` reports
      // (its decode tokens/s and KILN_PROFILE's per-op times are not best-of).
      std::printf("M=%-4lld the same in model order:        %.2f ms, %.1f GB/s (%.0f%% of bw);"
                  " median %.2f ms, %.1f GB/s\n",
                  (long long)M, times.front() * 1e3, sum_bytes / times.front() / 1e9,
                  100 * sum_bytes / times.front() / bw, times[times.size() / 2] * 1e3,
                  sum_bytes / times[times.size() / 2] / 1e9);
      std::printf("M=%-4lld read, two streams a core, page kicks: %.2f ms, %.1f GB/s"
                  " (%.0f%% of bw);"
                  " median %.2f ms, %.1f GB/s\n",
                  (long long)M, reads.front() * 1e3, sum_bytes / reads.front() / 1e9,
                  100 * sum_bytes / reads.front() / bw, reads[reads.size() / 2] * 1e3,
                  sum_bytes / reads[reads.size() / 2] / 1e9);
      std::printf("M=%-4lld model order / its paired read of two streams a core: median %.3f"
                  " (quartiles %.3f, %.3f)\n",
                  (long long)M, paired[paired.size() / 2], paired[paired.size() / 4],
                  paired[3 * paired.size() / 4]);
      std::printf("M=%-4lld model order / its paired read of one stream a core:  median %.3f"
                  " (quartiles %.3f, %.3f)\n\n",
                  (long long)M, paired_one[paired_one.size() / 2],
                  paired_one[paired_one.size() / 4], paired_one[3 * paired_one.size() / 4]);
    } else {
      std::printf("M=%-4lld all linears: %.1f ms, %.0f GFLOP/s (%.0f%% of machine peak),"
                  " %.0f tokens/s\n",
                  (long long)M, sum_t * 1e3, sum_flops / sum_t / 1e9,
                  100 * sum_flops / sum_t / machine_peak, M / sum_t);
      // The layers' linears in a prefill's order (no lm_head: a prefill runs it on one row),
      // each layer's weights read once, as the model reads them: the rows above reuse each
      // shape's activations back to back, a model's linears alternate shapes.
      std::vector<Tensor> ys;
      for (const Shape& sh : shapes) ys.push_back(Tensor::empty({M, sh.n}, DType::f32));
      const double layer_flops = sum_flops - 2.0 * M * 151936 * 1024;
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        for (int l = 0; l < layers; ++l)
          for (size_t s = 0; s < shapes.size(); ++s) {
            Tensor xs = x.reshape({M * 3072}).slice0(0, M * shapes[s].k).reshape({M, shapes[s].k});
            linear(xs, *packed[s][size_t(l)], ys[s]);
          }
        times.push_back(now_s() - t0);
      }
      std::sort(times.begin(), times.end());
      std::printf("M=%-4lld the layers' linears in model order: best %.1f ms, %.0f GFLOP/s (%.0f%%"
                  " of machine peak); median %.1f ms, %.0f GFLOP/s\n",
                  (long long)M, times.front() * 1e3, layer_flops / times.front() / 1e9,
                  100 * layer_flops / times.front() / machine_peak,
                  times[times.size() / 2] * 1e3, layer_flops / times[times.size() / 2] / 1e9);
      time_epilogues(M, x, packed[0], packed[2], reps);
      std::printf("\n");
    }
  }
  return 0;
}
