// A/B of a change to the attention kernel, call by call in one process: bench_prefill_ab's method
// for the one op. The attention is 4-13 % of a prefill, so a change worth a few percent of it is
// lost in a whole prefill's noise, and bench_attention's rows, run seconds to minutes apart, met
// different phases of this VM: in the forty-third session they showed a softmax change 23 % and
// 9 % faster at T = 128 and 512 that this tool measured 1-2 % slower.
//
// The library file under test defines the switch and branches on it, as for bench_prefill_ab:
//     extern "C" { int kiln_ab_variant = 0; }   // outside any namespace; never committed
// Each round runs every variant once, in an order shuffled per round, on the spinning team the
// model's graphs run on; the tool prints each variant's median time, the median and quartiles of
// its time over variant 0's in the same round, and whether its output equals variant 0's bit for
// bit. Shapes are Qwen3-0.6B's (16 q heads, 8 kv heads, D = 128, bf16 cache and output); the
// T queries sit at the end of L visible slots (a prefill: L = T; a decode step: T = 1). q is
// given as the qkv epilogue gives it where the kernel takes that form (kernels.h).
//
// Run: OMP_NUM_THREADS=2 build/bench/bench_attention_ab [--tokens T] [--slots L] [--rounds R]
//        [--variants V] [--cold]
// --cold reads 64 MiB on every thread before each call, so K and V come from memory (in a model
// they were written by the qkv projection just before: warm for a prefill, cold for a decode step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/tensor.h"
#include "kiln/core/threads.h"

extern "C" __attribute__((weak)) int kiln_ab_variant;

namespace {

constexpr int64_t kHq = 16, kHkv = 8, kD = 128, kG = kHq / kHkv;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_attention_ab: %s\nusage: bench_attention_ab [--tokens T] [--slots L] "
               "[--rounds R] [--variants V] [--cold]\n",
               why.c_str());
  std::exit(2);
}

kiln::Tensor random_bf16(const kiln::Shape& shape, uint32_t seed) {
  kiln::Tensor t = kiln::Tensor::empty(shape, kiln::DType::bf16);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<kiln::bf16_t>()[i] = kiln::f32_to_bf16(u(rng));
  return t;
}

// Reads `bytes` on every thread of the team (each its own buffer), evicting K and V.
struct Evictor {
  std::vector<std::vector<char>> buffers;
  explicit Evictor(size_t bytes)
      : buffers(size_t(kiln::num_threads()), std::vector<char>(bytes, 1)) {}
  void operator()() {
    kiln::parallel_for(int64_t(buffers.size()), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const std::vector<char>& b = buffers[size_t(t)];
        uint64_t sink = 0;
        for (size_t o = 0; o < b.size(); o += 64) sink += uint64_t(b[o]);
        asm volatile("" : : "r"(sink));
      }
    });
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 128, L = -1;
  int rounds = 300, variants = 2;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cold") {
      cold = true;
      continue;
    }
    if (i + 1 >= argc) usage("no value after " + arg);
    const char* v = argv[++i];
    if (arg == "--tokens") T = std::atoll(v);
    else if (arg == "--slots") L = std::atoll(v);
    else if (arg == "--rounds") rounds = std::atoi(v);
    else if (arg == "--variants") variants = std::atoi(v);
    else usage("unknown argument " + arg);
  }
  if (L < 0) L = T;
  if (T < 1 || L < T || rounds < 1 || variants < 1) usage("need 1 <= T <= L and positive counts");
  int* const variant = &kiln_ab_variant;
  if (!variant)
    std::printf("no kiln_ab_variant in the library: every variant runs the same code\n");

  using kiln::DType;
  using kiln::Tensor;
  const Tensor k = random_bf16({1, L, kHkv, kD}, 2), v = random_bf16({1, L, kHkv, kD}, 3);
  const Tensor mask = Tensor::from_vector(std::vector<int32_t>(size_t(L), 1), {1, L});
  const bool grouped = kiln::cpu::attention_takes_grouped_q(T, kHq, kHkv, kD, DType::bf16);
  const Tensor q = grouped ? random_bf16({1, kHkv, T, kG, kD}, 1) : [&] {
    Tensor f = Tensor::empty({1, T, kHq, kD}, DType::f32);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = u(rng);
    return f;
  }();
  Tensor out = Tensor::empty({1, T, kHq, kD}, DType::bf16);
  Evictor evict(cold ? size_t(64) << 20 : 0);
  std::printf("attention: T = %lld queries over L = %lld slots, q %s, %s\n", (long long)T,
              (long long)L, grouped ? "grouped bf16" : "f32", cold ? "cold" : "warm");

  const size_t V = size_t(variants);
  std::vector<std::vector<double>> times(V), ratios(V);
  std::vector<std::vector<uint16_t>> first_out(V);
  std::mt19937 rng(1);
  std::vector<size_t> order(V);
  kiln::run_with_spinning_team([&] {
    for (int round = 0; round <= rounds; ++round) {  // round 0 warms up and keeps the outputs
      std::vector<double> t(V);
      for (size_t j = 0; j < V; ++j) order[j] = j;
      std::shuffle(order.begin(), order.end(), rng);
      for (const size_t var : order) {
        if (variant) *variant = int(var);
        if (cold) evict();
        const auto t0 = std::chrono::steady_clock::now();
        kiln::cpu::attention(q, k, v, mask, L - T, out);
        t[var] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (round == 0) {
          const auto* o = static_cast<const uint16_t*>(out.raw());
          first_out[var].assign(o, o + out.numel());
        }
      }
      if (round == 0) continue;
      for (size_t var = 0; var < V; ++var) {
        times[var].push_back(t[var]);
        ratios[var].push_back(t[var] / t[0]);
      }
    }
  });
  if (variant) *variant = 0;
  using kiln::bench::quantile;
  for (size_t var = 0; var < V; ++var)
    std::printf("variant %zu: median %.1f us; / variant 0: median %.4f (quartiles %.4f, %.4f); "
                "output %s\n",
                var, 1e6 * quantile(times[var], 0.5), quantile(ratios[var], 0.5),
                quantile(ratios[var], 0.25), quantile(ratios[var], 0.75),
                first_out[var] == first_out[0] ? "the same" : "DIFFERS");
  return 0;
}
