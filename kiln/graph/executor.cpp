#include "kiln/graph/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "kiln/core/error.h"
#include "kiln/graph/passes.h"

namespace kiln::graph {

std::shared_ptr<void> WeightStore::prepared(const std::string& key,
                                            const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prepared_.find(key);
  if (it != prepared_.end()) return it->second;
  auto p = make();
  prepared_[key] = p;
  return p;
}

namespace {

constexpr size_t kAlign = 64;

size_t node_bytes(const Node& n) {
  size_t b = size_t(numel(n.shape)) * dtype_size(n.dtype);
  return (b + kAlign - 1) / kAlign * kAlign;
}

// KILN_PROFILE=1: time every op of every run but an executable's first (which pays the first touch
// of its arena) and print, at exit, the time per run of each (function, op) to stderr, slowest
// first. For finding where a step's time goes; off, it costs one branch per run.
class OpProfile {
 public:
  static OpProfile* get() {
    static OpProfile* profile = [] {
      const char* env = std::getenv("KILN_PROFILE");
      return env && env[0] && env[0] != '0' ? new OpProfile() : nullptr;
    }();
    return profile;
  }
  // Linears are told apart by their weight's shape (N x K), as shapes run at different speeds.
  void add(const std::string& function, const Node& node, const std::vector<Tensor>& args,
           double seconds) {
    char shape[48] = "";
    if ((node.op == Op::Linear || node.op == Op::LinearResidual ||
         node.op == Op::LinearSiluMul) && !node.shape.empty() &&
        !args.empty() && !args[0].shape().empty())
      std::snprintf(shape, sizeof(shape), " %lldx%lld", static_cast<long long>(node.shape.back()),
                    static_cast<long long>(args[0].shape().back()));
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[function + " " + op_info(node.op).name + shape];
    e.seconds += seconds;
    e.calls += 1;
  }
  void add_run(const std::string& function) {
    std::lock_guard<std::mutex> lock(mu_);
    runs_[function] += 1;
  }

 private:
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  OpProfile() {
    std::atexit([] { get()->print(); });
  }
  void print() {
    std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "KILN_PROFILE: op time per run (function op: ms per run, calls per run)\n");
    for (const auto& [name, e] : rows) {
      const int64_t runs = std::max<int64_t>(1, runs_[name.substr(0, name.find(' '))]);
      std::fprintf(stderr, "  %-44s %9.3f ms %6.1f calls\n", name.c_str(), 1e3 * e.seconds / runs,
                   double(e.calls) / runs);
    }
  }
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, int64_t> runs_;
};

bool is_leaf(Op op) { return op == Op::Input || op == Op::Weight || op == Op::State; }

// The node whose storage `v` lives in (views and in-place state writes alias their first input).
Value storage_root(const Graph& g, Value v) {
  while (op_info(g.node(v).op).view) v = g.node(v).inputs[0];
  return v;
}

}  // namespace

std::shared_ptr<Executable> Executable::compile(Graph g, Backend& backend, WeightStore& weights,
                                                const CompileOptions& o) {
  g.verify();
  if (o.fuse) {
    if (o.fuse_linears) g = fuse_sibling_linears(g);
    if (o.fuse_silu_mul) g = fuse_silu_mul(g);
    if (o.fuse_qk_norm_rope) g = fuse_qk_norm_rope(g);
    g = eliminate_dead_code(g);
    // (After dead code: the splits SiluMul replaced would still count as the gate_up's users.)
    if (o.fuse_linear_epilogues)
      g = fuse_linear_epilogues(g, [&](Op op) { return backend.supports(op); });
    if (o.fuse_residual) g = fuse_residual(g);
    if (o.group_attention_q)
      g = group_attention_q(g, [&](const Graph& graph, const Node& attention) {
        return backend.attention_takes_grouped_q(graph, attention);
      });
  }
  g = eliminate_dead_code(g);
  auto exe = std::shared_ptr<Executable>(new Executable(std::move(g), backend));
  exe->compiled_ = true;
  exe->prepare(weights);
  if (o.plan_memory) exe->plan();
  return exe;
}

std::shared_ptr<Executable> Executable::eager(Graph g, Backend& backend, WeightStore& weights) {
  g.verify();
  auto exe = std::shared_ptr<Executable>(new Executable(std::move(g), backend));
  exe->prepare(weights);
  return exe;
}

void Executable::prepare(WeightStore& weights) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = graph_.nodes.size();
  prepared_.assign(n, nullptr);
  weights_.assign(n, Tensor());
  offset_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = graph_.nodes[i];
    if (!backend_.supports(node.op))
      throw Error("device", std::string("backend '") + backend_.name() + "' does not support op " +
                                op_info(node.op).name);
    if (node.op == Op::Weight) {
      weights_[i] = weights.get(node.weight_names.at(0));
      KILN_CHECK(weights_[i].shape() == node.shape, node.name, ": weight is ",
                 shape_str(weights_[i].shape()), ", graph expects ", shape_str(node.shape));
    }
    prepared_[i] = backend_.prepare(graph_, node, weights);
  }
  spin_threads_ = backend_.threads_spin(graph_, prepared_);
  prepare_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void Executable::plan() {
  // Liveness by storage root: a buffer lives from its definition to the last use of any alias.
  const size_t n = graph_.nodes.size();
  std::vector<int64_t> last_use(n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (Value in : graph_.nodes[i].inputs) {
      Value r = storage_root(graph_, in);
      last_use[size_t(r)] = std::max<int64_t>(last_use[size_t(r)], int64_t(i));
    }
  }
  // Outputs live outside the arena, in buffers the caller may keep (value_of).
  pooled_.assign(n, false);
  output_pool_.assign(n, {});
  for (Value o : graph_.outputs) {
    const Value r = storage_root(graph_, o);
    if (!is_leaf(graph_.node(r).op)) pooled_[size_t(r)] = true;
  }

  struct Buffer {
    size_t node, bytes;
    int64_t begin, end;
    size_t offset = 0;
  };
  std::vector<Buffer> buffers;
  for (size_t i = 0; i < n; ++i) {
    const Node& node = graph_.nodes[i];
    if (is_leaf(node.op) || op_info(node.op).view || pooled_[i]) continue;
    buffers.push_back({i, node_bytes(node), int64_t(i), std::max<int64_t>(last_use[i], int64_t(i))});
  }
  // Greedy by size: each buffer takes the lowest offset that does not overlap a placed buffer with
  // an intersecting lifetime.
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t bi : order) {
    Buffer& b = buffers[bi];
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t pi : placed) {
      const Buffer& p = buffers[pi];
      if (p.begin <= b.end && b.begin <= p.end) busy.emplace_back(p.offset, p.offset + p.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + b.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    total = std::max(total, offset + b.bytes);
    placed.push_back(bi);
  }
  for (const Buffer& b : buffers) offset_[b.node] = int64_t(b.offset);
  arena_bytes_ = total;
  arena_ = Tensor::empty({int64_t(std::max<size_t>(total, kAlign))}, DType::boolean);
}

void Executable::bind() {
  const size_t n = graph_.nodes.size();
  values_.assign(n, Tensor());
  args_.assign(n, {});
  per_run_.clear();
  per_run_args_.clear();
  compute_.clear();
  std::vector<bool> changes(n, false);  // the node's value differs from run to run
  for (size_t i = 0; i < n; ++i) {
    const Node& node = graph_.nodes[i];
    const bool view = op_info(node.op).view;
    if (view)
      changes[i] = changes[size_t(node.inputs[0])];
    else
      changes[i] = node.op == Op::Input || node.op == Op::State ||
                   (node.op != Op::Weight && offset_[i] < 0);  // outside the arena
    if (changes[i]) per_run_.push_back(i);
    if (is_leaf(node.op)) {
      if (node.op == Op::Weight) values_[i] = weights_[i];
      continue;
    }
    compute_.push_back(i);
    args_[i].resize(node.inputs.size());
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const size_t in = size_t(node.inputs[k]);
      if (changes[in]) per_run_args_.emplace_back(i, k);
      else args_[i][k] = values_[in];
    }
    if (!changes[i]) values_[i] = value_of(i);
  }
  bound_ = true;
}

Tensor Executable::value_of(size_t i) {
  const Node& node = graph_.nodes[i];
  if (op_info(node.op).view) {
    // A view keeps its input's bytes: a weight bound in its stored dtype must not get here.
    const Tensor& in = values_[size_t(node.inputs[0])];
    KILN_CHECK(in.dtype() == node.dtype, node.name, ": a ", dtype_name(node.dtype), " view of ",
               dtype_name(in.dtype()), " data");
    const size_t skip = node.op == Op::Slice ? size_t(node.i0) * dtype_size(node.dtype) : 0;
    return Tensor(in.storage(), in.offset() + skip, node.shape, node.dtype);
  }
  if (offset_[i] >= 0) return Tensor(arena_.storage(), size_t(offset_[i]), node.shape, node.dtype);
  if (!pooled_.empty() && pooled_[i]) {
    // An output: a buffer of this node's pool that nobody holds any more, else a new one.
    std::vector<Tensor>& pool = output_pool_[i];
    for (const Tensor& t : pool)
      if (t.storage().use_count() == 1) return t;
    Tensor t = Tensor::empty(node.shape, node.dtype);
    if (pool.size() < kOutputPoolSize) pool.push_back(t);
    return t;
  }
  return Tensor::empty(node.shape, node.dtype);
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& states, const RunContext& ctx) {
  KILN_CHECK(inputs.size() == graph_.inputs.size() && states.size() == graph_.states.size(),
             graph_.function, ": wrong number of inputs or states");
  if (!bound_) bind();
  // Drops this run's values however it ends, so that nothing keeps a caller's tensors or an
  // output the caller let go of.
  struct Unbind {
    Executable& e;
    ~Unbind() {
      for (size_t i : e.per_run_) e.values_[i] = Tensor();
      for (const auto& [i, k] : e.per_run_args_) e.args_[i][k] = Tensor();
    }
  } unbind{*this};
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Node& node = graph_.node(graph_.inputs[k]);
    KILN_CHECK(inputs[k].shape() == node.shape && inputs[k].dtype() == node.dtype,
               graph_.function, ": input ", node.name, " is ", shape_str(inputs[k].shape()),
               " ", dtype_name(inputs[k].dtype()), ", compiled for ", shape_str(node.shape), " ",
               dtype_name(node.dtype));
    values_[size_t(graph_.inputs[k])] = inputs[k];
  }
  for (size_t k = 0; k < states.size(); ++k) {
    const Node& node = graph_.node(graph_.states[k]);
    KILN_CHECK(states[k].shape() == node.shape && states[k].dtype() == node.dtype,
               graph_.function, ": state ", node.name, " is ", shape_str(states[k].shape()),
               ", compiled for ", shape_str(node.shape));
    values_[size_t(graph_.states[k])] = states[k];
  }
  for (size_t i : per_run_) {
    const Op op = graph_.nodes[i].op;
    if (op != Op::Input && op != Op::State) values_[i] = value_of(i);
  }
  for (const auto& [i, k] : per_run_args_) args_[i][k] = values_[size_t(graph_.nodes[i].inputs[k])];
  OpProfile* profile = runs_++ > 0 ? OpProfile::get() : nullptr;
  if (profile) profile->add_run(graph_.function);
  backend_.run_graph(spin_threads_, [&] {
    for (size_t i : compute_) {
      const Node& node = graph_.nodes[i];
      if (profile) {
        const auto t0 = std::chrono::steady_clock::now();
        backend_.run(node, prepared_[i].get(), args_[i], values_[i], ctx);
        profile->add(graph_.function, node, args_[i],
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      } else {
        backend_.run(node, prepared_[i].get(), args_[i], values_[i], ctx);
      }
    }
  });
  std::vector<Tensor> outs;
  for (Value o : graph_.outputs) outs.push_back(values_[size_t(o)]);
  return outs;
}

}  // namespace kiln::graph
