// A/B of a change to the code inside one process, prefill by prefill. On this VM whole binaries
// alternated (bench/ab_kiln_bench.sh) spread over +-5-10 % from run to run, which hides the 1-2 %
// that most prefill changes are worth; prefills alternated in one process meet the same phases.
//
// The library file under test defines the switch for the measurement, and branches on it:
//     extern "C" { int kiln_ab_variant = 0; }   // outside any namespace; never committed
//     ... if (kiln_ab_variant == 1) { the change } else { the code as it is } ...
// This tool sets it to each of 0 .. V-1 once a round, in an order shuffled per round, and prints
// each variant's median prefill time, the median and quartiles of its time over variant 0's in the
// same round, and whether its first 64 logits equal variant 0's bit for bit. Without the switch in
// the library every variant runs the same code, which measures the noise floor. (Until the
// forty-second session each round started one variant later, so with three variants variant 2
// always ran right after variant 1: a run with no switch read 0.997 for variant 1 and 1.002 for
// variant 2, and controls beside real changes 1.006-1.009. Shuffled, a run with no switch read
// 0.9995 and 0.9990 over 200 rounds.)
//
// Run: OMP_NUM_THREADS=2 build/bench/bench_prefill_ab MODEL_DIR [--prompt-tokens P] [--rounds R]
//        [--variants V]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "kiln/models/causal_lm.h"

extern "C" __attribute__((weak)) int kiln_ab_variant;

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_prefill_ab: %s\nusage: bench_prefill_ab MODEL_DIR [--prompt-tokens P] "
               "[--rounds R] [--variants V]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no MODEL_DIR");
  const std::string dir = argv[1];
  int64_t P = 128;
  int rounds = 40, variants = 2;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage("no value after " + arg);
    const char* v = argv[++i];
    if (arg == "--prompt-tokens") P = std::atoll(v);
    else if (arg == "--rounds") rounds = std::atoi(v);
    else if (arg == "--variants") variants = std::atoi(v);
    else usage("unknown argument " + arg);
  }
  if (P < 1 || rounds < 1 || variants < 1) usage("counts must be positive");
  int* const variant = &kiln_ab_variant;
  if (!variant)
    std::printf("no kiln_ab_variant in the library: every variant runs the same code\n");

  auto model = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = kiln::DType::bf16});
  const int64_t L = P + 8;
  const auto [ids, pos, mask] = kiln::bench::fixed_prompt(P, L);
  auto cache = model->make_cache(1, L);

  std::vector<std::vector<float>> first_logits(static_cast<size_t>(variants));
  const kiln::bench::AbTimes r =
      kiln::bench::ab_rounds(variants, rounds, variant, [&](int v, bool first) {
        const double t0 = kiln::bench::now_s();
        kiln::Tensor logits = model->forward("prefill", ids, pos, mask, cache, 0);
        const double t = kiln::bench::now_s() - t0;
        if (first) first_logits[size_t(v)].assign(logits.data<float>(), logits.data<float>() + 64);
        return t;
      });
  std::vector<bool> same;
  for (const auto& l : first_logits) same.push_back(l == first_logits[0]);
  kiln::bench::print_ab(r, 1e3, "ms", "logits", same);
  return 0;
}
