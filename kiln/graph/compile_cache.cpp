#include "kiln/graph/compile_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "kiln/core/error.h"

namespace kiln::graph {

std::string CompileKey::str() const {
  std::string s = function + "(";
  for (size_t i = 0; i < shapes.size(); ++i)
    s += (i ? ", " : "") + shapes[i].first + "=" + shape_str(shapes[i].second);
  return s + ") " + dtype + " " + device + (options.empty() ? "" : " " + options);
}

CompileCache::CompileCache(bool strict) : strict_(strict) {
  const char* env = std::getenv("KILN_STRICT_COMPILE");
  if (env && std::string(env) != "0" && std::string(env) != "") strict_ = true;
}

std::string CompileCache::changed_dimension(const CompileKey& key, const CompileKey& other) {
  for (const auto& [name, shape] : key.shapes) {
    for (const auto& [oname, oshape] : other.shapes) {
      if (name != oname) continue;
      if (shape.size() != oshape.size()) return name + " rank";
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] != oshape[d])
          return name + " dim " + std::to_string(d) + " (" + std::to_string(oshape[d]) + " -> " +
                 std::to_string(shape[d]) + ")";
    }
  }
  return "options or dtype";
}

std::shared_ptr<Executable> CompileCache::find(const CompileKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key.str());
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<Executable> CompileCache::get_or_compile(
    const CompileKey& key, const std::function<std::shared_ptr<Executable>()>& compile) {
  const std::string k = key.str();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      ++stats_[key.function].hits;
      return it->second;
    }
    if (strict_ && !planned_.count(k)) {
      std::string why = "no shapes were planned for it (run warmup first)";
      // Compare with the planned key of this function that differs in the fewest dimensions.
      int best = -1;
      for (const auto& [pk, p] : planned_) {
        if (p.function != key.function) continue;
        int diff = 0;
        for (const auto& [name, shape] : key.shapes)
          for (const auto& [pname, pshape] : p.shapes)
            if (name == pname)
              for (size_t d = 0; d < std::max(shape.size(), pshape.size()); ++d)
                diff += d >= shape.size() || d >= pshape.size() || shape[d] != pshape[d];
        if (best < 0 || diff < best) {
          best = diff;
          why = "it differs from the planned " + pk + " in " + changed_dimension(key, p);
        }
      }
      throw Error("strict compile",
                  "function '" + key.function + "' would compile a new shape " + k + ": " + why +
                      ". Pad inputs to a planned bucket or plan this shape with `kiln warmup`.");
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  auto exe = compile();  // outside the lock: compiles of different keys may overlap
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.emplace(k, exe);
  if (!inserted) {
    ++stats_[key.function].hits;
    return it->second;
  }
  FunctionStats& s = stats_[key.function];
  ++s.compiles;
  s.compile_ms += ms - exe->prepare_ms();
  s.pack_ms += exe->prepare_ms();
  s.arena_bytes += exe->arena_bytes();
  auto& prev = keys_by_function_[key.function];
  prev.push_back(key);
  if (int(prev.size()) > kStormThreshold && !warned_.count(key.function)) {
    warned_.insert(key.function);
    std::cerr << "kiln: warning: function '" << key.function << "' has compiled for "
              << prev.size() << " shapes; the changing dimension is "
              << changed_dimension(key, prev.front())
              << ". Pad inputs to fixed lengths or buckets (padding=\"max_length\", prompt "
                 "buckets) so one graph serves every call.\n";
  }
  return it->second;
}

void CompileCache::plan(const CompileKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  planned_.emplace(key.str(), key);
}

nlohmann::json CompileCache::stats_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [fn, s] : stats())
    j[fn] = {{"compiles", s.compiles},     {"hits", s.hits},
             {"compile_ms", s.compile_ms}, {"pack_ms", s.pack_ms},
             {"arena_bytes", s.arena_bytes}};
  return j;
}

std::map<std::string, FunctionStats> CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<CompileKey> CompileCache::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CompileKey> out;
  for (const auto& [f, ks] : keys_by_function_) out.insert(out.end(), ks.begin(), ks.end());
  return out;
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  keys_by_function_.clear();
  stats_.clear();
  warned_.clear();
}

}  // namespace kiln::graph
