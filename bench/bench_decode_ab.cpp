// A/B of one decode setting inside one process: generations of a few dozen tokens alternate
// between two values, so each pair runs within ~2 s of itself. On this VM the memory bandwidth
// changes phase every few minutes and across runs of `kiln bench`, which hides effects of a few
// per cent; adjacent generations in one process share a phase far more often.
// Run: build/bench/bench_decode_ab MODEL_DIR [--pairs N] [--new-tokens T] [--prompt-tokens P]
//        --read-ahead-kb A,B
// Prints each pair's decode tokens/s and B / A, then the median and the mean of those ratios.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/generation/generate.h"
#include "kiln/models/causal_lm.h"

namespace {

struct Knob {
  std::string name;
  std::function<void(long)> set;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_decode_ab: %s\nusage: bench_decode_ab MODEL_DIR [--pairs N] [--new-tokens T] "
               "[--prompt-tokens P] --read-ahead-kb A,B\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no MODEL_DIR");
  const std::string dir = argv[1];
  int pairs = 10;
  int64_t new_tokens = 32, prompt_tokens = 128;
  Knob knob;
  long a = 0, b = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("no value after " + arg).c_str());
    const char* v = argv[++i];
    if (arg == "--pairs") pairs = std::atoi(v);
    else if (arg == "--new-tokens") new_tokens = std::atoll(v);
    else if (arg == "--prompt-tokens") prompt_tokens = std::atoll(v);
    else if (arg == "--read-ahead-kb") {
      knob = {"read-ahead-kb", [](long kb) { kiln::cpu::set_decode_read_ahead_bytes(size_t(kb) << 10); }};
      if (std::sscanf(v, "%ld,%ld", &a, &b) != 2) usage("--read-ahead-kb takes A,B");
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  if (!knob.set) usage("no setting to compare");
  if (pairs < 1 || new_tokens < 2 || prompt_tokens < 1) usage("counts must be positive");

  auto model = kiln::AutoModelForCausalLM::from_pretrained(dir, {.dtype = kiln::DType::bf16});
  kiln::GenerationConfig cfg;
  cfg.max_new_tokens = new_tokens;
  cfg.eos_token_id.clear();  // every generation runs all its steps
  std::vector<std::vector<int32_t>> prompts(1, std::vector<int32_t>(size_t(prompt_tokens)));
  for (int64_t i = 0; i < prompt_tokens; ++i) prompts[0][size_t(i)] = int32_t(1 + i * 7919 % 30000);
  auto decode_rate = [&](long value) {
    knob.set(value);
    return kiln::generation::generate(*model, prompts, cfg).stats.decode_tokens_per_s();
  };
  decode_rate(a);  // compiles, packs, faults in
  std::vector<double> ratios;
  for (int p = 0; p < pairs; ++p) {
    // The order alternates, so neither value always runs first.
    double ra, rb;
    if (p % 2 == 0) {
      ra = decode_rate(a);
      rb = decode_rate(b);
    } else {
      rb = decode_rate(b);
      ra = decode_rate(a);
    }
    ratios.push_back(rb / ra);
    std::printf("pair %2d: %s=%ld %6.2f tok/s, %s=%ld %6.2f tok/s, B/A %.4f\n", p,
                knob.name.c_str(), a, ra, knob.name.c_str(), b, rb, rb / ra);
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  const double mean = std::accumulate(ratios.begin(), ratios.end(), 0.0) / double(ratios.size());
  std::printf("%s %ld vs %ld: B/A median %.4f, mean %.4f over %d pairs\n", knob.name.c_str(), b, a,
              median, mean, pairs);
}
