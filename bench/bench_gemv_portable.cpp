// The portable decode GEMV (linear_bf16_portable with one row: the AVX2 + FMA loop that builds
// without AVX512_BF16 run) over a Qwen3-0.6B token step's weights, in model order on a spinning
// team as a decode step runs it: the 28 layers' qkv, o_proj, gate_up and down, then the lm_head.
// It runs on any x86 CPU with AVX2, so its page kick (GemvPrefetch, kick_page_ahead) can be timed
// against none on a machine that also has AVX-512: bench_linear cannot, since linear() takes the
// AVX512_BF16 GEMV (or, in a build without it, oneDNN where oneDNN has a bf16 matmul).
//
// Usage: KILN_GEMV_PREFETCH=page|0 OMP_NUM_THREADS=2 bench_gemv_portable [--reps 9]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  using kiln::cpu::detail::GemvPrefetch;
  if (!kiln::cpu::detail::cpu_has_avx2_fma()) {
    std::printf("bench_gemv_portable: needs AVX2 + FMA (the portable kernel's vector loop)\n");
    return 0;
  }
  struct Shape {
    int64_t n, k;
  };
  const Shape layer[] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}};
  std::vector<Shape> order;
  for (int l = 0; l < 28; ++l) order.insert(order.end(), std::begin(layer), std::end(layer));
  order.push_back({151936, 1024});
  // The bytes are what the loop reads; bf16 0x3f3f (~0.75) keeps every product finite.
  std::vector<uint16_t*> weights;
  size_t total = 0;
  for (const Shape& s : order) {
    const size_t bytes = size_t(s.n * s.k) * 2;
    auto* w = static_cast<uint16_t*>(kiln::map_pages(bytes));
    std::memset(w, 0x3f, bytes);
    weights.push_back(w);
    total += bytes;
  }
  std::vector<uint16_t> x(3072, 0x3f80);
  std::vector<float> y(151936);
  const GemvPrefetch mode = kiln::cpu::detail::gemv_prefetch();
  std::printf("threads %d, %.2f GB of weights a step, prefetch %s (KILN_GEMV_PREFETCH)\n",
              kiln::num_threads(), double(total) / 1e9,
              mode == GemvPrefetch::kPageKick    ? "page kick"
              : mode == GemvPrefetch::kEveryLine ? "every line (not taken by this kernel)"
                                                 : "none");
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const double t0 = kiln::bench::now_s();
    kiln::run_with_spinning_team([&] {
      for (size_t i = 0; i < order.size(); ++i)
        kiln::cpu::detail::linear_bf16_portable(x.data(), 1, order[i].k, weights[i], order[i].n,
                                                y.data(), false, nullptr);
    });
    rates.push_back(double(total) / (kiln::bench::now_s() - t0) / 1e9);
  }
  std::printf("GB/s per step:");
  for (double g : rates) std::printf(" %.1f", g);
  std::printf(" | median %.1f\n", kiln::bench::median(rates));
  for (size_t i = 0; i < order.size(); ++i)
    kiln::unmap_pages(weights[i], size_t(order[i].n * order[i].k) * 2);
  return y[0] == 42.f ? 1 : 0;  // keeps the results live
}
