#include "kiln/graph/graph.h"

#include <sstream>

#include "kiln/core/error.h"

namespace kiln::graph {

namespace {

constexpr OpInfo kOps[] = {
    {"Input", false, false},          {"Weight", false, false},
    {"State", false, false},          {"Embedding", false, false},
    {"Linear", false, false},         {"LinearResidual", false, false},
    {"LinearSiluMul", false, false},
    {"BiasAdd", false, false},        {"RMSNorm", false, false},
    {"Add", false, false},            {"SiLU", false, false},
    {"Mul", false, false},            {"SiluMul", false, false},
    {"SplitColumns", false, false},   {"Reshape", false, true},
    {"Rope", false, false},           {"KVCacheWrite", true, true},
    {"QKNormRopeCache", true, false}, {"LinearQKNormRopeCache", true, false},
    {"Attention", false, false},
    {"TakeLastRows", false, false},   {"Cast", false, false},
    {"MatMul", false, false},         {"CrossEntropy", true, false},
    {"Slice", false, true},           {"MatMulGradInput", false, false},
    {"MatMulGradWeight", true, false}, {"EmbeddingGrad", true, false},
    {"RMSNormGrad", true, false},     {"SiLUGrad", false, false},
    {"RopeGrad", false, false},       {"AttentionGrad", false, false},
    {"BiasAddGrad", true, false},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == size_t(Op::kCount), "op table out of sync with Op");

}  // namespace

const OpInfo& op_info(Op op) { return kOps[size_t(op)]; }

void Graph::verify() const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    for (Value in : n.inputs) {
      KILN_CHECK(in >= 0 && size_t(in) < i, function, ": node %", i, " (", op_info(n.op).name,
                 ") uses %", in, " before it is defined");
      KILN_CHECK(!nodes[size_t(in)].dead, function, ": node %", i, " uses dead node %", in);
    }
  }
  for (Value o : outputs)
    KILN_CHECK(o >= 0 && size_t(o) < nodes.size() && !nodes[size_t(o)].dead, "bad output");
}

std::string Graph::dump() const {
  std::ostringstream os;
  os << "graph " << function << "\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    os << "  %" << i << " = " << op_info(n.op).name << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << "%" << n.inputs[k];
    os << ") " << dtype_name(n.dtype) << " " << shape_str(n.shape) << "  " << n.name << "\n";
  }
  return os.str();
}

Value GraphBuilder::add_node(Node n) {
  graph_.nodes.push_back(std::move(n));
  return Value(graph_.nodes.size() - 1);
}

Value GraphBuilder::input(const std::string& name, const Shape& shape, DType dtype) {
  Value v = add_node({.op = Op::Input, .shape = shape, .dtype = dtype, .name = name});
  graph_.inputs.push_back(v);
  return v;
}

Value GraphBuilder::weight(const std::string& name, const Shape& shape, DType dtype) {
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {  // tied weights: one node per name
    const Node& n = graph_.nodes[i];
    if (n.op == Op::Weight && n.name == name) {
      KILN_CHECK(n.shape == shape && n.dtype == dtype, name, ": used with two shapes");
      return Value(i);
    }
  }
  return add_node({.op = Op::Weight, .shape = shape, .dtype = dtype, .name = name,
                   .weight_names = {name}});
}

Value GraphBuilder::state(const std::string& name, const Shape& shape, DType dtype) {
  for (Value s : graph_.states) {  // tied weights bound per run: one state per name
    const Node& n = graph_.node(s);
    if (n.name == name) {
      KILN_CHECK(n.shape == shape && n.dtype == dtype, name, ": used with two shapes");
      return s;
    }
  }
  Value v = add_node({.op = Op::State, .shape = shape, .dtype = dtype, .name = name});
  graph_.states.push_back(v);
  return v;
}

Value GraphBuilder::embedding(Value ids, Value table, const std::string& name) {
  const Node &i = node(ids), &t = node(table);
  KILN_CHECK(i.dtype == DType::i32 && t.shape.size() == 2, name);
  return add_node({.op = Op::Embedding, .inputs = {ids, table},
                   .shape = {numel(i.shape), t.shape[1]}, .dtype = DType::f32, .name = name});
}

Value GraphBuilder::linear(Value x, Value w, const std::string& name, DType out_dtype) {
  const Node &xn = node(x), &wn = node(w);
  // A State may be read through a Cast (bf16 autocast of an f32 master weight).
  const bool state =
      wn.op == Op::State || (wn.op == Op::Cast && node(wn.inputs[0]).op == Op::State);
  KILN_CHECK((wn.op == Op::Weight || state) && xn.shape.size() == 2 &&
                 wn.shape.size() == 2 && xn.shape[1] == wn.shape[1],
             name, ": x ", shape_str(xn.shape), " w ", shape_str(wn.shape));
  return add_node({.op = wn.op == Op::Weight ? Op::Linear : Op::MatMul, .inputs = {x, w},
                   .shape = {xn.shape[0], wn.shape[0]}, .dtype = out_dtype, .name = name,
                   .weight_names = wn.weight_names});
}

Value GraphBuilder::cross_entropy(Value logits, Value labels, bool grad, const std::string& name) {
  const Node &ln = node(logits), &lb = node(labels);
  KILN_CHECK(ln.shape.size() == 2 && (ln.dtype == DType::f32 || ln.dtype == DType::bf16) &&
                 lb.dtype == DType::i32 &&
                 numel(lb.shape) == ln.shape[0],
             name);
  return add_node({.op = Op::CrossEntropy, .inputs = {logits, labels},
                   .shape = grad ? ln.shape : Shape{1}, .dtype = grad ? ln.dtype : DType::f32,
                   .name = name,
                   .i0 = grad ? 1 : 0});
}

Value GraphBuilder::slice(Value x, int64_t offset, const Shape& shape, const std::string& name) {
  KILN_CHECK(offset >= 0 && offset + numel(shape) <= numel(node(x).shape), name);
  return add_node({.op = Op::Slice, .inputs = {x}, .shape = shape, .dtype = node(x).dtype,
                   .name = name, .i0 = offset});
}

Value GraphBuilder::bias_add(Value x, Value bias, const std::string& name) {
  const Node &xn = node(x), &bn = node(bias);
  KILN_CHECK(bn.shape.size() == 1 && bn.shape[0] == xn.shape.back(), name);
  return add_node({.op = Op::BiasAdd, .inputs = {x, bias}, .shape = xn.shape, .dtype = DType::f32,
                   .name = name});
}

Value GraphBuilder::rms_norm(Value x, Value w, float eps, DType out_dtype, const std::string& name) {
  const Node &xn = node(x), &wn = node(w);
  KILN_CHECK(xn.shape.size() == 2 && wn.shape.size() == 1 && wn.shape[0] == xn.shape[1], name);
  return add_node({.op = Op::RMSNorm, .inputs = {x, w}, .shape = xn.shape, .dtype = out_dtype,
                   .name = name, .eps = eps});
}

Value GraphBuilder::add(Value a, Value b, const std::string& name) {
  KILN_CHECK(node(a).shape == node(b).shape, name);
  return add_node(
      {.op = Op::Add, .inputs = {a, b}, .shape = node(a).shape, .dtype = DType::f32, .name = name});
}

Value GraphBuilder::silu(Value x, const std::string& name) {
  return add_node(
      {.op = Op::SiLU, .inputs = {x}, .shape = node(x).shape, .dtype = DType::f32, .name = name});
}

Value GraphBuilder::mul(Value a, Value b, DType out_dtype, const std::string& name) {
  KILN_CHECK(node(a).shape == node(b).shape, name);
  return add_node(
      {.op = Op::Mul, .inputs = {a, b}, .shape = node(a).shape, .dtype = out_dtype, .name = name});
}

Value GraphBuilder::reshape(Value x, const Shape& shape, const std::string& name) {
  KILN_CHECK(numel(shape) == numel(node(x).shape), name);
  return add_node(
      {.op = Op::Reshape, .inputs = {x}, .shape = shape, .dtype = node(x).dtype, .name = name});
}

Value GraphBuilder::rope(Value x, Value positions, Value cos_sin, const std::string& name) {
  const Node& xn = node(x);
  KILN_CHECK(xn.shape.size() == 4 && xn.dtype == DType::f32, name);
  return add_node({.op = Op::Rope, .inputs = {x, positions, cos_sin}, .shape = xn.shape,
                   .dtype = DType::f32, .name = name});
}

Value GraphBuilder::kv_cache_write(Value x, Value cache, const std::string& name) {
  const Node &xn = node(x), &cn = node(cache);
  KILN_CHECK(cn.op == Op::State && xn.shape.size() == 4 && cn.shape.size() == 4 &&
                 xn.shape[2] == cn.shape[2] && xn.shape[3] == cn.shape[3],
             name);
  return add_node({.op = Op::KVCacheWrite, .inputs = {cache, x}, .shape = cn.shape,
                   .dtype = cn.dtype, .name = name});
}

Value GraphBuilder::attention(Value q, Value k, Value v, Value kv_mask, DType out_dtype,
                              const std::string& name) {
  const Node &qn = node(q), &kn = node(k);
  KILN_CHECK(qn.shape.size() == 4 && kn.shape.size() == 4 && qn.shape[3] == kn.shape[3] &&
                 qn.shape[2] % kn.shape[2] == 0,
             name);
  return add_node({.op = Op::Attention, .inputs = {q, k, v, kv_mask}, .shape = qn.shape,
                   .dtype = out_dtype, .name = name});
}

Value GraphBuilder::take_last_rows(Value x, int64_t batch, const std::string& name) {
  const Node& xn = node(x);
  KILN_CHECK(xn.shape.size() == 2 && xn.shape[0] % batch == 0, name);
  return add_node({.op = Op::TakeLastRows, .inputs = {x}, .shape = {batch, xn.shape[1]},
                   .dtype = xn.dtype, .name = name, .i0 = batch});
}

Value GraphBuilder::cast(Value x, DType dtype, const std::string& name) {
  return add_node(
      {.op = Op::Cast, .inputs = {x}, .shape = node(x).shape, .dtype = dtype, .name = name});
}

Graph GraphBuilder::finish() {
  graph_.verify();
  return std::move(graph_);
}

}  // namespace kiln::graph
