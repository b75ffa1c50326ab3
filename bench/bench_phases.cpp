// The Zen 5 VM's phases, read beside a prefill: each round times the probes below, then the median
// of three prefills, and prints one line; the end prints how each probe's readings correlate with
// the prefill's rate over the rounds, and each probe's median over the thirds of the rounds with
// the slowest, middle and fastest prefills (by fraction of the peak). `kiln bench` pairs each
// repeat with the register-only peak and a 4 MiB chase; this tool adds kernels that load their
// operands, which on this VM slowed by up to a fifth in phases where the register-only loop slowed
// by 1-2 % and the chase did not move (docs/benchmarks.md, forty-fifth session).
//
//   chase 4M, chase 256K  ns per dependent load through 4 MiB (the L3 here) and 256 KiB (L2)
//   l1 / l2 gemm          linear() on operands that stay in L1 (48 x 64 x 128) and in L2
//                         (128 x 128 x 1024), each core its own copy, timed by itself: the slower
//                         core's GFLOP/s and the two cores' sum
//   peak                  measure_arithmetic_peak: register-only vdpbf16ps chains, both cores
//   prefill               the median of three prefills of P fixed tokens: ms, and GFLOP/s by the
//                         FLOPs kiln bench counts (prefill_flops_per_token, from kiln bench --json)
//
// Run: OMP_NUM_THREADS=2 build/bench/bench_phases MODEL_DIR [--rounds R] [--prompt-tokens P]
//        [--flops-per-token F]    (F: 0.875e9 for Qwen3-0.6B at P = 128, 0.917e9 at P = 512)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/models/causal_lm.h"

namespace {

using kiln::DType;
using kiln::Tensor;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_phases: %s\nusage: bench_phases MODEL_DIR [--rounds R] [--prompt-tokens P] "
               "[--flops-per-token F]\n",
               why.c_str());
  std::exit(2);
}

// One linear layer's operands, small enough for a cache level.
struct CachedLinear {
  Tensor x, y;
  std::shared_ptr<kiln::cpu::PackedLinear> w;
  int64_t m, n, k;
  CachedLinear(int64_t m_, int64_t n_, int64_t k_) : m(m_), n(n_), k(k_) {
    w = kiln::cpu::PackedLinear::pack(kiln::bench::filled({n, k}, DType::f32), DType::bf16);
    x = kiln::bench::filled({m, k}, DType::bf16);
    y = Tensor::empty({m, n}, DType::bf16);
  }
};

struct CoreRates {
  double slower, sum;
};

// Each of the two threads runs `calls` linears on its own copy (inside the parallel region a
// linear runs on its calling thread) and times itself.
CoreRates per_core(std::vector<CachedLinear>& copies, int calls) {
  double rate[2] = {0, 0};
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    CachedLinear& c = copies[size_t(t)];
    kiln::cpu::linear(c.x, *c.w, c.y);  // into the caches
    const double t0 = kiln::bench::now_s();
    for (int i = 0; i < calls; ++i) kiln::cpu::linear(c.x, *c.w, c.y);
    rate[t] = 2.0 * double(c.m * c.n * c.k) * calls / (kiln::bench::now_s() - t0) / 1e9;
  }
  return {std::min(rate[0], rate[1]), rate[0] + rate[1]};
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= double(a.size()), mb /= double(b.size());
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no MODEL_DIR");
  const std::string dir = argv[1];
  int64_t P = 128;
  int rounds = 30;
  double flops_per_token = 0.875e9;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage("no value after " + arg);
    const char* v = argv[++i];
    if (arg == "--prompt-tokens") P = std::atoll(v);
    else if (arg == "--rounds") rounds = std::atoi(v);
    else if (arg == "--flops-per-token") flops_per_token = std::atof(v);
    else usage("unknown argument " + arg);
  }
  if (P < 1 || rounds < 2 || flops_per_token <= 0) usage("counts must be positive (rounds >= 2)");
  if (kiln::num_threads() != 2) usage("run with OMP_NUM_THREADS=2: the probes are per core of two");

  auto model = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = DType::bf16});
  const int64_t L = P + 8;
  const auto [ids, pos, mask] = kiln::bench::fixed_prompt(P, L);
  auto cache = model->make_cache(1, L);
  model->forward("prefill", ids, pos, mask, cache, 0);  // compiles

  std::vector<CachedLinear> in_l1, in_l2;
  for (int t = 0; t < 2; ++t) {
    in_l1.emplace_back(48, 64, 128);
    in_l2.emplace_back(128, 128, 1024);
  }
  constexpr const char* names[] = {"chase4M",   "chase256K", "l1_slower",
                                   "l1_sum",    "l2_slower", "l2_sum",
                                   "peak",      "prefill_ms", "prefill_gflops"};
  constexpr int kColumns = int(std::size(names));
  std::vector<std::vector<double>> col(kColumns);
  for (const char* name : names) std::printf("%s ", name);
  std::printf("\n");
  for (int r = 0; r < rounds; ++r) {
    const double chase4m = kiln::cpu::measure_load_latency(size_t(4) << 20, false);
    const double chase256k = kiln::cpu::measure_load_latency(size_t(256) << 10, false);
    const CoreRates l1 = per_core(in_l1, 20000);
    const CoreRates l2 = per_core(in_l2, 300);
    const double peak = kiln::cpu::measure_arithmetic_peak(DType::bf16) / 1e9;
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      const double t0 = kiln::bench::now_s();
      model->forward("prefill", ids, pos, mask, cache, 0);
      t.push_back(kiln::bench::now_s() - t0);
    }
    const double prefill_s = kiln::bench::median(t);
    const double row[kColumns] = {chase4m,  chase256k, l1.slower,      l1.sum,
                                  l2.slower, l2.sum,   peak,           prefill_s * 1e3,
                                  flops_per_token * double(P) / prefill_s / 1e9};
    for (int c = 0; c < kColumns; ++c) col[size_t(c)].push_back(row[c]);
    std::printf("%7.1f %9.2f %9.0f %6.0f %9.0f %6.0f %4.0f %10.2f %14.1f\n", row[0], row[1],
                row[2], row[3], row[4], row[5], row[6], row[7], row[8]);
    std::fflush(stdout);
  }
  std::printf("correlation with the prefill's GFLOP/s over %d rounds:\n", rounds);
  for (int c = 0; c < kColumns - 2; ++c)
    std::printf("  %-10s %+.2f\n", names[c], correlation(col[size_t(c)], col[kColumns - 1]));
  // The rounds in thirds by the prefill's fraction of the peak: each column's median per third.
  std::vector<int> order(static_cast<size_t>(rounds));
  for (int r = 0; r < rounds; ++r) order[size_t(r)] = r;
  auto fraction = [&](int r) { return col[kColumns - 1][size_t(r)] / col[6][size_t(r)]; };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return fraction(a) < fraction(b); });
  std::printf("medians by thirds of the rounds, slowest prefill (fraction of the peak) first:\n");
  for (int third = 0; third < 3; ++third) {
    const size_t begin = size_t(rounds) * size_t(third) / 3;
    const size_t end = size_t(rounds) * size_t(third + 1) / 3;
    std::vector<double> f;
    for (size_t i = begin; i < end; ++i) f.push_back(fraction(order[i]));
    std::printf("  fraction %.3f:", kiln::bench::median(f));
    for (int c = 0; c < kColumns; ++c) {
      std::vector<double> v;
      for (size_t i = begin; i < end; ++i) v.push_back(col[size_t(c)][size_t(order[i])]);
      std::printf(" %s %.1f", names[c], kiln::bench::median(v));
    }
    std::printf("\n");
  }
  return 0;
}
