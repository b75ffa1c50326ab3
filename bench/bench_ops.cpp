// The element-wise ops of a prefill and a decode step at Qwen3-0.6B's shapes (hidden 1024, 16 q
// heads, 8 kv heads, head_dim 128, intermediate 3072), bf16 model: RMSNorm (f32 residual in, bf16
// out), the fused q/k-norm + RoPE + cache write, and SwiGLU (f32 gate_up in, bf16 out). Reported
// as GB/s of the bytes each op must read and write at least. Rows with cold:1 stream 64 MB through
// both cores' caches between calls (untimed), as a step's weight stream does between two ops.
// Run: build-*/bench/bench_ops --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <vector>

#include "bench/bench_common.h"
#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/tensor.h"

namespace {

constexpr int64_t kHidden = 1024, kHq = 16, kHkv = 8, kD = 128, kInter = 3072;

using kiln::bench::filled;

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_RMSNorm(benchmark::State& state) {
  const int64_t t = state.range(0);
  kiln::Tensor x = filled({t, kHidden}, kiln::DType::f32);
  kiln::Tensor w = filled({kHidden}, kiln::DType::bf16);
  kiln::Tensor y = kiln::Tensor::empty({t, kHidden}, kiln::DType::bf16);
  kiln::bench::CacheFlush flush(state.range(1) != 0);
  for (auto _ : state) {
    flush(state);
    kiln::cpu::rms_norm(x, w, 1e-6f, y);
    benchmark::DoNotOptimize(y.raw());
  }
  set_bytes(state, double(x.nbytes() + y.nbytes()));
}
BENCHMARK(BM_RMSNorm)->ArgNames({"T", "cold"})->ArgsProduct({{1, 128, 512}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_QKNormRopeCache(benchmark::State& state) {
  const int64_t t = state.range(0), l = t < 32 ? 512 : t;
  kiln::Tensor qkv = filled({t, (kHq + 2 * kHkv) * kD}, kiln::DType::f32);
  kiln::Tensor qn = filled({kD}, kiln::DType::bf16), kn = filled({kD}, kiln::DType::bf16);
  kiln::Tensor cos_sin = filled({l, kD}, kiln::DType::f32);
  kiln::Tensor pos = kiln::Tensor::empty({1, t}, kiln::DType::i32);
  const int64_t offset = t < 32 ? l - t : 0;
  for (int64_t i = 0; i < t; ++i) pos.data<int32_t>()[i] = int32_t(offset + i);
  kiln::Tensor q = kiln::Tensor::empty({1, t, kHq, kD}, kiln::DType::f32);
  kiln::Tensor kc = kiln::Tensor::zeros({1, l, kHkv, kD}, kiln::DType::bf16);
  kiln::Tensor vc = kiln::Tensor::zeros({1, l, kHkv, kD}, kiln::DType::bf16);
  kiln::bench::CacheFlush flush(state.range(1) != 0);
  for (auto _ : state) {
    flush(state);
    kiln::cpu::qk_norm_rope_cache(qkv, qn, kn, 1e-6f, pos, cos_sin, offset, q, kc, vc);
    benchmark::DoNotOptimize(q.raw());
  }
  set_bytes(state, double(qkv.nbytes() + q.nbytes()) + double(2 * t * kHkv * kD * 2));
}
BENCHMARK(BM_QKNormRopeCache)->ArgNames({"T", "cold"})->ArgsProduct({{1, 128, 512}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_SiluMul(benchmark::State& state) {
  const int64_t t = state.range(0);
  // bf16, as a bf16 model's gate_up projection writes it.
  kiln::Tensor gate_up = filled({t, 2 * kInter}, kiln::DType::bf16);
  kiln::Tensor y = kiln::Tensor::empty({t, kInter}, kiln::DType::bf16);
  kiln::bench::CacheFlush flush(state.range(1) != 0);
  for (auto _ : state) {
    flush(state);
    kiln::cpu::silu_mul(gate_up, y);
    benchmark::DoNotOptimize(y.raw());
  }
  set_bytes(state, double(gate_up.nbytes() + y.nbytes()));
}
BENCHMARK(BM_SiluMul)->ArgNames({"T", "cold"})->ArgsProduct({{1, 128, 512}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
