// Helpers shared by the kernel micro-benchmarks (header only).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"
#include "kiln/core/threads.h"

namespace kiln::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A [rows, cols] bf16 tensor of small deterministic pseudo-random values (|x| < 1/8).
inline Tensor random_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::bf16);
  auto* p = t.data<uint16_t>();
  uint32_t s = seed;
  for (int64_t i = 0; i < rows * cols; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = f32_to_bf16(float(int32_t(s >> 8) - (1 << 23)) / float(1 << 26));
  }
  return t;
}

// A tensor of deterministic pseudo-random values in [-scale / 2, scale / 2), in f32 or rounded to
// dtype.
inline Tensor filled(const Shape& shape, DType dtype, float scale = 1.f) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  uint32_t s = 12345;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (float(s >> 8) / float(1u << 24) - 0.5f);
  }
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::f32 ? t : t.to(dtype);
}

// For the benchmarks' cold rows: when `cold`, each call reads 64 MB (untimed) on every thread, so no
// core's caches hold the op's tensors, as in a model after a step's weight stream. Both threads
// read: a flush on the main thread alone let the other fall asleep, and waking it (~25 us) was
// then reported as the cold cache's cost.
class CacheFlush {
 public:
  explicit CacheFlush(bool cold) : data_(cold ? size_t(16) << 20 : 0, 1.f) {}
  void operator()(benchmark::State& state) {
    if (data_.empty()) return;
    state.PauseTiming();
    read();
    state.ResumeTiming();
  }
  // The read alone, for tools that time by hand (nothing when not cold).
  void read() {
    parallel_for(int64_t(data_.size() / 16), [&](int64_t i0, int64_t i1) {
      float sum = 0;
      for (int64_t i = i0; i < i1; ++i) sum += data_[size_t(i) * 16];
      benchmark::DoNotOptimize(sum);
    });
  }

 private:
  std::vector<float> data_;
};

// The middle value of v (the upper of the two middle ones for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A batch-1 prompt of P fixed ids (spread over the vocabulary's first 30,000), its positions
// 0 .. P - 1, and the kv mask of a cache of `slots` slots with the prompt's P visible: what the
// A/B tools (bench_decode_ab, bench_prefill_ab) and bench_phases prefill.
struct FixedPrompt {
  Tensor ids, pos, mask;
};
inline FixedPrompt fixed_prompt(int64_t P, int64_t slots) {
  FixedPrompt p{Tensor::empty({1, P}, DType::i32), Tensor::empty({1, P}, DType::i32),
                Tensor::zeros({1, slots}, DType::i32)};
  for (int64_t i = 0; i < P; ++i) {
    p.ids.data<int32_t>()[i] = int32_t(1 + i * 7919 % 30000);
    p.pos.data<int32_t>()[i] = int32_t(i);
    p.mask.data<int32_t>()[i] = 1;
  }
  return p;
}

// The value a fraction q of the way through v's sorted values (the nearest one): the quartiles of
// the A/B tools.
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1) + 0.5)];
}

// The in-process A/B tools' rounds (bench_prefill_ab, bench_attention_ab). The library file under
// test defines `extern "C" int kiln_ab_variant` and branches on it; `variant_switch` is its
// address, or null where the library has none (every variant then runs the same code: the noise
// floor). Round 0 is untimed (compiles, packs, faults in); then each of `rounds` rounds runs every
// variant once, in an order shuffled per round: a rotation had biased three-variant ratios by up
// to ~1 % (docs/benchmarks.md, forty-second session). run(v, first) runs variant v once, first
// in round 0, and returns its seconds.
struct AbTimes {
  std::vector<std::vector<double>> times, ratios;  // [variant][round]; ratio: over variant 0's
};
template <typename Run>
AbTimes ab_rounds(int variants, int rounds, int* variant_switch, Run&& run) {
  const size_t V = size_t(variants);
  AbTimes r{std::vector<std::vector<double>>(V), std::vector<std::vector<double>>(V)};
  std::mt19937 rng(1);
  std::vector<size_t> order(V);
  for (int round = 0; round <= rounds; ++round) {
    std::vector<double> t(V);
    for (size_t j = 0; j < V; ++j) order[j] = j;
    std::shuffle(order.begin(), order.end(), rng);
    for (const size_t v : order) {
      if (variant_switch) *variant_switch = int(v);
      t[v] = run(int(v), round == 0);
    }
    if (round == 0) continue;
    for (size_t v = 0; v < V; ++v) {
      r.times[v].push_back(t[v]);
      r.ratios[v].push_back(t[v] / t[0]);
    }
  }
  if (variant_switch) *variant_switch = 0;
  return r;
}
// One line per variant: its median time (seconds x `scale`, in `unit`), the median and quartiles
// of its time over variant 0's in the same round, and whether its `output` equals variant 0's.
inline void print_ab(const AbTimes& r, double scale, const char* unit, const char* output,
                     const std::vector<bool>& same_output) {
  for (size_t v = 0; v < r.times.size(); ++v)
    std::printf("variant %zu: median %.2f %s; / variant 0: median %.4f (quartiles %.4f, %.4f); "
                "%s %s\n",
                v, scale * quantile(r.times[v], 0.5), unit, quantile(r.ratios[v], 0.5),
                quantile(r.ratios[v], 0.25), quantile(r.ratios[v], 0.75), output,
                same_output[v] ? "the same" : "DIFFER");
}

// The arguments of the streaming-read benchmarks (bench_read_split, bench_read_loops).
struct ReadArgs {
  double gb = 1.25;  // buffer size
  int rounds = 6;    // lines printed
  int passes = 6;    // passes of each variant a round
};
// Parses --gb, --rounds and --passes into args; false, with a message, on anything else.
inline bool parse_read_args(int argc, char** argv, ReadArgs& args) {
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--gb") args.gb = std::atof(argv[i + 1]);
    else if (i + 1 < argc && a == "--rounds") args.rounds = std::atoi(argv[i + 1]);
    else if (i + 1 < argc && a == "--passes") args.passes = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown argument %s (known: --gb G, --rounds R, --passes P)\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace kiln::bench
