// The backend interface: what a device must provide to run compiled graphs.
//
// A backend prepares per-node constants once at compile time (packed weights, primitives) and then
// runs nodes. It knows nothing of models. `supports` drives error messages and test skipping.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/graph/graph.h"

namespace kiln::graph {

// Model weights by name, plus a cache of backend-prepared forms (packed matrices) shared by every
// graph compiled for the model, so prefill and decode graphs never pack a weight twice.
class WeightStore {
 public:
  virtual ~WeightStore() = default;
  virtual Tensor get(const std::string& name) const = 0;

  // Returns the cached object for `key`, making it once. Thread-safe.
  std::shared_ptr<void> prepared(const std::string& key,
                                 const std::function<std::shared_ptr<void>()>& make);
  size_t prepared_bytes() const { return prepared_bytes_; }
  void add_prepared_bytes(size_t n) { prepared_bytes_ += n; }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<void>> prepared_;
  size_t prepared_bytes_ = 0;
};

// Per-run scalars that are not part of the compiled shape.
struct RunContext {
  int64_t slot_offset = 0;    // KV-cache slot of the first token of this call
  float loss_scale = 1.0f;    // CrossEntropy: dlogits are scaled by this
  double* loss_sum = nullptr;  // CrossEntropy adds its summed token loss here
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether run() takes op. The epilogue fusions emit their op only where this says so (a backend
  // whose kernel would just run the unfused pair leaves the pair, and its planned buffer, alone).
  virtual bool supports(Op op) const = 0;
  // Whether run() of this Attention node takes its q grouped, as the producer of q writes it where
  // the group_attention_q pass applies (graph.h: Attention), for a kernel that would otherwise
  // make that operand itself.
  virtual bool attention_takes_grouped_q(const Graph& g, const Node& attention) const {
    (void)g;
    (void)attention;
    return false;
  }
  // Called once per node at compile time; the result is handed back to run().
  virtual std::shared_ptr<void> prepare(const Graph& g, const Node& n, WeightStore& weights) = 0;
  // inputs[i] is the tensor of n.inputs[i]; out is preallocated with n's shape and dtype (for view
  // ops and in-place state ops, out already aliases the right storage).
  virtual void run(const Node& n, const void* prepared, std::span<const Tensor> inputs, Tensor& out,
                   const RunContext& ctx) = 0;
  // Calls `nodes`, which runs every node of a graph in order through run(); a backend may set
  // something up around a whole run (the CPU backend keeps its threads spinning through a decode
  // step or a prefill). spin_threads is what threads_spin() said of the graph at compile time.
  virtual void run_graph(bool spin_threads, const std::function<void()>& nodes) {
    (void)spin_threads;
    nodes();
  }
  // Whether run_graph should keep the threads spinning between the ops of g rather than start a
  // parallel region per loop; asked once per graph, at compile time.
  virtual bool threads_spin(const Graph& g, std::span<const std::shared_ptr<void>> prepared) const {
    (void)g;
    (void)prepared;
    return false;
  }
};

}  // namespace kiln::graph
