// PackedLinear and linear(): one packed weight layout serves decode (kiln's AVX512_BF16 GEMV) and
// prefill (kiln's bf16 GEMM on the same panels; oneDNN where that is not compiled). See
// docs/notes/cpu-gemm.md for the measurements behind it.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/backends/cpu/simd.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The rows of W [N, K]: one weight, or several stacked along N (fused QKV, gate_up), each
// contiguous and all of one dtype (f32 or bf16), read in place: packing a fused weight needs no
// stacked copy.
class WeightRows {
 public:
  explicit WeightRows(std::vector<Tensor> parts) : parts_(std::move(parts)) {
    k_ = parts_.at(0).dim(1);
    dtype_ = parts_[0].dtype();
    first_.push_back(0);
    for (const Tensor& w : parts_) first_.push_back(first_.back() + w.dim(0));
  }
  DType dtype() const { return dtype_; }
  size_t row_bytes() const { return size_t(k_) * dtype_size(dtype_); }
  // Row r, and how many rows from r on are in the same weight (so at one stride from it).
  const void* row(int64_t r, int64_t* run = nullptr) const {
    const size_t i = part_of(r);
    if (run) *run = first_[i + 1] - r;
    return static_cast<const char*>(parts_[i].raw()) + size_t(r - first_[i]) * row_bytes();
  }
  // Reads rows [r0, r1) of memory-mapped weights in before packing them (Storage::populate), and
  // drops them from memory once packed (Storage::release_pages).
  void populate(int64_t r0, int64_t r1) const {
    for_ranges(r0, r1, [](Storage& s, size_t offset, size_t bytes) { s.populate(offset, bytes); });
  }
  void release(int64_t r0, int64_t r1) const {
    for_ranges(r0, r1,
               [](Storage& s, size_t offset, size_t bytes) { s.release_pages(offset, bytes); });
  }

 private:
  template <typename Fn>
  void for_ranges(int64_t r0, int64_t r1, Fn&& fn) const {
    for (size_t i = 0; i < parts_.size(); ++i) {
      const int64_t a = std::max(r0, first_[i]), b = std::min(r1, first_[i + 1]);
      if (a < b)
        fn(*parts_[i].storage(), parts_[i].offset() + size_t(a - first_[i]) * row_bytes(),
           size_t(b - a) * row_bytes());
    }
  }
  size_t part_of(int64_t r) const {
    return size_t(std::upper_bound(first_.begin(), first_.end(), r) - first_.begin() - 1);
  }
  std::vector<Tensor> parts_;
  std::vector<int64_t> first_;  // first row of each part, then N
  int64_t k_ = 0;
  DType dtype_ = DType::f32;
};

class PackedLinearImpl final : public PackedLinear {
 public:
  PackedLinearImpl(int64_t n, int64_t k, DType compute) : n_(n), k_(k), compute_(compute) {}

  int64_t out_features() const override { return n_; }
  int64_t in_features() const override { return k_; }
  DType compute_dtype() const override { return compute_; }
  size_t bytes() const override { return buf_->bytes; }

  void read_rows(const int32_t* ids, int64_t n, float* out) const override {
    for (int64_t i = 0; i < n; ++i)
      KILN_CHECK(ids[i] >= 0 && ids[i] < n_, "PackedLinear::read_rows: row ", ids[i],
                 " out of range [0, ", n_, ")");
    parallel_for(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = ids[i];
        float* row = out + i * k_;
        if (compute_ == DType::f32) {  // W [N, K] as it was
          std::memcpy(row, static_cast<const float*>(buf_->ptr) + r * k_, size_t(k_) * 4);
          continue;
        }
        // Column r % 64 of its block: k pairs 64 columns (256 bytes) apart.
        auto column = [&](int64_t id) {
          return static_cast<const uint16_t*>(buf_->ptr) +
                 id / detail::kBlockN * kp_ * detail::kBlockN + id % detail::kBlockN * 2;
        };
        const uint16_t* col = column(r);
        // The next row's lines (one per k pair) are requested while this row's are read.
        const uint16_t* next = i + 1 < i1 ? column(ids[i + 1]) : nullptr;
        for (int64_t k = 0; k < k_; k += 2) {
          if (next) __builtin_prefetch(next + k * detail::kBlockN, 0, 3);
          row[k] = bf16_to_f32(col[k * detail::kBlockN]);
          if (k + 1 < k_) row[k + 1] = bf16_to_f32(col[k * detail::kBlockN + 1]);
        }
      }
    }, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, k_)));
  }

  // Fills the packed buffer from the rows of W [N, K].
  void pack_from(const WeightRows& w, bool release_source) {
    const memory::dims dims = {k_, n_};
    if (compute_ == DType::bf16) {
      wmd_ = memory::desc(dims, memory::data_type::bf16, Tag::BA16a64b2a);
      kp_ = detail::round_up(k_, detail::kBlockK);
    } else {
      // f32 is the checking path: plain W [N, K] (as [K, N] transposed), which every oneDNN matmul
      // implementation accepts for every M; blocked f32 layouts are rejected for some small M.
      wmd_ = memory::desc(dims, memory::data_type::f32, Tag::ba);
      kp_ = k_;
    }
    buf_ = std::make_unique<detail::HugeBuffer>(wmd_.get_size());
    if (compute_ == DType::bf16) {
      KILN_CHECK(wmd_.get_size() == size_t(detail::round_up(n_, detail::kBlockN) * kp_ * 2),
                 "oneDNN's BA16a64b2a size differs from the layout the GEMV assumes");
      pack_bf16_blocked(w, release_source);
      return;
    }
    KILN_CHECK(wmd_.get_size() == size_t(n_ * k_ * 4), "oneDNN's f32 ba size is not N x K");
    pack_f32_rows(w, release_source);
  }

  // Writes W [N, K] in f32 as it is (that is the `ba` layout of [K, N]), widening bf16 rows, in
  // groups of about 32 MB of source rows, each read in just before and released after. Not a
  // oneDNN reorder: Debian's oneDNN 2.6 widens bf16 with its reference reorder below AVX-512
  // (29 s for Qwen3-0.6B on a Zen 3, against ~1 s for these loops).
  void pack_f32_rows(const WeightRows& w, bool release_source) {
    auto* dst = static_cast<float*>(buf_->ptr);
    const int64_t group = std::max<int64_t>(1, int64_t((size_t(32) << 20) / w.row_bytes()));
    for (int64_t r0 = 0; r0 < n_; r0 += group) {
      const int64_t r1 = std::min(n_, r0 + group);
      w.populate(r0, r1);
      parallel_for(r1 - r0, [&](int64_t a, int64_t b) {
        for (int64_t r = r0 + a; r < r0 + b; ++r)
          convert(w.row(r), w.dtype(), dst + r * k_, DType::f32, k_);
      }, std::max<int64_t>(1, 4096 / k_));
      if (release_source) w.release(r0, r1);
    }
  }

  // Writes W [N, K] (bf16 or f32, rounded to nearest even) in the BA16a64b2a layout described in
  // linear_dnnl.h, zero padding included. kiln's own packing (the GEMM's pack_b_panels, which
  // that layout is) rather than a oneDNN reorder, so the layout is written down in one place; the
  // tests check it against oneDNN reading the same buffer. Blocks go to threads; within a block
  // the writes are sequential and the reads walk 64 rows in step (each cache line is used for 16
  // k pairs).
  void pack_bf16_blocked(const WeightRows& w, bool release_source) {
    const int64_t nblocks = (n_ + detail::kBlockN - 1) / detail::kBlockN;
    // Groups of blocks with about 32 MB of source rows, released once packed, bound what is
    // resident twice.
    const int64_t group = std::max<int64_t>(
        1, int64_t((size_t(32) << 20) / (size_t(detail::kBlockN) * w.row_bytes())));
    for (int64_t g0 = 0; g0 < nblocks; g0 += group) {
      const int64_t g1 = std::min(nblocks, g0 + group);
      w.populate(g0 * detail::kBlockN, std::min(n_, g1 * detail::kBlockN));
      pack_bf16_blocks(w, g0, g1);
      if (release_source) w.release(g0 * detail::kBlockN, std::min(n_, g1 * detail::kBlockN));
    }
  }

  // Blocks [first, end) of pack_bf16_blocked.
  void pack_bf16_blocks(const WeightRows& w, int64_t first, int64_t end) {
    auto* dst = static_cast<uint16_t*>(buf_->ptr);
    parallel_for(end - first, [&](int64_t i0, int64_t i1) {
      for (int64_t b = first + i0; b < first + i1; ++b) {
        uint16_t* out = dst + b * kp_ * detail::kBlockN;
        const int64_t n0 = b * detail::kBlockN;
        const int64_t cols = std::min<int64_t>(detail::kBlockN, n_ - n0);
        int64_t run = 0;
        const void* first_row = w.row(n0, &run);
        if (w.dtype() == DType::bf16 && run >= cols) {  // rows of one bf16 weight: gathered
          detail::pack_b_panels(static_cast<const uint16_t*>(first_row), k_, /*trans=*/true, k_,
                                cols, out);
          // Pairs past K (kp_ rounds K up to kBlockK): zeros.
          std::fill(out + (k_ + 1) / 2 * 2 * detail::kBlockN, out + kp_ * detail::kBlockN,
                    uint16_t(0));
        } else {
          pack_block_by_column(w, n0, cols, out);
        }
      }
    });
  }

  // Any block: column by column from wherever its row is, in either source dtype.
  void pack_block_by_column(const WeightRows& w, int64_t n0, int64_t cols, uint16_t* out) const {
    const bool from_bf16 = w.dtype() == DType::bf16;
    std::fill(out, out + kp_ * detail::kBlockN, uint16_t(0));
    for (int64_t c = 0; c < cols; ++c) {
      const void* row = w.row(n0 + c);
      const auto* rb = static_cast<const uint16_t*>(row);
      const auto* rf = static_cast<const float*>(row);
      for (int64_t k = 0; k < k_; ++k)
        out[(k / 2) * 2 * detail::kBlockN + 2 * c + k % 2] = from_bf16 ? rb[k] : f32_to_bf16(rf[k]);
    }
  }

  int64_t n_, k_, kp_ = 0;
  DType compute_;
  memory::desc wmd_;
  std::unique_ptr<detail::HugeBuffer> buf_;
};

void check_weight(const Tensor& w, const char* what) {
  KILN_CHECK(w.defined() && w.ndim() == 2, what, ": weight must be 2-D, got ", shape_str(w.shape()));
  KILN_CHECK(w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16, what,
             ": weight dtype ", dtype_name(w.dtype()), " not supported");
}

void check_compute(DType compute) {
  KILN_CHECK(compute == DType::f32 || compute == DType::bf16, "PackedLinear: compute dtype ",
             dtype_name(compute), " must be f32 or bf16");
}

}  // namespace

std::shared_ptr<PackedLinear> PackedLinear::pack(const Tensor& w, DType compute,
                                                 bool release_source) {
  return pack_concat({w}, compute, release_source);
}

std::shared_ptr<PackedLinear> PackedLinear::pack_concat(const std::vector<Tensor>& ws,
                                                        DType compute, bool release_source) {
  KILN_CHECK(!ws.empty(), "PackedLinear::pack_concat: no weights");
  check_compute(compute);
  const int64_t k = ws[0].ndim() == 2 ? ws[0].dim(1) : -1;
  int64_t n = 0;
  bool same = true;
  for (const Tensor& w : ws) {
    check_weight(w, "PackedLinear::pack_concat");
    KILN_CHECK(w.dim(1) == k, "PackedLinear::pack_concat: in_features differ (", w.dim(1), " vs ",
               k, ")");
    n += w.dim(0);
    same = same && w.dtype() == ws[0].dtype();
  }
  auto p = std::make_shared<PackedLinearImpl>(n, k, compute);
  if (same && ws[0].dtype() != DType::f16) {
    p->pack_from(WeightRows(ws), release_source);
    return p;
  }
  // f16, or mixed dtypes: each weight converted to f32 first (a temporary per weight).
  std::vector<Tensor> f32_parts;
  for (const Tensor& w : ws) {
    w.storage()->populate(w.offset(), w.nbytes());
    f32_parts.push_back(w.to(DType::f32));
    if (release_source) w.storage()->release_pages(w.offset(), w.nbytes());
  }
  p->pack_from(WeightRows(f32_parts), false);
  return p;
}

namespace {
// Up to 1 MiB a thread, half its L2 on the Zen 5: 128 KiB, 256 KiB and 1 MiB measured alike
// (docs/benchmarks.md, thirty-fifth session).
std::atomic<int64_t> read_ahead_bytes{int64_t(1) << 20};
}  // namespace

void set_decode_read_ahead_bytes(int64_t bytes) {
  read_ahead_bytes.store(std::max<int64_t>(0, bytes), std::memory_order_relaxed);
}

void read_ahead_for_gemv(const PackedLinear& packed) {
  const auto& w = dynamic_cast<const PackedLinearImpl&>(packed);
  const int64_t bytes = read_ahead_bytes.load(std::memory_order_relaxed);
  if (bytes == 0 || w.compute_ != DType::bf16 || !detail::bf16_linear_on_kiln()) return;
  read_ahead_for_next_loop(w.buf_->ptr, (w.n_ + detail::kBlockN - 1) / detail::kBlockN,
                           w.kp_ * detail::kBlockN * 2, bytes);
}

bool linear_avoids_onednn(const PackedLinear& packed, DType y) {
  const auto& w = dynamic_cast<const PackedLinearImpl&>(packed);
  if (w.compute_ != DType::bf16 || !detail::bf16_linear_on_kiln()) return false;
  if (!detail::avx512_bf16_kernels()) return true;  // linear_bf16_portable
  return !detail::gemm_onednn_only() && (y != DType::bf16 || w.kp_ <= detail::kMaxBf16K);
}

void linear(const Tensor& x, const PackedLinear& packed, Tensor& y, const Tensor* residual) {
  const auto& w = dynamic_cast<const PackedLinearImpl&>(packed);
  const int64_t N = w.n_, K = w.k_;
  KILN_CHECK(x.ndim() >= 1 && x.dim(-1) == K, "linear: x ", shape_str(x.shape()),
             " does not end in in_features ", K);
  KILN_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16, "linear: x dtype ",
             dtype_name(x.dtype()));
  const int64_t M = x.numel() / K;
  KILN_CHECK(y.numel() == M * N && y.dim(-1) == N, "linear: y ", shape_str(y.shape()),
             " is not [", M, ", ", N, "]");
  KILN_CHECK(y.dtype() == DType::f32 || y.dtype() == DType::bf16, "linear: y dtype ",
             dtype_name(y.dtype()));
  const float* res = nullptr;
  if (residual) {
    KILN_CHECK(residual->dtype() == DType::f32 && residual->numel() == M * N,
               "linear: residual must be f32 [", M, ", ", N, "], got ",
               dtype_name(residual->dtype()), " ", shape_str(residual->shape()));
    res = residual->data<float>();
  }
  if (M == 0) return;

  if (w.compute_ == DType::bf16 && detail::bf16_linear_on_kiln()) {
    // x to bf16 once, zero-padded to Kp, then decode streams the weights (GEMV) and prefill runs
    // kiln's GEMM kernel on them in place: the kernel training uses, level with oneDNN's brgemm on
    // this layout and with no primitive to create per shape (docs/notes/cpu-gemm.md). Without
    // AVX512_BF16 both are the portable kernel (AVX2 or plain C++). A bf16 x whose rows need no
    // padding is read in place (a model's prefill activations: a serial copy of them was ~1 % of
    // a 512-token prefill).
    const int64_t kp = w.kp_;
    const uint16_t* xb = static_cast<const uint16_t*>(x.raw());
    if (x.dtype() != DType::bf16 || kp != K) {
      auto* padded = static_cast<uint16_t*>(detail::thread_scratch(1, size_t(M * kp) * 2));
      for (int64_t m = 0; m < M; ++m) {
        const char* src = static_cast<const char*>(x.raw()) + m * K * dtype_size(x.dtype());
        convert(src, x.dtype(), padded + m * kp, DType::bf16, K);
        std::fill(padded + m * kp + K, padded + (m + 1) * kp, uint16_t(0));
      }
      xb = padded;
    }
    const auto* wp = static_cast<const uint16_t*>(w.buf_->ptr);
    const bool y_bf16 = y.dtype() == DType::bf16;
    if (!detail::avx512_bf16_kernels())
      return detail::linear_bf16_portable(xb, M, kp, wp, N, y.raw(), y_bf16, res);
    if (M <= detail::kGemvMaxM) return detail::gemv_bf16(xb, M, kp, wp, N, y.raw(), y_bf16, res);
    if (!detail::gemm_onednn_only() &&
        detail::gemm_bf16_packed(xb, M, kp, wp, N, y.raw(), y_bf16, res))
      return;
  }

  // oneDNN matmul on the packed weights, residual fused as a post-op: f32 compute, and bf16 where
  // kiln's kernels do not apply.
  const void* src = x.raw();
  if (x.dtype() != w.compute_) {
    void* tmp = detail::thread_scratch(1, size_t(M * K) * dtype_size(w.compute_));
    convert(x.raw(), x.dtype(), tmp, w.compute_, M * K);
    src = tmp;
  }
  // oneDNN has no f32 x f32 -> bf16 matmul: that case writes f32 scratch, converted at the end.
  const bool via_f32 = w.compute_ == DType::f32 && y.dtype() == DType::bf16;
  void* dst = via_f32 ? detail::thread_scratch(2, size_t(M * N) * 4) : y.raw();
  const DType dst_t = via_f32 ? DType::f32 : y.dtype();
  // Epilogue: 0 none, 1 sum (residual is y itself, added in place), 2 binary add (separate).
  int epilogue = 0;
  if (res) epilogue = (res == y.raw() && y.dtype() == DType::f32) ? 1 : 2;
  const std::string key = "linear:" + std::to_string(M) + "," + std::to_string(N) + "," +
                          std::to_string(K) + "," + std::string(dtype_name(w.compute_)) + "," +
                          std::string(dtype_name(dst_t)) + "," + std::to_string(epilogue);
  const memory::desc src_md({M, K}, detail::to_dnnl(w.compute_), Tag::ab);
  const memory::desc dst_md({M, N}, detail::to_dnnl(dst_t), Tag::ab);
  const memory::desc res_md({M, N}, memory::data_type::f32, Tag::ab);
  const auto& mm = detail::matmul_cache().get(key, [&] {
    dnnl::post_ops po;
    if (epilogue == 1) po.append_sum(1.f);
    if (epilogue == 2) po.append_binary(dnnl::algorithm::binary_add, res_md);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, w.wmd_, dst_md), attr,
                                        detail::dnnl_engine());
  });
  auto& eng = detail::dnnl_engine();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(src_md, eng, const_cast<void*>(src))},
      {DNNL_ARG_WEIGHTS, memory(w.wmd_, eng, w.buf_->ptr)},
      {DNNL_ARG_DST, memory(dst_md, eng, dst)}};
  if (epilogue == 2) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 memory(res_md, eng, const_cast<float*>(res)));
  }
  detail::run_matmul(mm, std::move(args));
  if (via_f32) convert(dst, DType::f32, y.raw(), DType::bf16, M * N);
}

void linear_silu_mul(const Tensor& x, const PackedLinear& packed, Tensor& y) {
  const auto& w = dynamic_cast<const PackedLinearImpl&>(packed);
  const int64_t N = w.n_, K = w.k_, inter = N / 2;
  KILN_CHECK(N % 2 == 0 && x.ndim() >= 1 && x.dim(-1) == K, "linear_silu_mul: x ",
             shape_str(x.shape()), " and a gate_up weight of ", N, " rows");
  const int64_t M = x.numel() / K;
  KILN_CHECK(detail::is_act(y.dtype()) && y.numel() == M * inter && y.dim(-1) == inter,
             "linear_silu_mul: y ", shape_str(y.shape()), " is not act [", M, ", ", inter, "]");
  if (M == 0) return;
  if (w.compute_ == DType::bf16 && x.dtype() == DType::bf16 && w.kp_ == K &&
      M > detail::kGemvMaxM && detail::bf16_linear_on_kiln() && !detail::gemm_onednn_only() &&
      detail::gemm_bf16_packed_swiglu(static_cast<const uint16_t*>(x.raw()), M, K,
                                      static_cast<const uint16_t*>(w.buf_->ptr), inter, y.raw(),
                                      y.dtype() == DType::bf16))
    return;
  // Elsewhere the two ops, through an f32 gate_up: decode's few rows (the GEMV) and shapes the
  // kernel does not take (the graph fuses only for bf16 on CPUs that have it: cpu_backend.cpp).
  thread_local Tensor gate_up;
  if (!gate_up.defined() || gate_up.numel() < M * N) gate_up = Tensor::empty({M * N}, DType::f32);
  Tensor g = gate_up.slice0(0, M * N).reshape({M, N});
  linear(x, packed, g);
  Tensor y2 = y.reshape({M, inter});
  silu_mul(g, y2);
}

void linear_qk_norm_rope_cache(const Tensor& x, const PackedLinear& packed, const Tensor& q_norm,
                               const Tensor& k_norm, float eps, const Tensor& positions,
                               const Tensor& cos_sin, int64_t slot_offset, Tensor& q_out,
                               Tensor& k_cache, Tensor& v_cache) {
  const auto& w = dynamic_cast<const PackedLinearImpl&>(packed);
  const int64_t N = w.n_, K = w.k_;
  KILN_CHECK(x.ndim() >= 1 && x.dim(-1) == K, "linear_qk_norm_rope_cache: x ",
             shape_str(x.shape()), " does not end in in_features ", K);
  const int64_t M = x.numel() / K;
  if (w.compute_ == DType::bf16 && x.dtype() == DType::bf16 && w.kp_ == K &&
      M > detail::kGemvMaxM && detail::bf16_linear_on_kiln() && !detail::gemm_onednn_only()) {
    const auto e = detail::QkvEpilogue::make("linear_qk_norm_rope_cache", M, N, q_norm, k_norm,
                                             eps, positions, cos_sin, slot_offset, q_out, k_cache,
                                             v_cache);
    if (detail::gemm_bf16_packed_qkv(static_cast<const uint16_t*>(x.raw()), M, K,
                                     static_cast<const uint16_t*>(w.buf_->ptr), e))
      return;
  }
  // Elsewhere the two ops, through an f32 projection (decode's few rows; shapes the kernel does
  // not take).
  thread_local Tensor qkv;
  if (!qkv.defined() || qkv.numel() < M * N) qkv = Tensor::empty({M * N}, DType::f32);
  Tensor proj = qkv.slice0(0, M * N).reshape({M, N});
  linear(x, packed, proj);
  qk_norm_rope_cache(proj, q_norm, k_norm, eps, positions, cos_sin, slot_offset, q_out, k_cache,
                     v_cache);
}

}  // namespace kiln::cpu
