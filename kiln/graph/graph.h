// The graph IR: an SSA list of ops with static shapes.
//
// Model code builds a Graph through GraphBuilder (one call per op, named after the Transformers module
// path). Nodes are kept in creation order, which is also execution order: ops with side effects on
// state (KV-cache writes) are ordered by their position, and passes preserve relative order.
//
// Each op is described once, in op_table() (graph.cpp): its name, whether it has side effects, and
// whether its output is a view of its first input. Kernels live in the backend (backends/cpu); the
// executor (executor.h) maps ops to kernels.
//
// Example:
//   GraphBuilder b("decode");
//   Value ids = b.input("input_ids", {B, 1}, DType::i32);
//   Value h = b.embedding(ids, b.weight("model.embed_tokens.weight", {V, H}, DType::bf16));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::graph {

enum class Op : uint8_t {
  // Leaves
  Input,   // fed at run time: ids, positions, masks
  Weight,  // a model parameter, bound by name at compile time, possibly in the dtype it is stored
           // in (the ops that read it convert: packed linears, embedding), never viewed
  State,   // persistent mutable tensor bound at run time (KV cache); ops write it in place
  // Compute
  Embedding,        // (ids i32 [N], table [V, H]) -> f32 [N, H]
  // Linear weights are bound by attrs.weight_names (several = fused along N); the builder also links
  // the Weight node as input 1 for readability, and passes may drop it.
  Linear,           // (x [M, K], [w]) -> f32 [M, N]
  LinearResidual,   // (x [M, K], residual f32 [M, N]) -> f32 [M, N] = x W^T + residual
  LinearSiluMul,    // (x [M, K]) -> act [M, I] = SiLU(x Wg^T) * (x Wu^T), gate_up W [2I, K]
  BiasAdd,          // (x f32 [M, N], bias [N]) -> f32 [M, N]
  RMSNorm,          // (x [R, H], w [H]) -> act [R, H]; attrs.eps
  Add,              // (a f32, b f32) -> f32
  SiLU,             // (x f32) -> f32
  Mul,              // (a f32, b) -> act
  SiluMul,          // (gate_up f32 [M, 2I]) -> act [M, I]     (fused SiLU * Mul)
  SplitColumns,     // (x f32 [M, C]) -> f32 [M, attrs.i1]; columns from attrs.i0
  Reshape,          // (x) -> view with a new shape
  Rope,             // (x f32 [B, T, H, D], positions i32 [B, T], cos_sin f32 [P, D]) -> rotated copy
  KVCacheWrite,     // (x f32 [B, T, Hkv, D], cache State) -> cache, slots from the run's slot_offset
  QKNormRopeCache,  // (qkv, q_norm, k_norm, positions, cos_sin, k_cache, v_cache) -> q f32; writes caches
  LinearQKNormRopeCache,  // (x, positions, cos_sin, k_cache, v_cache[, q_norm, k_norm]) -> the same
                          //   from x and the qkv weights (QKNormRopeCache over Linear, fused)
                          // Either may write q grouped for its Attention (group_attention_q).
  Attention,        // (q f32 [B,T,Hq,D], k [B,L,Hkv,D], v, kv_mask i32 [B, L]) -> act [B,T,Hq,D];
                    //   or q grouped: bf16 [B,Hkv,T,G,D], scaled by 1/sqrt(D) (cpu/kernels.h)
  TakeLastRows,     // (x [B*T, H]) -> [B, H]: row t = T-1 of each batch entry
  Cast,             // (x) -> attrs dtype
  // Training: weights are States bound at run time (they change every step), gradients of weights
  // are accumulated (+=) into gradient States, so those ops have side effects.
  MatMul,            // (x [M, K], w State [N, K]) -> f32 [M, N] = x w^T, unpacked
  CrossEntropy,      // (logits f32 [N, V], labels i32 [N]) -> f32 dlogits * ctx.loss_scale
                     //   (i0 = 0: [1] dummy, no gradient); adds the loss sum to ctx.loss_sum
  Slice,             // (x) -> view of numel(shape) elements from element offset i0
  MatMulGradInput,   // (dy f32 [M, N], w [N, K]) -> f32 [M, K] = dy w
  MatMulGradWeight,  // (dy f32 [M, N], x [M, K], grad State f32 [N, K]) -> grad += dy^T x
  EmbeddingGrad,     // (ids i32 [N], dy f32 [N, H], grad State f32 [V, H]) -> grad += scatter
  RMSNormGrad,       // (x, w, dy f32, grad_w State f32 [H]) -> f32 dx; grad_w += dw
  SiLUGrad,          // (x f32, dy f32) -> f32 dx
  RopeGrad,          // (dy f32 [B, T, H, D], positions, cos_sin) -> f32 dx
  AttentionGrad,     // (q, k, v, kv_mask, out, dout) -> f32 [dq | dk | dv] flat
  BiasAddGrad,       // (dy f32 [M, N], grad State f32 [N]) -> grad += column sums of dy
  kCount
};

struct OpInfo {
  const char* name;
  bool side_effects;  // writes a State input; never removed by dead-code elimination
  bool view;          // output aliases input 0's storage
};
const OpInfo& op_info(Op op);

using Value = int32_t;  // index of the node that produces it

struct Node {
  Op op = Op::Input;
  std::vector<Value> inputs;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;  // Transformers module path, e.g. model.layers.3.self_attn.q_proj
  // Attributes (meaning per op above).
  std::vector<std::string> weight_names;
  float eps = 0;
  int64_t i0 = 0, i1 = 0;
  bool dead = false;
};

struct Graph {
  std::string function;         // prefill | decode | score | ...
  std::vector<Node> nodes;
  std::vector<Value> outputs;   // returned to the caller after a run
  std::vector<Value> inputs;    // Input nodes in feed order
  std::vector<Value> states;    // State nodes in binding order

  const Node& node(Value v) const { return nodes[size_t(v)]; }
  // Checks SSA order, shapes of inputs and that outputs exist; throws InternalError on violation.
  void verify() const;
  // One line per live node: "%12 = Linear(%3) f32 [1, 4096]  model.layers.0.self_attn.qkv_proj".
  std::string dump() const;
};

// Builds a Graph. Shape rules live here, one method per op; a shape mismatch is a KILN_CHECK
// (model code bug), never user input.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string function) { graph_.function = std::move(function); }
  // Continues an existing graph (autodiff appends the backward pass to the forward graph).
  explicit GraphBuilder(Graph g) : graph_(std::move(g)) {}

  Value input(const std::string& name, const Shape& shape, DType dtype);
  Value weight(const std::string& name, const Shape& shape, DType dtype);
  Value state(const std::string& name, const Shape& shape, DType dtype);

  Value embedding(Value ids, Value table, const std::string& name);
  // y = x W^T with W [N, K]; f32 unless the consumer wants act (out_dtype bf16).
  Value linear(Value x, Value w, const std::string& name, DType out_dtype = DType::f32);
  Value bias_add(Value x, Value bias, const std::string& name);
  Value rms_norm(Value x, Value w, float eps, DType out_dtype, const std::string& name);
  Value add(Value a, Value b, const std::string& name);
  Value silu(Value x, const std::string& name);
  Value mul(Value a, Value b, DType out_dtype, const std::string& name);
  Value reshape(Value x, const Shape& shape, const std::string& name);
  Value rope(Value x, Value positions, Value cos_sin, const std::string& name);
  Value kv_cache_write(Value x, Value cache, const std::string& name);
  Value attention(Value q, Value k, Value v, Value kv_mask, DType out_dtype, const std::string& name);
  Value take_last_rows(Value x, int64_t batch, const std::string& name);
  Value cast(Value x, DType dtype, const std::string& name);
  // y = x w^T with w [N, K] a Weight (packed at compile time: Linear) or a State (bound per run:
  // MatMul, for training).
  Value matmul(Value x, Value w, const std::string& name) { return linear(x, w, name); }
  Value cross_entropy(Value logits, Value labels, bool grad, const std::string& name);
  Value slice(Value x, int64_t offset, const Shape& shape, const std::string& name);
  // Appends any node (autodiff uses this with the backward ops above).
  Value append(Node n) { return add_node(std::move(n)); }

  void output(Value v) { graph_.outputs.push_back(v); }
  Graph finish();

  const Node& node(Value v) const { return graph_.node(v); }
  const Graph& graph() const { return graph_; }

 private:
  Value add_node(Node n);
  Graph graph_;
};

}  // namespace kiln::graph
