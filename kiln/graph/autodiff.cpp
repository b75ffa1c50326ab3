#include "kiln/graph/autodiff.h"

#include "kiln/core/error.h"

namespace kiln::graph {

Graph append_backward(Graph forward, Value loss, const std::map<Value, Value>& grad_states) {
  const size_t n_fwd = forward.nodes.size();
  KILN_CHECK(loss >= 0 && size_t(loss) < n_fwd && forward.node(loss).op == Op::CrossEntropy &&
                 forward.node(loss).i0 == 1,
             "append_backward: loss must be a CrossEntropy node with gradients");
  // needs_grad[v]: v depends on a weight that has a gradient State.
  std::vector<bool> needs_grad(n_fwd, false);
  for (size_t i = 0; i < n_fwd; ++i) {
    const Node& n = forward.nodes[i];
    if (n.dead) continue;
    if (n.op == Op::State) needs_grad[i] = grad_states.count(Value(i)) > 0;
    for (Value in : n.inputs) needs_grad[i] = needs_grad[i] || needs_grad[size_t(in)];
  }

  GraphBuilder b(std::move(forward));
  std::vector<Value> grad(n_fwd, -1);
  auto accumulate = [&](Value v, Value d) {
    if (!needs_grad[size_t(v)]) return;
    grad[size_t(v)] = grad[size_t(v)] < 0 ? d : b.add(grad[size_t(v)], d, b.node(v).name + ".grad");
  };
  auto grad_state = [&](Value w) -> Value {
    auto it = grad_states.find(w);
    return it == grad_states.end() ? -1 : it->second;
  };
  // A weight as the op reads it may be a Cast of its f32 master State (bf16 autocast): the gradient
  // goes to the master's accumulator, and the backward op casts the master again rather than keep
  // the forward's cast alive from forward to backward (that would hold a bf16 copy of every weight).
  auto master_of = [&](Value w) -> Value {
    const Node& n = b.node(w);
    return n.op == Op::Cast && b.node(n.inputs[0]).op == Op::State ? n.inputs[0] : w;
  };
  auto weight_for_backward = [&](Value w, const std::string& name) -> Value {
    const Value m = master_of(w);
    return m == w ? w : b.cast(m, b.node(w).dtype, name + ".autocast");
  };
  auto side_effect = [&](Op op, std::vector<Value> inputs, const std::string& name) {
    b.append({.op = op, .inputs = std::move(inputs), .shape = {1}, .dtype = DType::f32,
              .name = name});
  };

  // The CrossEntropy output is d loss / d logits already.
  accumulate(b.node(loss).inputs[0], loss);
  for (Value i = loss - 1; i >= 0; --i) {
    const Value dy = grad[size_t(i)];
    if (dy < 0) continue;
    const Node n = b.node(i);  // a copy: appending may reallocate the node list
    const std::string gname = n.name + ".grad";
    switch (n.op) {
      case Op::Input:
      case Op::Weight:
      case Op::State:
        break;
      case Op::Embedding:
        if (grad_state(master_of(n.inputs[1])) >= 0)
          side_effect(Op::EmbeddingGrad, {n.inputs[0], dy, grad_state(master_of(n.inputs[1]))},
                      gname);
        break;
      case Op::MatMul: {
        const Value x = n.inputs[0], w = n.inputs[1];
        // A bf16 matmul's gradients are bf16 GEMMs too, as under autocast: dy is rounded to bf16
        // once (accumulation and the results stay f32), rather than widening x and w to f32 for
        // two f32 GEMMs at half the speed (the lm_head's are most of a small model's step).
        const bool bf16_mm = b.node(w).dtype == DType::bf16 && b.node(x).dtype == DType::bf16;
        const Value dy_mm = bf16_mm && b.node(dy).dtype == DType::f32
                                ? b.cast(dy, DType::bf16, gname + ".bf16")
                                : dy;
        if (needs_grad[size_t(x)])
          accumulate(x, b.append({.op = Op::MatMulGradInput,
                                  .inputs = {dy_mm, weight_for_backward(w, gname)},
                                  .shape = b.node(x).shape, .dtype = DType::f32, .name = gname}));
        if (grad_state(master_of(w)) >= 0)
          side_effect(Op::MatMulGradWeight, {dy_mm, x, grad_state(master_of(w))}, gname);
        break;
      }
      case Op::RMSNorm: {
        const Value w = n.inputs[1], g = grad_state(master_of(w));
        KILN_CHECK(g >= 0, n.name, ": RMSNorm weight has no gradient state");
        accumulate(n.inputs[0], b.append({.op = Op::RMSNormGrad,
                                          .inputs = {n.inputs[0], weight_for_backward(w, gname), dy, g},
                                          .shape = n.shape, .dtype = DType::f32, .name = gname,
                                          .eps = n.eps}));
        break;
      }
      case Op::BiasAdd:  // Qwen2's q/k/v biases, Llama's attention_bias
        accumulate(n.inputs[0], dy);
        if (grad_state(master_of(n.inputs[1])) >= 0)
          side_effect(Op::BiasAddGrad, {dy, grad_state(master_of(n.inputs[1]))}, gname);
        break;
      case Op::Add:
        accumulate(n.inputs[0], dy);
        accumulate(n.inputs[1], dy);
        break;
      case Op::SiLU:
        accumulate(n.inputs[0], b.append({.op = Op::SiLUGrad, .inputs = {n.inputs[0], dy},
                                          .shape = n.shape, .dtype = DType::f32, .name = gname}));
        break;
      case Op::Mul:
        if (needs_grad[size_t(n.inputs[0])])
          accumulate(n.inputs[0], b.mul(dy, n.inputs[1], DType::f32, gname));
        if (needs_grad[size_t(n.inputs[1])])
          accumulate(n.inputs[1], b.mul(dy, n.inputs[0], DType::f32, gname));
        break;
      case Op::Reshape:
        accumulate(n.inputs[0], b.reshape(dy, b.node(n.inputs[0]).shape, gname));
        break;
      case Op::Cast:
        accumulate(n.inputs[0], dy);
        break;
      case Op::Rope:
        accumulate(n.inputs[0],
                   b.append({.op = Op::RopeGrad, .inputs = {dy, n.inputs[1], n.inputs[2]},
                             .shape = n.shape, .dtype = DType::f32, .name = gname}));
        break;
      case Op::Attention: {
        const Value q = n.inputs[0], k = n.inputs[1], v = n.inputs[2];
        const int64_t nq = numel(b.node(q).shape), nk = numel(b.node(k).shape);
        Value flat = b.append({.op = Op::AttentionGrad, .inputs = {q, k, v, n.inputs[3], i, dy},
                               .shape = {nq + 2 * nk}, .dtype = DType::f32, .name = gname});
        accumulate(q, b.slice(flat, 0, b.node(q).shape, gname + ".q"));
        accumulate(k, b.slice(flat, nq, b.node(k).shape, gname + ".k"));
        accumulate(v, b.slice(flat, nq + nk, b.node(v).shape, gname + ".v"));
        break;
      }
      default:
        throw InternalError(std::string("autodiff: no gradient rule for op ") + op_info(n.op).name +
                            " (" + n.name + ")");
    }
  }
  return b.finish();
}

}  // namespace kiln::graph
