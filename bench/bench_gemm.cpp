// Training GEMM benchmark: the three GEMMs of a bf16 linear layer in a training step (forward
// y = x W^T, input gradient dx = dy W, weight gradient dW += dy^T x) on the `small` and Qwen3-0.6B
// shapes, through kiln::cpu::gemm() as the train graph calls it, in GFLOP/s and as a fraction of
// the machine's bf16 peak (measured as `kiln bench` does, or --peak). KILN_GEMM_ONEDNN=1 routes
// every GEMM to oneDNN instead of kiln's kernel, for the comparison in docs/notes/cpu-gemm.md.
//
// Usage: OMP_NUM_THREADS=2 bench_gemm [--reps R] [--peak GFLOPS] [--only "0.6B 1x128"]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"

namespace {

using kiln::DType;
using kiln::Tensor;

using kiln::bench::now_s;
using kiln::bench::random_bf16;

struct Layer {
  const char* model;
  const char* name;
  int64_t tokens, out, in;  // y [tokens, out] = x [tokens, in] W^T, W [out, in]
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  const char* only = nullptr;  // --only "0.6B 1x128": one model/shape group
  double peak = 0;  // FLOP/s (--peak takes GFLOP/s); measured as `kiln bench` does by default
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--peak")) peak = std::atof(argv[i + 1]) * 1e9;
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
  }
  if (peak <= 0) peak = kiln::cpu::measure_arithmetic_peak(DType::bf16);  // 0 without AVX2/AVX-512
  const Layer layers[] = {
      {"small 8x128", "lm_head", 1024, 151936, 256}, {"small 8x128", "gate_up", 1024, 1536, 256},
      {"small 8x128", "down", 1024, 256, 768},       {"0.6B 1x512", "lm_head", 512, 151936, 1024},
      {"0.6B 1x512", "gate_up", 512, 6144, 1024},    {"0.6B 1x512", "down", 512, 1024, 3072},
      {"0.6B 1x128", "lm_head", 128, 151936, 1024},  {"0.6B 1x128", "qkv", 128, 4096, 1024},
      {"0.6B 1x128", "gate_up", 128, 6144, 1024},    {"0.6B 1x128", "down", 128, 1024, 3072},
  };
  std::printf("%s; peak %.0f GFLOP/s\n",
              std::getenv("KILN_GEMM_ONEDNN") ? "oneDNN (KILN_GEMM_ONEDNN set)" : "kiln gemm_bf16",
              peak / 1e9);
  for (const Layer& l : layers) {
    if (only && std::strcmp(only, l.model) != 0) continue;
    Tensor x = random_bf16(l.tokens, l.in, 1), w = random_bf16(l.out, l.in, 2);
    Tensor dy = random_bf16(l.tokens, l.out, 3);
    Tensor y = Tensor::empty({l.tokens, l.out}, DType::bf16);
    Tensor dx = Tensor::empty({l.tokens, l.in}, DType::f32);
    Tensor dw = Tensor::zeros({l.out, l.in}, DType::f32);
    const double flop = 2.0 * double(l.tokens) * double(l.out) * double(l.in);
    struct Run {
      const char* what;
      int64_t M, N, K;
      std::function<void()> fn;
    };
    const Run runs[] = {
        {"forward  y = x W^T", l.tokens, l.out, l.in,
         [&] { kiln::cpu::gemm(x, false, w, true, 0.f, y); }},
        {"grad in  dx = dy W", l.tokens, l.in, l.out,
         [&] { kiln::cpu::gemm(dy, false, w, false, 0.f, dx); }},
        {"grad w   dW += dy^T x", l.out, l.in, l.tokens,
         [&] { kiln::cpu::gemm(dy, true, x, false, 1.f, dw); }},
    };
    for (const Run& r : runs) {
      r.fn();  // warm-up: primitive creation, scratch growth
      double best = 1e30;
      for (int i = 0; i < reps; ++i) {
        const double t0 = now_s();
        r.fn();
        best = std::min(best, now_s() - t0);
      }
      std::printf(
          "%-12s %-8s %-22s M=%-6lld N=%-6lld K=%-6lld %8.2f ms %4.0f GFLOP/s (%3.0f%% of peak)\n",
          l.model, l.name, r.what, (long long)r.M, (long long)r.N, (long long)r.K, best * 1e3,
          flop / best / 1e9, peak > 0 ? 100 * flop / best / peak : 0.0);
    }
  }
  return 0;
}
