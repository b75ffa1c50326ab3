// Executables: a Graph made runnable on a Backend, compiled or eager.
//
// compile(): named stages (verify, fuse_*, dead code, prepare, plan), each switchable through
// CompileOptions. The plan assigns every intermediate an offset in one arena by liveness, so a
// compiled run allocates nothing. eager(): the same graph, unfused, each op's output allocated as it
// runs; the reference path for the compiled one (tests hold them equal within rounding).
//
// Threading: an Executable runs one call at a time (it owns its arena).
//
// Example:
//   auto exe = Executable::compile(graph, backend, weights, {});
//   std::vector<Tensor> outs = exe->run({ids, positions, mask}, {k0, v0, ...}, {.slot_offset = 0});
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/backend.h"
#include "kiln/graph/graph.h"

namespace kiln::graph {

struct CompileOptions {
  bool fuse = true;  // all fusion passes
  bool fuse_linears = true, fuse_silu_mul = true, fuse_qk_norm_rope = true, fuse_residual = true;
  bool fuse_linear_epilogues = true;  // where the backend supports the fused op
  bool group_attention_q = true;      // where the backend's attention takes it
  bool plan_memory = true;
};

class Executable {
 public:
  static std::shared_ptr<Executable> compile(Graph g, Backend& backend, WeightStore& weights,
                                             const CompileOptions& options);
  static std::shared_ptr<Executable> eager(Graph g, Backend& backend, WeightStore& weights);

  // inputs follow graph.inputs order, states graph.states order. Outputs are the caller's to keep:
  // a compiled run writes each into a buffer of a small pool that no one else holds any more, so
  // a caller that lets go of the last run's outputs gets them back, written over, with no copy.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& states,
                          const RunContext& ctx);

  const Graph& graph() const { return graph_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // Time compile spent in the backend's prepare (weight packing, shared with other executables).
  double prepare_ms() const { return prepare_ms_; }
  bool compiled() const { return compiled_; }
  // Whether a run keeps the backend's threads spinning between ops (Backend::threads_spin).
  bool threads_spin() const { return spin_threads_; }

 private:
  Executable(Graph g, Backend& backend) : graph_(std::move(g)), backend_(backend) {}
  void prepare(WeightStore& weights);
  void plan();
  void bind();
  Tensor value_of(size_t node);

  Graph graph_;
  Backend& backend_;
  bool compiled_ = false;
  std::vector<std::shared_ptr<void>> prepared_;  // per node
  std::vector<Tensor> weights_;                  // per node (Weight nodes only)
  std::vector<int64_t> offset_;                  // per node: arena offset, -1 when not planned
  size_t arena_bytes_ = 0;
  Tensor arena_;
  std::vector<bool> pooled_;                     // per node: an output's storage, outside the arena
  std::vector<std::vector<Tensor>> output_pool_;  // per node: buffers of a pooled output
  static constexpr size_t kOutputPoolSize = 4;
  bool spin_threads_ = false;  // Backend::threads_spin, decided once
  // What a run hands the backend, bound once (bind): every planned value is the same view of the
  // arena on every run, so a run sets only the values in per_run_ (inputs, states, outputs,
  // unplanned values and views of them, in graph order) and the argument slots they feed.
  bool bound_ = false;
  std::vector<Tensor> values_;                          // per node
  std::vector<std::vector<Tensor>> args_;               // per node: its inputs' values
  std::vector<size_t> per_run_;
  std::vector<std::pair<size_t, size_t>> per_run_args_;  // (node, input slot)
  std::vector<size_t> compute_;                         // the nodes the backend runs, in order
  int64_t runs_ = 0;
  double prepare_ms_ = 0;
};

}  // namespace kiln::graph
