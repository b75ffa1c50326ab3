// gemm(): plain GEMMs for training (dX = dY @ W, dW += dY^T @ X). bf16 x bf16 runs kiln's own kernel
// (gemm_bf16.cpp) where it applies; the rest goes through oneDNN matmul, with the transposes
// expressed as strides (no copies) and beta as a sum post-op.
#include <cstring>
#include <string>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"

namespace kiln::cpu {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float beta, Tensor& c) {
  using dnnl::memory;
  KILN_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "gemm: a ", shape_str(a.shape()),
             ", b ", shape_str(b.shape()), ", c ", shape_str(c.shape()), " must be 2-D");
  KILN_CHECK(c.dtype() == DType::f32 || (c.dtype() == DType::bf16 && beta == 0.f),
             "gemm: c must be f32 (or bf16 without accumulation), got ", dtype_name(c.dtype()));
  for (const Tensor* t : {&a, &b}) {
    KILN_CHECK(t->dtype() == DType::f32 || t->dtype() == DType::bf16, "gemm: input dtype ",
               dtype_name(t->dtype()), " must be f32 or bf16");
  }
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  KILN_CHECK(K == Kb && c.dim(0) == M && c.dim(1) == N, "gemm: op(a) [", M, ", ", K,
             "] @ op(b) [", Kb, ", ", N, "] does not give c ", shape_str(c.shape()));
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum: c = beta * c
    if (c.dtype() == DType::bf16) {
      std::memset(c.raw(), 0, c.nbytes());
      return;
    }
    float* p = c.data<float>();
    for (int64_t i = 0; i < M * N; ++i) p[i] = beta == 0.f ? 0.f : beta * p[i];
    return;
  }

  if (!detail::gemm_onednn_only() && a.dtype() == DType::bf16 && b.dtype() == DType::bf16 &&
      detail::gemm_bf16(static_cast<const uint16_t*>(a.raw()), trans_a,
                        static_cast<const uint16_t*>(b.raw()), trans_b, M, N, K, beta, c.raw(),
                        c.dtype() == DType::bf16))
    return;

  // Mixed inputs multiply in f32 (the bf16 operand is widened into a scratch buffer), and so do
  // bf16 ones where oneDNN has no bf16 matmul (below AVX-512): widening is exact.
  const DType t = a.dtype() == b.dtype() && (a.dtype() == DType::f32 || detail::onednn_has_bf16())
                      ? a.dtype()
                      : DType::f32;
  const void* pa = a.raw();
  const void* pb = b.raw();
  if (a.dtype() != t) {
    void* s = detail::thread_scratch(1, size_t(a.numel()) * dtype_size(t));
    convert(a.raw(), a.dtype(), s, t, a.numel());
    pa = s;
  }
  if (b.dtype() != t) {
    void* s = detail::thread_scratch(2, size_t(b.numel()) * dtype_size(t));
    convert(b.raw(), b.dtype(), s, t, b.numel());
    pb = s;
  }

  // oneDNN has no f32 x f32 -> bf16 matmul: that case writes f32 scratch (beta is 0 for bf16 c).
  const bool via_f32 = t == DType::f32 && c.dtype() == DType::bf16;
  const DType ct = via_f32 ? DType::f32 : c.dtype();
  void* pc = via_f32 ? detail::thread_scratch(3, size_t(M * N) * 4) : c.raw();
  const auto dt = detail::to_dnnl(t);
  const memory::desc a_md({M, K}, dt, trans_a ? memory::dims{1, M} : memory::dims{K, 1});
  const memory::desc b_md({K, N}, dt, trans_b ? memory::dims{1, K} : memory::dims{N, 1});
  const memory::desc c_md({M, N}, detail::to_dnnl(ct), memory::format_tag::ab);
  const std::string key = "gemm:" + std::to_string(M) + "," + std::to_string(N) + "," +
                          std::to_string(K) + "," + std::to_string(int(trans_a)) +
                          std::to_string(int(trans_b)) + "," + std::string(dtype_name(t)) + "," +
                          std::string(dtype_name(ct));
  detail::run_strided_matmul(key, a_md, pa, b_md, pb, c_md, pc, beta);
  if (via_f32) convert(pc, DType::f32, c.raw(), DType::bf16, M * N);
}

}  // namespace kiln::cpu
