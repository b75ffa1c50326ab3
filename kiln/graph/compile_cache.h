// The compile cache: one Executable per key, compiled once (DESIGN.md, "The compile model").
//
// A key is the function (prefill, decode, score, ...), every input's name, shape and dtype, the
// device and the options. Counters per function are public (compiles, hits, compile milliseconds).
// When one function compiles for more than kStormThreshold keys, one warning names the input and
// dimension that keeps changing and the fix. In strict mode (option, or KILN_STRICT_COMPILE=1) any
// compile of a key that was not planned (see plan()) is a kiln::Error naming the input and dimension.
//
// Example:
//   auto exe = cache.get_or_compile(key, [&] { return build_graph(); }, compile_fn);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/graph/executor.h"

namespace kiln::graph {

struct CompileKey {
  std::string function;
  std::vector<std::pair<std::string, Shape>> shapes;  // named inputs and states that set the shape
  std::string dtype;
  std::string device;
  std::string options;
  std::string str() const;
  bool operator<(const CompileKey& o) const { return str() < o.str(); }
};

struct FunctionStats {
  int64_t compiles = 0;
  int64_t hits = 0;
  double compile_ms = 0;  // tracing, passes, memory plan (weight packing not included)
  double pack_ms = 0;     // backend weight preparation (packing) first needed by these compiles
  size_t arena_bytes = 0;  // the compiled executables' activation arenas, summed
};

class CompileCache {
 public:
  static constexpr int kStormThreshold = 8;

  explicit CompileCache(bool strict = false);

  std::shared_ptr<Executable> get_or_compile(
      const CompileKey& key, const std::function<std::shared_ptr<Executable>()>& compile);

  // Declares keys as planned (kiln warmup); strict mode refuses every other key.
  void plan(const CompileKey& key);
  void set_strict(bool strict) { strict_ = strict; }
  bool strict() const { return strict_; }

  std::map<std::string, FunctionStats> stats() const;
  // {function: {compiles, hits, compile_ms, pack_ms, arena_bytes}}, for --stats and --json.
  nlohmann::json stats_json() const;
  std::vector<CompileKey> keys() const;
  // The executable compiled for `key`, or null; unlike get_or_compile, counts no hit.
  std::shared_ptr<Executable> find(const CompileKey& key) const;
  void clear();

 private:
  // "input_ids dim 1 (32 -> 64)": the first input dimension where `key` differs from `other`.
  static std::string changed_dimension(const CompileKey& key, const CompileKey& other);

  mutable std::mutex mu_;
  bool strict_;
  std::map<std::string, std::shared_ptr<Executable>> entries_;
  std::map<std::string, std::vector<CompileKey>> keys_by_function_;
  std::map<std::string, CompileKey> planned_;
  std::map<std::string, FunctionStats> stats_;
  std::set<std::string> warned_;
};

}  // namespace kiln::graph
