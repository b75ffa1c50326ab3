// Attention timings at Qwen3-0.6B's shapes (16 q heads, 8 kv heads, head_dim 128, bf16 cache).
//   decode:  B rows x 1 new token against a full cache of L slots; reported as GB/s of K+V read
//            (the decode roofline is the memory bandwidth, ~60 GB/s with 2 threads here).
//   prefill: B x T tokens, causal, L = T; reported as GFLOP/s of the visible (causal) work,
//            4 * D FLOPs per (query, visible key, head).
// Run: build-*/bench/bench_attention --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include <omp.h>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/tensor.h"
#include "kiln/core/threads.h"

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

// Decode as a model runs it: 28 layers' caches in one allocation (huge pages, as
// CausalLM::make_cache lays them out), called in turn on a spinning team, with a read of one
// layer's weight bytes (30 MB, untimed) between calls, so every call finds its K and V in memory
// and the other ops' data in the caches. Only the attention calls are timed; "us/layer" is one
// call, "read_us/layer" a plain read of as many bytes just as cold, "of_read" the ratio: the
// fraction of the decode roofline the attention reaches.
void BM_AttentionDecodeLayers(benchmark::State& state) {
  constexpr int64_t kLayers = 28;
  constexpr size_t kLayerWeightFloats = size_t(30) << 18;  // 30 MB
  const int64_t b = state.range(0), l = state.range(1);
  kiln::Tensor q = filled({b, 1, kHq, kD}, kiln::DType::f32, 2.f);
  kiln::Tensor block = kiln::Tensor::empty({2 * kLayers * b, l, kHkv, kD}, kiln::DType::bf16);
  {
    const kiln::Tensor one = filled({2 * b, l, kHkv, kD}, kiln::DType::bf16, 2.f);
    for (int64_t i = 0; i < kLayers; ++i)
      std::memcpy(block.slice0(2 * i * b, 2 * (i + 1) * b).raw(), one.raw(), one.nbytes());
  }
  kiln::Tensor mask = kiln::Tensor::from_vector(std::vector<int32_t>(size_t(b * l), 1), {b, l});
  kiln::Tensor out = kiln::Tensor::empty({b, 1, kHq, kD}, kiln::DType::bf16);
  kiln::Tensor weights = kiln::Tensor::zeros({int64_t(kLayerWeightFloats)}, kiln::DType::f32);
  const float* w = weights.data<float>();
  auto evict = [&] {
    kiln::parallel_for(int64_t(kLayerWeightFloats / 16), [&](int64_t i0, int64_t i1) {
      float sum = 0;
      for (int64_t j = i0; j < i1; ++j) sum += w[size_t(j) * 16];
      benchmark::DoNotOptimize(sum);
    });
  };
  double timed = 0, read_timed = 0;
  for (auto _ : state) {
    double step = 0;
    // On a spinning team, as the model's decode steps run (cpu_backend.cpp, run_graph).
    kiln::run_with_spinning_team([&] {
      for (int64_t i = 0; i < kLayers; ++i) {
        // The yardstick: a plain read of as many K and V bytes by the same threads, just as cold
        // (another layer's, last touched half a step ago: a 30 MB read leaves part of a layer's
        // 2-8 MB in a 32 MB L3, so rereading this layer's would be warmer than the model's).
        const int64_t other = (i + kLayers / 2) % kLayers;
        const kiln::Tensor kv = block.slice0(2 * other * b, (2 * other + 2) * b);
        evict();
        const uint64_t* words = static_cast<const uint64_t*>(kv.raw());
        const double r0 = kiln::bench::now_s();
        kiln::parallel_for(int64_t(kv.nbytes() / 64), [&](int64_t i0, int64_t i1) {
          uint64_t sum = 0;
          for (int64_t j = i0 * 8; j < i1 * 8; ++j) sum += words[j];
          benchmark::DoNotOptimize(sum);
        });
        read_timed += kiln::bench::now_s() - r0;
        evict();
        const kiln::Tensor k = block.slice0(2 * i * b, (2 * i + 1) * b);
        const kiln::Tensor v = block.slice0((2 * i + 1) * b, (2 * i + 2) * b);
        const double t0 = kiln::bench::now_s();
        kiln::cpu::attention(q, k, v, mask, l - 1, out);
        step += kiln::bench::now_s() - t0;
        benchmark::DoNotOptimize(out.raw());
      }
    });
    state.SetIterationTime(step);
    timed += step;
  }
  const double bytes = double(2 * kLayers * b * l * kHkv * kD * 2);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["us/layer"] = timed * 1e6 / double(state.iterations() * kLayers);
  state.counters["read_us/layer"] = read_timed * 1e6 / double(state.iterations() * kLayers);
  state.counters["of_read"] = read_timed / timed;  // attention's speed as a fraction of the read's
}
BENCHMARK(BM_AttentionDecodeLayers)
    ->ArgNames({"B", "L"})
    ->Args({1, 192})
    ->Args({1, 512})
    ->Args({1, 2048})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t b = state.range(0), t = state.range(1);
  kiln::Tensor q = filled({b, t, kHq, kD}, kiln::DType::f32, 2.f);
  kiln::Tensor k = filled({b, t, kHkv, kD}, kiln::DType::bf16, 2.f);
  kiln::Tensor v = filled({b, t, kHkv, kD}, kiln::DType::bf16, 1.f);
  kiln::Tensor mask = kiln::Tensor::from_vector(std::vector<int32_t>(size_t(b * t), 1), {b, t});
  kiln::Tensor out = kiln::Tensor::empty({b, t, kHq, kD}, kiln::DType::bf16);
  // cold: q, K and V come from memory (in a model, from the qkv projection's output, which the
  // weight stream of the GEMMs may have pushed out of the caches).
  kiln::bench::CacheFlush flush(state.range(2) != 0);
  for (auto _ : state) {
    flush(state);
    kiln::cpu::attention(q, k, v, mask, 0, out);
    benchmark::DoNotOptimize(out.raw());
  }
  const double flops = 4.0 * double(kD) * double(kHq) * double(b) * double(t) * double(t + 1) / 2;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgNames({"B", "T", "cold"})
    ->Args({1, 128, 0})
    ->Args({1, 128, 1})
    ->Args({1, 256, 0})
    ->Args({1, 512, 0})
    ->Args({1, 512, 1})
    ->Args({4, 512, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One prefill attention item's two products on one thread, from cache, as the item runs them
// (detail::gemm_bf16_packed on panels packed once): the scores S [M, keys] = Q [M, D] x K^T
// ("scores": k = D = 128, short) and O [M, D] = P [M, keys] x V ("pv"). M = 32 rows is a block of
// 16 queries x 2 q heads per kv head. In GFLOP/s: compare one core's vdpbf16ps peak, half the
// machine peak `kiln bench` prints.
void BM_AttentionItemProducts(benchmark::State& state) {
  const bool scores = state.range(0) == 0;
  const int64_t m = 32, keys = state.range(1);
  const int64_t k = scores ? kD : keys, n = scores ? keys : kD;
  if (!kiln::cpu::detail::avx512_bf16_kernels()) {
    state.SkipWithError("this build has no AVX512_BF16 kernels");
    return;
  }
  kiln::Tensor a = kiln::bench::random_bf16(m, k, 1), b = kiln::bench::random_bf16(k, n, 2);
  const int64_t panel_values = (n + 63) / 64 * ((k + 1) / 2) * 128;  // 64-byte aligned storage
  kiln::Tensor panels = kiln::Tensor::empty({panel_values}, kiln::DType::bf16);
  auto* bp = panels.data<uint16_t>();
  kiln::cpu::detail::pack_b_panels(b.data<uint16_t>(), n, false, k, n, bp);
  std::vector<float> c(size_t(m * n));
  // One thread, as inside an item: at 512 keys M x N x K reaches the GEMM's threshold for
  // splitting a call over the threads (2^21), which an item's nested call never does.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (auto _ : state) {
    kiln::cpu::detail::gemm_bf16_packed(a.data<uint16_t>(), m, k, bp, n, c.data(), false, nullptr);
    benchmark::DoNotOptimize(c.data());
  }
  omp_set_num_threads(threads);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionItemProducts)
    ->ArgNames({"pv", "keys"})
    ->Args({0, 128})
    ->Args({0, 512})
    ->Args({1, 128})
    ->Args({1, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
