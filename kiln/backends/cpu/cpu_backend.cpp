#include "kiln/backends/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/backends/cpu/linear_dnnl.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cpu {

namespace {

using graph::Node;
using graph::Op;

// Packs (or finds already packed) the weights of a Linear node; shared across graphs by name. They
// are packed in the dtype the node's input comes in (the model dtype), whatever the stored dtype:
// an f32 model keeps its bf16 matrices mapped until this widens them.
std::shared_ptr<PackedLinear> pack_linear(const graph::Graph& g, const Node& n,
                                         graph::WeightStore& weights) {
  std::string key = "linear:";
  for (const auto& name : n.weight_names) key += name + ";";
  auto prepared = weights.prepared(key, [&]() -> std::shared_ptr<void> {
    std::vector<Tensor> ws;
    for (const auto& name : n.weight_names) ws.push_back(weights.get(name));
    const DType compute = g.node(n.inputs.at(0)).dtype;
    // The packed copy is what runs from now on (a tied embedding reads it too): a memory-mapped
    // source leaves RSS as it is packed.
    auto packed = ws.size() == 1 ? PackedLinear::pack(ws[0], compute, /*release_source=*/true)
                                 : PackedLinear::pack_concat(ws, compute, /*release_source=*/true);
    weights.add_prepared_bytes(packed->bytes());
    return packed;
  });
  return std::static_pointer_cast<PackedLinear>(prepared);
}

bool is_linear(Op op) {
  return op == Op::Linear || op == Op::LinearResidual || op == Op::LinearSiluMul ||
         op == Op::LinearQKNormRopeCache;
}

// What a linear node runs with: its packed weights, and those of the graph's next linear in run
// order, which it names for the spinning team's waiting threads to read ahead
// (read_ahead_for_gemv).
struct PreparedLinear {
  std::shared_ptr<PackedLinear> w, next;
};

std::shared_ptr<void> prepare_linear(const graph::Graph& g, const Node& n,
                                     graph::WeightStore& weights) {
  auto p = std::make_shared<PreparedLinear>();
  p->w = pack_linear(g, n, weights);
  for (size_t i = size_t(&n - g.nodes.data()) + 1; i < g.nodes.size(); ++i) {
    const Node& m = g.nodes[i];
    if (!m.dead && is_linear(m.op)) {
      p->next = pack_linear(g, m, weights);
      break;
    }
  }
  return p;
}

// An embedding table that is also a linear's whole weight (the tied lm_head) is looked up in that
// linear's packed copy, so the model holds the table once. Reading it from its memory-mapped
// source brings its pages back: on a kernel with large page-cache folios, 128 random rows made
// 270 of the table's 311 MB resident again (Qwen3-0.6B, peak RSS 1.36x weights + cache at
// P = 512, against 1.3x allowed).
std::shared_ptr<void> prepare_tied_embedding(const graph::Graph& g, const Node& n,
                                             graph::WeightStore& weights) {
  const Node& table = g.node(n.inputs.at(1));
  if (table.op != Op::Weight) return nullptr;  // training's f32 master table
  // The packed copy holds the table in the model dtype, which is what the lookup must return.
  for (const Node& m : g.nodes)
    if (!m.dead && (m.op == Op::Linear || m.op == Op::LinearResidual) &&
        m.weight_names == table.weight_names && g.node(m.inputs.at(0)).dtype == table.dtype)
      return pack_linear(g, m, weights);
  // Otherwise the lookup reads the stored table, which the loader converts unless it only widens.
  const DType stored = weights.get(table.weight_names.at(0)).dtype();
  KILN_CHECK(stored == table.dtype || (stored == DType::bf16 && table.dtype == DType::f32), n.name,
             ": table stored in ", dtype_name(stored), " for a ", dtype_name(table.dtype),
             " model, with no packed copy to read");
  return nullptr;
}

void bias_add(const Tensor& x, const Tensor& bias, Tensor& y) {
  const int64_t cols = bias.numel(), rows = x.numel() / cols;
  std::vector<float> b = bias.to_f32_vector();
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) yp[r * cols + c] = xp[r * cols + c] + b[size_t(c)];
  });
}

// Row T-1 of each of the B groups of T rows.
void take_last_rows(const Tensor& x, int64_t batch, Tensor& y) {
  const int64_t rows = x.dim(0), t = rows / batch;
  const size_t row_bytes = size_t(x.dim(1)) * dtype_size(x.dtype());
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(static_cast<char*>(y.raw()) + size_t(b) * row_bytes,
                static_cast<const char*>(x.raw()) + size_t(b * t + t - 1) * row_bytes, row_bytes);
}

// dx = dy * d silu(x) / dx = dy * s * (1 + x (1 - s)), s = sigmoid(x). All f32.
void silu_grad(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const float* xp = x.data<float>();
  const float* dp = dy.data<float>();
  float* out = dx.data<float>();
  parallel_for(
      x.numel(),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float s = 1.0f / (1.0f + std::exp(-xp[i]));
          out[i] = dp[i] * s * (1.0f + xp[i] * (1.0f - s));
        }
      },
      4096);
}

// A linear node's packed weights, once the next linear's are named for reading ahead.
const PackedLinear& weights_reading_ahead(const void* prepared) {
  const auto& p = *static_cast<const PreparedLinear*>(prepared);
  if (p.next) read_ahead_for_gemv(*p.next);
  return *p.w;
}

class CpuBackend final : public graph::Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool supports(Op op) const override {
    // The GEMM epilogues: where kiln's bf16 GEMM is built (elsewhere the unfused pair is better).
    if (op == Op::LinearSiluMul || op == Op::LinearQKNormRopeCache)
      return detail::avx512_bf16_kernels();
    return op != Op::kCount;
  }

  bool attention_takes_grouped_q(const graph::Graph& g, const Node& attention) const override {
    const Shape& q = g.node(attention.inputs[0]).shape;  // [B, T, Hq, D]
    const Node& k = g.node(attention.inputs[1]);          // [B, L, Hkv, D]
    return q.size() == 4 && k.shape.size() == 4 &&
           cpu::attention_takes_grouped_q(q[1], q[2], k.shape[2], q[3], k.dtype);
  }

  std::shared_ptr<void> prepare(const graph::Graph& g, const Node& n,
                                graph::WeightStore& weights) override {
    if (is_linear(n.op)) return prepare_linear(g, n, weights);
    if (n.op == Op::Embedding) return prepare_tied_embedding(g, n, weights);
    return nullptr;
  }

  // A decode step is ~170 short parallel loops (GEMVs of ~50-250 us, attention, norms); its
  // threads spin between them instead of opening a parallel region for each (~3.3 us here). A
  // prefill's are GEMMs of ~0.8-2.3 ms, whose faster thread waits for the other at each end:
  // on the team it spends that wait reading the start of its share of the next linear's weights
  // (read_ahead_for_gemv), which the next GEMM's first tile would otherwise fetch from memory at
  // one core's pace. 128-token prefills took 0.985-0.991 of the time on the team (four runs of
  // 300-400 alternated pairs), 512-token ones 0.998; on the team with the reading ahead off,
  // 1.002. Only where no op calls oneDNN, whose own parallel regions would get one thread
  // inside the team.
  void run_graph(bool spin_threads, const std::function<void()>& nodes) override {
    if (spin_threads)
      run_with_spinning_team(nodes);
    else
      nodes();
  }

  bool threads_spin(const graph::Graph& g,
                    std::span<const std::shared_ptr<void>> prepared) const override {
    if (!detail::bf16_linear_on_kiln()) return false;
    bool any_linear = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      switch (n.op) {
        case Op::Input: case Op::Weight: case Op::State: case Op::Reshape: case Op::Slice:
        case Op::Embedding: case Op::RMSNorm: case Op::Add: case Op::SiLU: case Op::Mul:
        case Op::SiluMul: case Op::SplitColumns: case Op::Rope: case Op::KVCacheWrite:
        case Op::QKNormRopeCache: case Op::TakeLastRows: case Op::Cast: case Op::BiasAdd:
        case Op::Attention:  // kiln's kernels only; its GEMMs run inside its loops' shares
          break;
        case Op::Linear:
        case Op::LinearResidual:
        case Op::LinearSiluMul:
        case Op::LinearQKNormRopeCache: {
          // The GEMV (bf16, few rows) is kiln's everywhere; a GEMM is where linear_avoids_onednn
          // says so (the fused ops write f32 where they fall back to linear()). A linear's rows
          // are those of x, the first input: a fused op's output need not be the projection's
          // (LinearQKNormRopeCache returns q, [B, T, Hq, D]).
          const auto* prep = static_cast<const PreparedLinear*>(prepared[i].get());
          const PackedLinear* p = prep ? prep->w.get() : nullptr;
          if (!p || p->compute_dtype() != DType::bf16) return false;
          const Shape& x = g.node(n.inputs[0]).shape;
          const int64_t rows = x.empty() ? 0 : numel(x) / x.back();
          const bool fused = n.op == Op::LinearSiluMul || n.op == Op::LinearQKNormRopeCache;
          if (rows > detail::kGemvMaxM && !linear_avoids_onednn(*p, fused ? DType::f32 : n.dtype))
            return false;
          any_linear = true;
          break;
        }
        default:
          return false;
      }
    }
    return any_linear;
  }

  void run(const Node& n, const void* prepared, std::span<const Tensor> in, Tensor& out,
           const graph::RunContext& ctx) override {
    switch (n.op) {
      case Op::Input:
      case Op::Weight:
      case Op::State:
      case Op::Reshape:
      case Op::kCount:
        return;
      case Op::Embedding:
        if (prepared)  // a tied table, read from the lm_head's packed copy
          return embedding_packed(in[0], *static_cast<const PackedLinear*>(prepared), out);
        return embedding(in[0], in[1], out);
      case Op::Linear: return linear(in[0], weights_reading_ahead(prepared), out);
      case Op::LinearResidual: return linear(in[0], weights_reading_ahead(prepared), out, &in[1]);
      case Op::LinearSiluMul: return linear_silu_mul(in[0], weights_reading_ahead(prepared), out);
      case Op::BiasAdd: return bias_add(in[0], in[1], out);
      case Op::RMSNorm: return rms_norm(in[0], in[1], n.eps, out);
      case Op::Add: return add(in[0], in[1], out);
      case Op::SiLU: return silu(in[0], out);
      case Op::Mul: return mul(in[0], in[1], out);
      case Op::SiluMul: return silu_mul(in[0], out);
      case Op::SplitColumns: return split_columns(in[0], n.i0, out);
      case Op::Rope:
        std::memcpy(out.raw(), in[0].raw(), out.nbytes());
        return rope(out, in[1], in[2]);
      case Op::KVCacheWrite: return kv_cache_write(in[1], ctx.slot_offset, out);
      case Op::QKNormRopeCache:
      case Op::LinearQKNormRopeCache: {
        Tensor k_cache = in[3], v_cache = in[4];
        Tensor no_norm;
        const Tensor& qn = in.size() > 5 ? in[5] : no_norm;
        const Tensor& kn = in.size() > 6 ? in[6] : no_norm;
        if (n.op == Op::LinearQKNormRopeCache)
          return linear_qk_norm_rope_cache(in[0], weights_reading_ahead(prepared), qn, kn, n.eps,
                                           in[1], in[2], ctx.slot_offset, out, k_cache, v_cache);
        return qk_norm_rope_cache(in[0], qn, kn, n.eps, in[1], in[2], ctx.slot_offset, out, k_cache,
                                  v_cache);
      }
      case Op::Attention: return attention(in[0], in[1], in[2], in[3], ctx.slot_offset, out);
      case Op::TakeLastRows: return take_last_rows(in[0], n.i0, out);
      case Op::Cast: return convert(in[0].raw(), in[0].dtype(), out.raw(), out.dtype(), out.numel());
      case Op::Slice: return;
      case Op::MatMul: return gemm(in[0], false, in[1], true, 0.0f, out);
      case Op::CrossEntropy: {
        const double loss = cross_entropy(in[0], in[1].reshape({in[1].numel()}), ctx.loss_scale,
                                          n.i0 ? &out : nullptr);
        if (ctx.loss_sum) *ctx.loss_sum += loss;
        return;
      }
      case Op::MatMulGradInput: return gemm(in[0], false, in[1], false, 0.0f, out);
      case Op::MatMulGradWeight: {
        Tensor grad = in[2];
        return gemm(in[0], true, in[1], false, 1.0f, grad);
      }
      case Op::EmbeddingGrad: {
        Tensor grad = in[2];
        return embedding_backward(in[0].reshape({in[0].numel()}), in[1], grad);
      }
      case Op::RMSNormGrad: {
        Tensor grad = in[3];
        return rms_norm_backward(in[0], in[1], n.eps, in[2], out, grad);
      }
      case Op::SiLUGrad: return silu_grad(in[0], in[1], out);
      case Op::RopeGrad:
        std::memcpy(out.raw(), in[0].raw(), out.nbytes());
        return rope_backward(out, in[1], in[2]);
      case Op::BiasAddGrad: {
        Tensor grad = in[1];
        return bias_add_backward(in[0], grad);
      }
      case Op::AttentionGrad: {
        const int64_t nq = in[0].numel(), nk = in[1].numel();
        Tensor dq(out.storage(), out.offset(), in[0].shape(), DType::f32);
        Tensor dk(out.storage(), out.offset() + size_t(nq) * 4, in[1].shape(), DType::f32);
        Tensor dv(out.storage(), out.offset() + size_t(nq + nk) * 4, in[2].shape(), DType::f32);
        return attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], dq, dk, dv);
      }
    }
  }
};

}  // namespace

graph::Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace kiln::cpu
