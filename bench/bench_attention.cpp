// Attention timings at Qwen3-0.6B's shapes (16 q heads, 8 kv heads, head_dim 128, bf16 cache).
//   decode:  B rows x 1 new token against a full cache of L slots; reported as GB/s of K+V read
//            (the decode roofline is the memory bandwidth, ~60 GB/s with 2 threads here).
//   prefill: B x T tokens, causal, L = T; reported as GFLOP/s of the visible (causal) work,
//            4 * D FLOPs per (query, visible key, head).
// Run: build-*/bench/bench_attention --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/tensor.h"

namespace {

constexpr int64_t kHq = 16, kHkv = 8, kD = 128;

using kiln::bench::filled;

void BM_AttentionDecode(benchmark::State& state) {
  const int64_t b = state.range(0), l = state.range(1);
  kiln::Tensor q = filled({b, 1, kHq, kD}, kiln::DType::f32, 2.f);
  kiln::Tensor k = filled({b, l, kHkv, kD}, kiln::DType::bf16, 2.f);
  kiln::Tensor v = filled({b, l, kHkv, kD}, kiln::DType::bf16, 1.f);
  kiln::Tensor mask = kiln::Tensor::from_vector(std::vector<int32_t>(size_t(b * l), 1), {b, l});
  kiln::Tensor out = kiln::Tensor::empty({b, 1, kHq, kD}, kiln::DType::bf16);
  // cold: K and V come from memory, as after a decode step's weight stream (bench_common.h).
  kiln::bench::CacheFlush flush(state.range(2) != 0);
  for (auto _ : state) {
    flush(state);
    kiln::cpu::attention(q, k, v, mask, l - 1, out);
    benchmark::DoNotOptimize(out.raw());
  }
  const double bytes = double(k.nbytes() + v.nbytes());
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgNames({"B", "L", "cold"})
    ->Args({1, 160, 0})
    ->Args({1, 160, 1})
    ->Args({1, 512, 0})
    ->Args({1, 512, 1})
    ->Args({1, 1024, 0})
    ->Args({1, 2048, 0})
    ->Args({1, 2048, 1})
    ->Args({1, 4096, 0})
    ->Args({4, 1024, 0})
    ->Args({8, 4096, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t b = state.range(0), t = state.range(1);
  kiln::Tensor q = filled({b, t, kHq, kD}, kiln::DType::f32, 2.f);
  kiln::Tensor k = filled({b, t, kHkv, kD}, kiln::DType::bf16, 2.f);
  kiln::Tensor v = filled({b, t, kHkv, kD}, kiln::DType::bf16, 1.f);
  kiln::Tensor mask = kiln::Tensor::from_vector(std::vector<int32_t>(size_t(b * t), 1), {b, t});
  kiln::Tensor out = kiln::Tensor::empty({b, t, kHq, kD}, kiln::DType::bf16);
  for (auto _ : state) {
    kiln::cpu::attention(q, k, v, mask, 0, out);
    benchmark::DoNotOptimize(out.raw());
  }
  const double flops = 4.0 * double(kD) * double(kHq) * double(b) * double(t) * double(t + 1) / 2;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgNames({"B", "T"})
    ->Args({1, 128})
    ->Args({1, 256})
    ->Args({1, 512})
    ->Args({4, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
