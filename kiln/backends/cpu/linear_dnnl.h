// Internal to the CPU backend: the oneDNN plumbing shared by linear.cpp, gemm.cpp and roofline.cpp,
// and the bf16 GEMV that reads oneDNN's blocked weight layout (see docs/notes/cpu-gemm.md).
//
// Threading: oneDNN (Debian's build) uses the OpenMP runtime, so it runs on kiln's one pool. Every
// primitive is created once per shape and cached (MatmulCache); executing a cached primitive from
// several threads at once is safe because each call passes its own scratchpad (user mode).
//
// Example:
//   auto& pd = detail::matmul_cache().get(key, [&] { return make_pd(...); });
//   detail::run_matmul(pd, {{DNNL_ARG_SRC, src}, ...});
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kiln/backends/cpu/rope.h"
#include "kiln/core/dtype.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::cpu::detail {

dnnl::engine& dnnl_engine();

// A cached matmul: the primitive and its descriptor (to size the scratchpad).
struct CachedMatmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
};

// Thread-safe map from a shape/dtype/epilogue key to a created primitive. Creation happens once per
// key (under the lock, so two threads never build the same primitive twice); lookups afterwards
// cost one hash of a short string.
class MatmulCache {
 public:
  const CachedMatmul& get(const std::string& key,
                          const std::function<dnnl::matmul::primitive_desc()>& make);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<CachedMatmul>> map_;
};
MatmulCache& matmul_cache();

// Executes `m` with `args` (plus a per-thread scratchpad) on a per-thread stream and waits.
void run_matmul(const CachedMatmul& m, std::unordered_map<int, dnnl::memory> args);

// c = a x b (+ beta * c) on oneDNN matmul for operands given as memory descriptors (strides
// express transposes and batches), with the primitive cached under `key`, which must identify the
// descriptors (beta is added to it here). For gemm().
void run_strided_matmul(const std::string& key, const dnnl::memory::desc& a, const void* pa,
                        const dnnl::memory::desc& b, const void* pb, const dnnl::memory::desc& c,
                        void* pc, float beta = 0.f);

// A per-thread growable scratch buffer (64-byte aligned); `slot` separates simultaneous uses.
// Grown buffers are kept, so steady-state calls never allocate.
void* thread_scratch(int slot, size_t bytes);

dnnl::memory::data_type to_dnnl(DType t);

// Memory for large packed weights: 2 MiB aligned and advised for transparent huge pages, because
// first-touching 4 KiB pages is slow on this VM (see shared/MACHINE.md) and huge pages cut TLB
// misses while streaming weights.
struct HugeBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit HugeBuffer(size_t n);
  ~HugeBuffer();
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
};

// The bf16 weight layout: oneDNN's BA16a64b2a for logical weights [K, N]. N is split into blocks of
// 64 columns (outermost); within a block, K is padded to a multiple of 32 and stored as K/2 rows of
// 64 columns x 2 consecutive k (128 bf16 = 256 bytes per k pair). So one 64-column block is one
// contiguous stream of Kp * 64 bf16, exactly what vdpbf16ps wants (16 columns x 2 k per register).
constexpr int64_t kBlockN = 64;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
constexpr int64_t kBlockK = 32;

// Rows up to which the GEMV beats a GEMM on the shared layout (decode batches). Measured with
// `bench_linear` (the linears of a token step, docs/notes/cpu-gemm.md): since the GEMV walks a
// block for up to 8 rows at once (forty-sixth session) it is ahead of kiln's GEMM kernel up to
// M = 16, level at 21 and behind from 24.
constexpr int64_t kGemvMaxM = 16;

// y[m, n] (m < M, n < N) = sum_k x[m, k] * W[n, k] (+ residual[m, n]) on the packed layout above.
//   xb: bf16 [M, Kp] (zero-padded past K); w: packed, Np = round_up(N, 64) columns;
//   y: f32 or bf16 (y_bf16) [M, N] with row stride N; residual: f32 [M, N] or null, may alias y.
// Splits N-blocks over the OpenMP threads. M <= kGemvMaxM.
void gemv_bf16(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N, void* y,
               bool y_bf16, const float* residual);
// How the decode GEMVs (gemv_bf16, and linear_bf16_portable's for one row) help the hardware
// prefetcher, chosen once per process (gemv_bf16.cpp): a prefetch of every line 4 KiB ahead on
// Intel cores, none on AMD's family 19h (Zen 3, Zen 4), one per 4 KiB page 32 KiB ahead
// (kick_page_ahead, simd.h) on the others (Zen 5);
// KILN_GEMV_PREFETCH=line|page|0 overrides. The portable GEMV takes only the page kick.
enum class GemvPrefetch { kNone, kEveryLine, kPageKick };
GemvPrefetch gemv_prefetch();
// c[M, N] = beta * c + op(a) op(b) for bf16 a ([M, K], or [K, M] if trans_a) and b ([K, N], or
// [N, K] if trans_b), contiguous, with f32 accumulation; c is f32, or bf16 (c_bf16) with beta = 0.
// Returns false, doing nothing, where it does not apply (no AVX512_BF16 in this build, K = 0, or a
// bf16 c with beta != 0 or K > 4096): the caller then uses oneDNN. See gemm_bf16.cpp.
bool gemm_bf16(const uint16_t* a, bool trans_a, const uint16_t* b, bool trans_b, int64_t M,
               int64_t N, int64_t K, float beta, void* c, bool c_bf16);
// What kiln's bf16 GEMM (gemm_bf16, gemm_bf16_packed*) multiplies with: vdpbf16ps on the bf16
// pairs, or both sides widened to f32 and f32 FMAs. By default whichever this CPU runs faster
// (f32_fma_outruns_dpbf16, decided at the first call); KILN_BF16_GEMM=dpbf16|fma chooses, and tests
// set it to run both. The two round the sums differently (f32 either way): results agree within
// f32 accumulation error, not bit for bit.
enum class Bf16GemmArithmetic { kDpbf16, kF32Fma };
Bf16GemmArithmetic bf16_gemm_arithmetic();
void set_bf16_gemm_arithmetic(Bf16GemmArithmetic a);

// KILN_GEMM_ONEDNN=1 in the environment sends every GEMM (training and prefill) to oneDNN instead of
// gemm_bf16: the comparison in bench/bench_gemm.cpp and docs/notes/cpu-gemm.md.
bool gemm_onednn_only();

// The longest K of a bf16 C in kiln's bf16 GEMM (written once, so K is one block).
constexpr int64_t kMaxBf16K = 4096;

// The same kernel on weights already packed in the layout above (no packing at all):
// y[M, N] = xb[M, Kp] (bf16, zero past K) x W^T (+ residual, f32 [M, N], may alias an f32 y).
// panel_stride: bf16 elements from one 64-column panel of w to the next (0: Kp * 64, w packed for
// exactly Kp; more when w was packed for a longer K and only its first Kp are used).
// Returns false where it does not apply (no AVX512_BF16, odd Kp, a bf16 y with Kp > kMaxBf16K).
bool gemm_bf16_packed(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N,
                      void* y, bool y_bf16, const float* residual, int64_t panel_stride = 0);

// SwiGLU on the same kernel: w is a gate_up weight packed for Kp ([gate; up], 2 * inter rows) and
// y[M, inter] = SiLU(xb gate^T) * (xb up^T), rounded once where y is bf16: what gemm_bf16_packed
// into an f32 y followed by silu_mul gives, bit for bit for Kp <= 1024 (one k block there). Returns false where it does not apply (no
// AVX512_BF16, odd Kp or Kp > 4096, inter not a multiple of 64).
bool gemm_bf16_packed_swiglu(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w,
                             int64_t inter, void* y, bool y_bf16);

// The attention prologue on the same kernel: w is a fused qkv weight packed for Kp and every head
// of the M x (hq + 2 hkv) d projection goes through e.apply (q/k-norm, RoPE, q and cache stores)
// from the f32 tile: the f32 projection is never stored. Returns false where it does not apply
// (no AVX512_BF16, odd Kp or Kp > 4096, head_dim other than 64, 128 or 256).
bool gemm_bf16_packed_qkv(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w,
                          const QkvEpilogue& e);

// Packs B [kc, nc] (B[k, n] = b[k * ldb + n], or b[n * ldb + k] if trans) as the B panels of
// gemm_bf16_packed: panels of 64 columns, [(kc + 1) / 2 k pairs][64][2] each (panel stride
// (kc + 1) / 2 * 128 elements), zero past kc and nc; `out` 64-byte aligned. In every build (the
// weights' blocked layout is this too, and oneDNN reads it where gemm_bf16 is not compiled).
void pack_b_panels(const uint16_t* b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                   uint16_t* out);

// y[M, N] = xb[M, Kp] x W^T (+ residual) on the packed layout, like gemm_bf16_packed, for any M
// and any CPU: AVX2 + FMA where the CPU has them (and `vector`), plain C++ otherwise. For builds
// without AVX512_BF16, where oneDNN has no bf16 matmul either (linear_bf16_portable.cpp).
void linear_bf16_portable(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t N,
                          void* y, bool y_bf16, const float* residual, bool vector = true);
bool cpu_has_avx2_fma();

// Whether this build has kiln's AVX512_BF16 kernels (gemv_bf16, gemm_bf16, gemm_bf16_packed).
bool avx512_bf16_kernels();
// Whether oneDNN runs bf16 matmuls on this CPU (oneDNN 2.6: AVX-512 and up), probed once.
bool onednn_has_bf16();
// Whether linear() runs bf16 weights on kiln's own kernels for every M (no oneDNN call): where
// this build has the AVX512_BF16 ones, or where oneDNN has no bf16 matmul.
inline bool bf16_linear_on_kiln() { return avx512_bf16_kernels() || !onednn_has_bf16(); }

}  // namespace kiln::cpu::detail
