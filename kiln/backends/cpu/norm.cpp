// RMSNorm (Transformers' Qwen3RMSNorm): rows split over the pool, each row read twice (sum of
// squares, then scale) from L1.
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/norm.h"

namespace kiln::cpu {

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  KILN_CHECK(detail::is_act(x.dtype()) && detail::is_act(y.dtype()) && detail::is_act(w.dtype()),
             "rms_norm: act dtypes expected");
  KILN_CHECK(x.ndim() >= 1 && w.ndim() == 1 && x.dim(-1) == w.dim(0) && y.numel() == x.numel(),
             "rms_norm: x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", y ",
             shape_str(y.shape()));
  const int64_t h = w.dim(0), rows = h > 0 ? x.numel() / h : 0;
  const std::vector<float> wf = detail::weight_f32(w);
  // In a bf16 model Transformers rounds the normed activations to bf16 before the weight multiply.
  const bool round_normed = x.dtype() == DType::bf16 || y.dtype() == DType::bf16;
  // An f32 x (the residual stream) is read in place, a bf16 one widened a row at a time; y is
  // written directly (in place where it aliases x).
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        std::vector<float> xbuf(x.dtype() == DType::f32 ? 0 : static_cast<size_t>(h));
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x.dtype() == DType::f32 ? x.data<float>() + r * h : xbuf.data();
          if (x.dtype() != DType::f32) detail::load_row(x.raw(), x.dtype(), r * h, h, xbuf.data());
          if (y.dtype() == DType::f32)
            detail::rms_norm_row(xr, wf.data(), h, eps, round_normed, y.data<float>() + r * h);
          else
            detail::rms_norm_row(xr, wf.data(), h, eps, round_normed,
                                 static_cast<bf16_t*>(y.raw()) + r * h);
        }
      },
      std::max<int64_t>(1, 8192 / std::max<int64_t>(h, 1)));
}

}  // namespace kiln::cpu
