// CPU kernels: the contract between the graph executor and the CPU backend.
//
// Every kernel works on contiguous row-major host tensors and runs multi-threaded on kiln's one
// OpenMP pool (kiln/core/threads.h). Shapes are written beside each argument. "act" means an
// activation dtype: f32 or bf16 (arithmetic is always f32; bf16 results are rounded to nearest even).
// Kernels check shapes and dtypes with KILN_CHECK (a mismatch is a kiln bug, not user input).
//
// Each fused kernel has an unfused composition of the simpler kernels below; the eager executor runs
// the unfused ones, tests/ops holds the fused against the unfused within rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// ---------------------------------------------------------------------------------------------------
// Linear layers. Weights are packed once (at compile time) into the layout the GEMM/GEMV prefers.

// A weight matrix W [N, K] (Transformers' nn.Linear layout: out_features x in_features), packed.
// Thread-safe to use from many calls at once once built.
class PackedLinear {
 public:
  // w: f32|bf16 [N, K]. `compute` is the dtype the GEMM multiplies in (bf16 or f32); w is converted
  // if needed. Packing copies: the returned object does not reference `w`.
  // With `release_source` (the packed copy replaces a memory-mapped weight), the source's pages are
  // dropped from memory as packing passes them (Storage::release_pages), so no weight is resident
  // twice, not even the 300 MB lm_head while it is being packed.
  static std::shared_ptr<PackedLinear> pack(const Tensor& w, DType compute,
                                            bool release_source = false);
  // Stacks several weights with equal K along N (fused QKV: [Nq + Nk + Nv, K]).
  static std::shared_ptr<PackedLinear> pack_concat(const std::vector<Tensor>& ws, DType compute,
                                                   bool release_source = false);
  virtual ~PackedLinear() = default;
  virtual int64_t out_features() const = 0;  // N
  virtual int64_t in_features() const = 0;   // K
  virtual DType compute_dtype() const = 0;
  virtual size_t bytes() const = 0;  // packed size, for memory accounting and rooflines
  // Rows ids[i] of W, as the packed copy holds them (exact), into out [n, K] f32. The embedding
  // lookup of a tied table reads them here, so the model keeps one copy of that table.
  virtual void read_rows(const int32_t* ids, int64_t n, float* out) const = 0;
};

// Names w as what the spinning team's next linear reads (read_ahead_for_next_loop): a decode
// GEMV, or a prefill GEMM, whose first panels a call would otherwise fetch from memory at one
// core's pace. The threads that wait before it read the first part of their shares of w, up to
// the bytes set below. Nothing where w does not run on kiln's bf16 kernels.
void read_ahead_for_gemv(const PackedLinear& w);
// The bytes each thread reads ahead (default 1 MiB; 0 turns reading ahead off), process-wide:
// for measuring it (bench/bench_decode_ab.cpp).
void set_decode_read_ahead_bytes(int64_t bytes);

// y [M, N] = x [M, K] @ W^T (+ residual [M, N] if given).
//   x: act (converted to the weight's compute dtype internally if it differs)
//   y: f32 or bf16; residual: f32 and may alias y (in-place residual add).
// Must be fast for M = 1..8 (decode, memory bound: stream W once) and M >= 32 (prefill, FLOP bound).
void linear(const Tensor& x, const PackedLinear& w, Tensor& y, const Tensor* residual = nullptr);
// Whether linear() (and the fused linears below, whose fallbacks write f32) with w and a y of
// dtype y runs on kiln's own kernels for any number of rows: no oneDNN call, so it may run
// inside run_with_spinning_team.
bool linear_avoids_onednn(const PackedLinear& w, DType y);

// y [M, I] = SiLU(x Wg^T) * (x Wu^T) for a gate_up weight W = [Wg; Wu] [2I, K]: linear then
// silu_mul, bit for bit where K is one block of the bf16 GEMM (K <= 1024; beyond, within f32
// rounding), with the SiLU-mul done in the GEMM's store where the bf16 kernel runs (prefill: the
// f32 [M, 2I] gate_up is never written).
void linear_silu_mul(const Tensor& x, const PackedLinear& w, Tensor& y);

// ---------------------------------------------------------------------------------------------------
// Element-wise and normalisation.

// y [N, H] = table [V, H][ids[i]]. ids: i32 [N] (already validated < V); table f32|bf16; y: f32.
void embedding(const Tensor& ids, const Tensor& table, Tensor& y);
// The same lookup in a table that is a linear's whole weight (tied lm_head), from its packed copy.
void embedding_packed(const Tensor& ids, const PackedLinear& table, Tensor& y);

// y [R, H] = x / sqrt(mean(x^2) + eps) * w, computed in f32 (Transformers' Qwen3RMSNorm).
// x: act [R, H]; w: f32|bf16 [H]; y: act [R, H] (may differ from x's dtype; may alias x if equal).
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);

// y = a + b, all [n] elements; a, b, y: f32 (y may alias a or b).
void add(const Tensor& a, const Tensor& b, Tensor& y);

// SwiGLU. y [M, I] = silu(gate) * up, where gate_up [M, 2I] holds gate in columns [0, I) and up in
// [I, 2I) (the fused gate_up projection). gate_up: f32; y: act.
void silu_mul(const Tensor& gate_up, Tensor& y);
// Unfused parts: y = silu(x); y = a * b (f32 in, act out; y may alias).
void silu(const Tensor& x, Tensor& y);
void mul(const Tensor& a, const Tensor& b, Tensor& y);

// ---------------------------------------------------------------------------------------------------
// Rotary embeddings (Transformers' rotate_half convention: pairs (i, i + D/2)).
// cos_sin: f32 [P, D] table where row p holds cos(p * inv_freq[0..D/2)) then sin(...) (D/2 each);
// the model builds it once (it owns rope scaling). positions: i32 [B, T], each < P.
// x: f32 [B, T, n_heads, D] rotated in place.
void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin);

// Fused attention prologue for one layer (Qwen3: q/k-norm then RoPE; Llama/Qwen2: no norm):
//   qkv: f32 [B*T, (Hq + 2*Hkv) * D] = the fused QKV projection (q heads, then k heads, then v heads)
//   q_norm, k_norm: f32|bf16 [D], or undefined Tensor for models without q/k-norm; eps as rms_norm.
//   q_out: f32 [B, T, Hq, D]   (normed, rotated); or, for an attention() that takes it
//          (attention_takes_grouped_q), bf16 [B, Hkv, T, G, D] grouped as that kernel reads it:
//          normed, rotated, scaled by attention_scale(D), rounded once.
//   k_cache, v_cache: act [B, L, Hkv, D]; rows t of the batch are written at cache slot
//   `slot_offset + t` (normed+rotated k; raw v).
// Equals: split qkv; rms_norm per head on q and k; rope on q and k; kv_cache_write.
void qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                        const Tensor& positions, const Tensor& cos_sin, int64_t slot_offset,
                        Tensor& q_out, Tensor& k_cache, Tensor& v_cache);
// The same from x [B*T, K] and the packed qkv weight: linear then qk_norm_rope_cache, bit for bit
// where K is one block of the bf16 GEMM (K <= 1024; beyond, within f32 rounding), with the
// prologue applied to the GEMM's f32 tiles where that kernel runs (prefill: the f32 projection is
// never stored).
void linear_qk_norm_rope_cache(const Tensor& x, const PackedLinear& w, const Tensor& q_norm,
                               const Tensor& k_norm, float eps, const Tensor& positions,
                               const Tensor& cos_sin, int64_t slot_offset, Tensor& q_out,
                               Tensor& k_cache, Tensor& v_cache);
// Unfused part: cache [B, L, Hkv, D] slots [slot_offset, slot_offset + T) = x [B, T, Hkv, D].
// x: f32; cache: act.
void kv_cache_write(const Tensor& x, int64_t slot_offset, Tensor& cache);
// Unfused part: columns [col_begin, col_begin + y.cols) of x [M, C] into y [M, y.cols]. f32.
void split_columns(const Tensor& x, int64_t col_begin, Tensor& y);

// ---------------------------------------------------------------------------------------------------
// Attention over a static cache, with grouped-query heads (Hq % Hkv == 0; head h reads kv head
// h / (Hq / Hkv)).
//   q: f32 [B, T, Hq, D]; k, v: act [B, L, Hkv, D] (the cache, or the current k/v in training)
//   kv_mask: i32 [B, L], 1 where a slot holds a real token (0 for left padding and unused slots)
//   query t sits at slot `slot_offset + t` and attends slots j <= slot_offset + t with kv_mask[b][j]
//   (causal by slot). A query with no visible slot (a padding row) outputs zeros.
//   out: act [B, T, Hq, D]. softmax in f32 with scale attention_scale(D).
//   With a bf16 cache the kernel may round the scaled q and the unnormalised probabilities to
//   bf16 once each, as a bf16 model's tensors hold them (the prefill through the GEMMs; the decode
//   where the bf16 GEMM takes vdpbf16ps); with an f32 cache it stays f32-class.
// Where attention_takes_grouped_q says so, q may instead be bf16 [B, Hkv, T, G, D] (G = Hq / Hkv):
// each kv head's query rows (t, g) side by side, scaled by attention_scale(D) and rounded to bf16.
// That is the operand the prefill kernel makes of an f32 q, so either form gives the same bits;
// qk_norm_rope_cache writes it directly, and the kernel is spared reading f32 q back and
// converting it (the f32 rows were written only to be read once).
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_mask,
               int64_t slot_offset, Tensor& out);
inline float attention_scale(int64_t d) { return 1.f / std::sqrt(float(d)); }
// Whether attention() over T queries a row, Hq and Hkv heads of dimension D and a cache of
// `cache` dtype takes a grouped q (bf16 caches, T >= 32, in builds with AVX512_BF16).
bool attention_takes_grouped_q(int64_t t, int64_t hq, int64_t hkv, int64_t d, DType cache);

// ---------------------------------------------------------------------------------------------------
// Backward kernels (training). Gradients are f32; forward inputs are re-read as stored.

// dx [R, H] and dw [H] (accumulated: dw += ...) for y = rms_norm(x, w).
void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx,
                       Tensor& dw);
// In place: dx = rope^T(dy) (rotation by the negative angle).
void rope_backward(Tensor& dy, const Tensor& positions, const Tensor& cos_sin);
// dgate_up [M, 2I] for y = silu_mul(gate_up).
void silu_mul_backward(const Tensor& gate_up, const Tensor& dy, Tensor& dgate_up);
// dq [B,T,Hq,D], dk, dv [B,L,Hkv,D] (overwritten) for out = attention(q, k, v, kv_mask, 0).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_mask,
                        const Tensor& out, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
// dtable [V, H] += scatter of dy [N, H] at ids [N].
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable);
// dbias [N] (f32) += sum over rows of dy f32 [M, N] (rows summed in double).
void bias_add_backward(const Tensor& dy, Tensor& dbias);
// Plain GEMMs for training: c [M, N] = a [M, K] @ b [K, N] with optional transposes, f32|bf16 in,
// f32 out (or bf16 when beta = 0); beta = 1 accumulates into c. (dX = dY @ W; dW += dY^T @ X.)
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float beta, Tensor& c);

// Cross-entropy over logits f32|bf16 [N, V] with labels i32 [N] (-100 = ignored): returns the sum of
// -log softmax(logits)[label] over non-ignored rows (computed in f32, summed in double), and writes
// dlogits [N, V] (the logits' dtype) = (softmax - onehot) * grad_scale for non-ignored rows, 0 for
// ignored. dlogits may alias logits.
double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits);

// ---------------------------------------------------------------------------------------------------
// Rooflines measured on this machine (for `kiln bench`): streaming read bandwidth in bytes/s with all
// threads, and the best GEMM rate in FLOP/s for `dtype` (bf16 or f32) at a large square size.
// Each takes about 0.5 s. measure_memory_bandwidth() streams a buffer of `bytes` (at least 256 MiB)
// that it frees on return; the process's peak RSS still counts it, so call it before loading a
// model. Size it like the reads it is a yardstick for: on this VM a 1.2 GB buffer, a decode step's
// weights, read 4-14 % slower (median) than a 256 MiB one, interleaved (docs/benchmarks.md). The
// threads share the read by work stealing, as the decode GEMVs do, and the best of the kinds of
// pass in kBandwidthPasses counts (each kind of read that was the fastest somewhere, so that no
// kernel reads faster than its yardstick).
constexpr size_t kMinBandwidthBytes = size_t(256) << 20;
double measure_memory_bandwidth(size_t bytes = kMinBandwidthBytes);
// How sum_lines helps the hardware prefetcher: not at all, a prefetch of every line 4 KiB ahead
// into L2 (as the decode GEMV does on Intel cores), or one prefetch per 4 KiB page, 32 KiB
// ahead (kick_page_ahead in simd.h; as the decode GEMV does elsewhere).
enum class ReadPrefetch { kNone, kEveryLine, kPageKick };
// The read loop measure_memory_bandwidth times (bench_read_split times its splits): the sum of
// `lines` 64-byte lines from p (64-byte aligned). With streams = 2 the lines are read as two
// halves side by side, 4 lines of one then 4 of the other: two streams a core, which on the Zen
// 5 VM read 3-30 % faster than one without a prefetch (bench_read_loops).
uint64_t sum_lines(const uint64_t* p, int64_t lines, ReadPrefetch prefetch, int streams = 1);
// The kinds of pass measure_memory_bandwidth takes turns at.
struct BandwidthPass {
  ReadPrefetch prefetch;
  int streams;
};
inline constexpr BandwidthPass kBandwidthPasses[] = {{ReadPrefetch::kNone, 1},
                                                     {ReadPrefetch::kEveryLine, 1},
                                                     {ReadPrefetch::kNone, 2},
                                                     {ReadPrefetch::kPageKick, 1}};
double measure_gemm_peak(DType dtype);
// Nanoseconds per load when each load's address comes from the one before, on the calling thread:
// no prefetcher can run ahead, so it reads the latency of wherever the lines live. The buffer is on
// huge pages, so that few loads miss the TLB. from_memory = false: every line of the buffer in one
// random cycle, a lap untimed, then a lap timed (a 4 MiB one sits in the Zen 5 VM's L3 and reads
// 17-29 ns, except in phases where other tenants' traffic evicts it: 110-175 ns; prefills ran
// 10-20 % slower in them on one day and no slower on another: docs/benchmarks.md, forty-fourth
// and forty-fifth sessions). from_memory = true: 64 Ki lines spread over the buffer (at least
// 4 MiB), flushed from the caches, then timed (170-210 ns here).
// `kiln bench` takes both before every repeat, so that each repeat's phase shows beside its result.
double measure_load_latency(size_t bytes, bool from_memory);
// The machine's arithmetic peak in FLOP/s for `dtype` GEMMs on all threads: f32 FMAs at the widest
// vector, and for bf16 on a CPU with AVX512_BF16 the faster of vdpbf16ps and those FMAs (a bf16
// GEMM runs on whichever is faster; without AVX512_BF16 it widens to f32). Register-only loops,
// ~0.1 s; the sum of each thread's own rate, so a core slower than the others does not lower it.
// 0 where neither AVX2 + FMA nor AVX-512 exists.
double measure_arithmetic_peak(DType dtype);
// Whether this CPU runs f32 FMAs (512-bit) faster in FLOP/s than vdpbf16ps: Intel's Sapphire and
// Emerald Rapids issue vdpbf16ps at half the f32 FMA rate, AMD's Zen 4 and 5 at twice it. False
// without AVX512_BF16. A ~1 ms measurement on the calling thread.
bool f32_fma_outruns_dpbf16();

}  // namespace kiln::cpu
