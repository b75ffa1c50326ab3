// A/B of a decode setting inside one process, step by step: after a prefill, decode steps take
// turns at the two values (A B A B ...), so each pair of steps runs within ~40 ms of itself. On
// this VM the memory bandwidth changes phase every few minutes, and between runs of `kiln bench`,
// which hides effects of a few per cent; alternating whole generations (the twenty-eighth
// session's form of this tool) still left a floor of about +-2 %. Each round's new prefill
// restarts the cache, so steps see every fill from P to P + N.
//
// Run: build/bench/bench_decode_ab MODEL_DIR [--rounds R] [--new-tokens N] [--prompt-tokens P]
//        (--read-ahead-kb A,B | --variant)
// --variant alternates a throwaway switch in the library instead, as bench_prefill_ab does (A:
// kiln_ab_variant = 0, B: 1; see there for the line to add; never committed).
// Prints, per setting, the median step and its quartiles, then the median of the ratios B / A of
// adjacent steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "bench/bench_common.h"
#include "kiln/models/causal_lm.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_decode_ab: %s\nusage: bench_decode_ab MODEL_DIR [--rounds R] "
               "[--new-tokens N] [--prompt-tokens P] (--read-ahead-kb A,B | --variant)\n",
               why.c_str());
  std::exit(2);
}

using kiln::bench::quantile;

}  // namespace

// Defined only by a library carrying a throwaway switch (bench_prefill_ab.cpp).
extern "C" __attribute__((weak)) int kiln_ab_variant;

int main(int argc, char** argv) {
  if (argc < 2) usage("no MODEL_DIR");
  const std::string dir = argv[1];
  int rounds = 4;
  int64_t new_tokens = 128, prompt_tokens = 128;
  long a = -1, b = -1;
  bool variant = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--variant") {
      variant = true;
      continue;
    }
    if (i + 1 >= argc) usage("no value after " + arg);
    const char* v = argv[++i];
    if (arg == "--rounds") rounds = std::atoi(v);
    else if (arg == "--new-tokens") new_tokens = std::atoll(v);
    else if (arg == "--prompt-tokens") prompt_tokens = std::atoll(v);
    else if (arg == "--read-ahead-kb") {
      if (std::sscanf(v, "%ld,%ld", &a, &b) != 2 || a < 0 || b < 0)
        usage("--read-ahead-kb takes A,B (KiB, 0 for none)");
    } else {
      usage("unknown argument " + arg);
    }
  }
  if ((a < 0) == !variant) usage("give one setting to compare: --read-ahead-kb A,B or --variant");
  if (rounds < 1 || new_tokens < 2 || prompt_tokens < 1) usage("counts must be positive");
  int* const library_variant = &kiln_ab_variant;
  if (variant && !library_variant) usage("--variant: no kiln_ab_variant in the library");
  auto set = [&](int which) {
    if (variant)
      *library_variant = which;
    else
      kiln::cpu::set_decode_read_ahead_bytes(int64_t(which ? b : a) << 10);
  };

  auto model = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = kiln::DType::bf16});
  const int64_t P = prompt_tokens, L = P + new_tokens;
  const int64_t V = model->config().vocab_size;
  auto [ids, pos, mask] = kiln::bench::fixed_prompt(P, L);
  kiln::Tensor step_ids = kiln::Tensor::empty({1, 1}, kiln::DType::i32);
  kiln::Tensor step_pos = kiln::Tensor::empty({1, 1}, kiln::DType::i32);
  auto cache = model->make_cache(1, L);
  std::vector<double> times[2], ratios;
  for (int round = 0; round <= rounds; ++round) {  // round 0 compiles, packs and faults in
    for (int64_t s = 0; s < L; ++s) mask.data<int32_t>()[s] = s < P ? 1 : 0;
    kiln::Tensor logits = model->forward("prefill", ids, pos, mask, cache, 0);
    double last[2] = {0, 0};
    for (int64_t step = 0; step < new_tokens; ++step) {
      const float* row = logits.data<float>();
      step_ids.data<int32_t>()[0] = int32_t(std::max_element(row, row + V) - row);
      step_pos.data<int32_t>()[0] = int32_t(P + step);
      mask.data<int32_t>()[P + step] = 1;
      const int which = int((step + round) % 2);  // the order alternates between rounds
      set(which);
      const auto t0 = std::chrono::steady_clock::now();
      logits = model->forward("decode", step_ids, step_pos, mask, cache, P + step);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (round == 0) continue;
      times[which].push_back(t);
      last[which] = t;
      if (step % 2 == 1) ratios.push_back(last[1] / last[0]);
    }
  }
  const long kb[2] = {a, b};
  for (int w = 0; w < 2; ++w) {
    const std::string what = variant ? "variant " + std::to_string(w)
                                     : "read-ahead " + std::to_string(kb[w]) + " KiB";
    std::printf("%c: %s: %zu steps, median %.3f ms (quartiles %.3f, %.3f)\n", 'A' + w,
                what.c_str(), times[w].size(), 1e3 * quantile(times[w], 0.5),
                1e3 * quantile(times[w], 0.25), 1e3 * quantile(times[w], 0.75));
  }
  std::printf("B / A of adjacent steps: median %.4f (quartiles %.4f, %.4f), %zu pairs\n",
              quantile(ratios, 0.5), quantile(ratios, 0.25), quantile(ratios, 0.75),
              ratios.size());
  return 0;
}
