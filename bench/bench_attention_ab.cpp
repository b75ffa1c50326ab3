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
// --cold reads 64 MiB (split over the threads) before each call, so K and V come from memory (in
// a model they were written by the qkv projection just before: warm for a prefill, cold for a
// decode step).
#include <cstdio>
#include <cstdlib>
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
  using kiln::bench::filled;
  const Tensor k = filled({1, L, kHkv, kD}, DType::bf16, 4.f);
  const Tensor v = filled({1, L, kHkv, kD}, DType::bf16, 2.f);
  const Tensor mask = Tensor::from_vector(std::vector<int32_t>(size_t(L), 1), {1, L});
  const bool grouped = kiln::cpu::attention_takes_grouped_q(T, kHq, kHkv, kD, DType::bf16);
  const Tensor q = grouped ? filled({1, kHkv, T, kG, kD}, DType::bf16, 0.5f)
                           : filled({1, T, kHq, kD}, DType::f32, 4.f);
  Tensor out = Tensor::empty({1, T, kHq, kD}, DType::bf16);
  kiln::bench::CacheFlush flush(cold);
  std::printf("attention: T = %lld queries over L = %lld slots, q %s, %s\n", (long long)T,
              (long long)L, grouped ? "grouped bf16" : "f32", cold ? "cold" : "warm");

  std::vector<std::vector<uint16_t>> first_out(static_cast<size_t>(variants));
  kiln::bench::AbTimes r;
  kiln::run_with_spinning_team([&] {
    r = kiln::bench::ab_rounds(variants, rounds, variant, [&](int var, bool first) {
      flush.read();
      const double t0 = kiln::bench::now_s();
      kiln::cpu::attention(q, k, v, mask, L - T, out);
      const double t = kiln::bench::now_s() - t0;
      if (first) {
        const auto* o = static_cast<const uint16_t*>(out.raw());
        first_out[size_t(var)].assign(o, o + out.numel());
      }
      return t;
    });
  });
  std::vector<bool> same;
  for (const auto& o : first_out) same.push_back(o == first_out[0]);
  kiln::bench::print_ab(r, 1e6, "us", "outputs", same);
  return 0;
}
