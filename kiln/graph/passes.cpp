#include "kiln/graph/passes.h"

#include <functional>
#include <map>

#include "kiln/core/error.h"

namespace kiln::graph {

namespace {

// Rebuilds a graph node by node. For each old node, `visit` either emits replacement nodes and
// returns the value that stands for the old one, returns kSkip to drop it, or returns kCopy to copy
// it with remapped inputs. A copied node whose inputs were dropped is dropped too (it was dead).
constexpr Value kCopy = -2;
constexpr Value kSkip = -1;

struct Rewriter {
  explicit Rewriter(const Graph& g) : old(g), remap(g.nodes.size(), kSkip) {
    out.function = g.function;
  }
  Value emit(Node n) {
    out.nodes.push_back(std::move(n));
    return Value(out.nodes.size() - 1);
  }
  Value map(Value v) const { return remap[size_t(v)]; }

  Graph run(const std::function<Value(Value, const Node&)>& visit) {
    for (size_t i = 0; i < old.nodes.size(); ++i) {
      const Node& n = old.nodes[i];
      if (n.dead) continue;
      Value r = visit(Value(i), n);
      if (r == kCopy) {
        Node c = n;
        bool ok = true;
        for (Value& in : c.inputs) {
          in = map(in);
          ok = ok && in >= 0;
        }
        r = ok ? emit(std::move(c)) : kSkip;
      }
      remap[i] = r;
    }
    for (Value v : old.inputs) out.inputs.push_back(map(v));
    for (Value v : old.states) out.states.push_back(map(v));
    for (Value v : old.outputs) {
      KILN_CHECK(map(v) >= 0, "pass dropped an output");
      out.outputs.push_back(map(v));
    }
    out.verify();
    return std::move(out);
  }

  const Graph& old;
  Graph out;
  std::vector<Value> remap;
};

std::vector<std::vector<Value>> users_of(const Graph& g) {
  std::vector<std::vector<Value>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].dead) continue;
    for (Value in : g.nodes[i].inputs) users[size_t(in)].push_back(Value(i));
  }
  for (Value o : g.outputs) users[size_t(o)].push_back(-1);  // outputs count as a use
  return users;
}

bool is(const Graph& g, Value v, Op op) { return v >= 0 && g.node(v).op == op; }

}  // namespace

Graph fuse_sibling_linears(const Graph& g) {
  // Group Linear nodes by their input x; groups of two or more fuse.
  std::map<Value, std::vector<Value>> by_input;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.dead && n.op == Op::Linear) by_input[n.inputs[0]].push_back(Value(i));
  }
  struct Member {
    Value first;
    int64_t offset;
  };
  std::map<Value, Member> member;
  for (const auto& [x, group] : by_input) {
    if (group.size() < 2) continue;
    int64_t offset = 0;
    for (Value v : group) {
      member[v] = {group.front(), offset};
      offset += g.node(v).shape[1];
    }
  }
  std::map<Value, Value> fused_of;  // first member (old) -> fused node (new)
  Rewriter rw(g);
  return rw.run([&](Value i, const Node& n) -> Value {
    auto m = member.find(i);
    if (m == member.end()) return kCopy;
    if (m->second.first == i) {
      const auto& group = by_input[n.inputs[0]];
      Node f{.op = Op::Linear, .inputs = {rw.map(n.inputs[0])}, .dtype = DType::f32};
      int64_t cols = 0;
      // Weights are bound by name (weight_names); the later members' Weight nodes may come after
      // this position, so the fused node does not take them as inputs.
      for (Value v : group) {
        const Node& part = g.node(v);
        f.weight_names.insert(f.weight_names.end(), part.weight_names.begin(),
                              part.weight_names.end());
        cols += part.shape[1];
        f.name += (f.name.empty() ? "" : "+") + part.name;
      }
      f.shape = {n.shape[0], cols};
      fused_of[i] = rw.emit(std::move(f));
    }
    return rw.emit({.op = Op::SplitColumns, .inputs = {fused_of.at(m->second.first)},
                    .shape = n.shape, .dtype = DType::f32, .name = n.name,
                    .i0 = m->second.offset, .i1 = n.shape[1]});
  });
}

Graph fuse_silu_mul(const Graph& g) {
  Rewriter rw(g);
  return rw.run([&](Value, const Node& n) -> Value {
    if (n.op != Op::Mul) return kCopy;
    Value s = n.inputs[0], up = n.inputs[1];
    if (!is(g, s, Op::SiLU) || !is(g, up, Op::SplitColumns)) return kCopy;
    Value gate = g.node(s).inputs[0];
    if (!is(g, gate, Op::SplitColumns)) return kCopy;
    const Node &gn = g.node(gate), &un = g.node(up);
    Value f = gn.inputs[0];
    const int64_t inter = gn.i1;
    if (un.inputs[0] != f || gn.i0 != 0 || un.i0 != inter || un.i1 != inter ||
        g.node(f).shape[1] != 2 * inter)
      return kCopy;
    return rw.emit({.op = Op::SiluMul, .inputs = {rw.map(f)}, .shape = n.shape, .dtype = n.dtype,
                    .name = n.name});
  });
}

Graph fuse_qk_norm_rope(const Graph& g) {
  // Matches, per attention node:
  //   q: SplitColumns(F, 0) -> Reshape -> [RMSNorm -> Reshape] -> Rope
  //   k: SplitColumns(F, Nq) -> Reshape -> [RMSNorm -> Reshape] -> Rope -> KVCacheWrite(k_cache)
  //   v: SplitColumns(F, Nq+Nk) -> Reshape -> KVCacheWrite(v_cache)
  struct Chain {
    Value split = -1, norm_w = -1, positions = -1, cos_sin = -1;
    float eps = 0;
  };
  auto rope_chain = [&](Value v, Chain& c) -> bool {
    if (!is(g, v, Op::Rope)) return false;
    const Node& r = g.node(v);
    c.positions = r.inputs[1];
    c.cos_sin = r.inputs[2];
    Value x = r.inputs[0];
    if (!is(g, x, Op::Reshape)) return false;
    x = g.node(x).inputs[0];
    if (is(g, x, Op::RMSNorm)) {
      const Node& nn = g.node(x);
      if (nn.dtype != DType::f32) return false;
      c.norm_w = nn.inputs[1];
      c.eps = nn.eps;
      x = nn.inputs[0];
      if (!is(g, x, Op::Reshape)) return false;
      x = g.node(x).inputs[0];
    }
    if (!is(g, x, Op::SplitColumns)) return false;
    c.split = x;
    return true;
  };
  std::map<Value, Node> replace;  // attention (old) -> fused prologue node (inputs in old values)
  std::map<Value, bool> drop;     // KVCacheWrite nodes absorbed into the fused op
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& a = g.nodes[i];
    if (a.dead || a.op != Op::Attention) continue;
    Chain q, k;
    if (!rope_chain(a.inputs[0], q)) continue;
    Value kw = a.inputs[1], vw = a.inputs[2];
    if (!is(g, kw, Op::KVCacheWrite) || !is(g, vw, Op::KVCacheWrite)) continue;
    if (!rope_chain(g.node(kw).inputs[1], k)) continue;
    Value vr = g.node(vw).inputs[1];
    if (!is(g, vr, Op::Reshape) || !is(g, g.node(vr).inputs[0], Op::SplitColumns)) continue;
    Value vs = g.node(vr).inputs[0];
    const Node &qs = g.node(q.split), &ks = g.node(k.split), &vsn = g.node(vs);
    Value f = qs.inputs[0];
    if (ks.inputs[0] != f || vsn.inputs[0] != f || qs.i0 != 0 || ks.i0 != qs.i1 ||
        vsn.i0 != qs.i1 + ks.i1 || vsn.i0 + vsn.i1 != g.node(f).shape[1])
      continue;
    if ((q.norm_w < 0) != (k.norm_w < 0) || q.positions != k.positions || q.cos_sin != k.cos_sin)
      continue;
    Node fused{.op = Op::QKNormRopeCache,
               .inputs = {f, q.positions, q.cos_sin, g.node(kw).inputs[0], g.node(vw).inputs[0]},
               .shape = g.node(a.inputs[0]).shape, .dtype = DType::f32,
               .name = a.name + ".qk_norm_rope_cache", .eps = q.eps};
    if (q.norm_w >= 0) {
      fused.inputs.push_back(q.norm_w);
      fused.inputs.push_back(k.norm_w);
    }
    replace[Value(i)] = fused;
    drop[kw] = drop[vw] = true;
  }
  Rewriter rw(g);
  return rw.run([&](Value i, const Node& n) -> Value {
    if (drop.count(i)) return kSkip;
    auto it = replace.find(i);
    if (it == replace.end()) return kCopy;
    Node fused = it->second;
    for (Value& in : fused.inputs) in = rw.map(in);
    Value q = rw.emit(std::move(fused));
    // The attention now reads the cache states the fused op wrote.
    Node a = n;
    a.inputs = {q, rw.map(g.node(n.inputs[1]).inputs[0]), rw.map(g.node(n.inputs[2]).inputs[0]),
                rw.map(n.inputs[3])};
    return rw.emit(std::move(a));
  });
}

Graph fuse_linear_epilogues(const Graph& g, const std::function<bool(Op)>& supported) {
  auto users = users_of(g);
  Rewriter rw(g);
  return rw.run([&](Value, const Node& n) -> Value {
    const Op fused = n.op == Op::SiluMul           ? Op::LinearSiluMul
                     : n.op == Op::QKNormRopeCache ? Op::LinearQKNormRopeCache
                                                   : Op::kCount;
    if (fused == Op::kCount || !supported(fused)) return kCopy;
    Value lin = n.inputs[0];
    // A bf16 x only: the epilogues are the bf16 GEMM's (an f32 model keeps the reference path). A
    // projection that something else reads (training's backward) stays stored.
    if (!is(g, lin, Op::Linear) || users[size_t(lin)].size() != 1) return kCopy;
    const Node& l = g.node(lin);
    if (g.node(l.inputs[0]).dtype != DType::bf16) return kCopy;
    Node f = n;  // the epilogue's attributes and its other inputs, x in place of the projection
    f.op = fused;
    f.inputs[0] = l.inputs[0];
    for (Value& in : f.inputs) in = rw.map(in);
    f.name = l.name + "+" + n.name;
    f.weight_names = l.weight_names;
    return rw.emit(std::move(f));
  });
}

Graph fuse_residual(const Graph& g) {
  auto users = users_of(g);
  Rewriter rw(g);
  return rw.run([&](Value, const Node& n) -> Value {
    if (n.op != Op::Add) return kCopy;
    for (int side = 0; side < 2; ++side) {
      Value lin = n.inputs[size_t(side)], res = n.inputs[size_t(1 - side)];
      if (!is(g, lin, Op::Linear) || users[size_t(lin)].size() != 1) continue;
      if (g.node(res).dtype != DType::f32) continue;
      const Node& l = g.node(lin);
      Node f{.op = Op::LinearResidual, .inputs = {rw.map(l.inputs[0]), rw.map(res)},
             .shape = n.shape, .dtype = DType::f32, .name = l.name + "+residual",
             .weight_names = l.weight_names};
      return rw.emit(std::move(f));
    }
    return kCopy;
  });
}

Graph group_attention_q(const Graph& g,
                        const std::function<bool(const Graph&, const Node&)>& takes) {
  auto users = users_of(g);
  std::map<Value, Value> grouped;  // q producer -> its Attention
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& a = g.nodes[i];
    if (a.dead || a.op != Op::Attention) continue;
    const Value q = a.inputs[0];
    if ((is(g, q, Op::QKNormRopeCache) || is(g, q, Op::LinearQKNormRopeCache)) &&
        users[size_t(q)].size() == 1 && g.node(q).shape.size() == 4 && takes(g, a))
      grouped[q] = Value(i);
  }
  Rewriter rw(g);
  return rw.run([&](Value i, const Node& n) -> Value {
    auto it = grouped.find(i);
    if (it == grouped.end()) return kCopy;
    Node p = n;
    for (Value& in : p.inputs) in = rw.map(in);
    // [B, T, Hq, D] -> [B, Hkv, T, G, D], Hkv from the attention's k [B, L, Hkv, D].
    const int64_t hkv = g.node(g.node(it->second).inputs[1]).shape.at(2);
    p.shape = {n.shape[0], hkv, n.shape[1], n.shape[2] / hkv, n.shape[3]};
    p.dtype = DType::bf16;
    return rw.emit(std::move(p));
  });
}

Graph eliminate_dead_code(const Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (Value o : g.outputs) live[size_t(o)] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].dead && op_info(g.nodes[i].op).side_effects) live[i] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (Value in : g.nodes[i].inputs) live[size_t(in)] = true;
  }
  // Inputs and states stay: callers bind them by position.
  for (Value v : g.inputs) live[size_t(v)] = true;
  for (Value v : g.states) live[size_t(v)] = true;
  Rewriter rw(g);
  return rw.run([&](Value i, const Node&) { return live[size_t(i)] ? kCopy : kSkip; });
}

}  // namespace kiln::graph
