// Helpers shared by the test binaries (header only; every test target has the repo root on its
// include path, and KILN_SHARED_DIR / KILN_BINARY_DIR defined).
//
// Example:
//   for (const auto& row : kiln::test_support::tiny_golden_rows("prompt")) ...
//   int status = 0;
//   std::string out = kiln::test_support::run_command(kiln_binary + " devices 2>&1", &status);
#pragma once

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::test_support {

// The rows of ../shared/testdata/models/tiny.golden.jsonl whose "kind" is `kind` ("prompt",
// "train"), in file order. Throws, naming the file, if it is missing or has no such row: a test
// that loops over the rows must not pass by having none.
inline std::vector<nlohmann::json> tiny_golden_rows(const std::string& kind) {
  const std::string path = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny.golden.jsonl";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open " + path +
                             " (the shared/ folder beside the repo; set KILN_SHARED_DIR)");
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("kind", "") == kind) rows.push_back(std::move(j));
  }
  if (rows.empty()) throw std::runtime_error(path + ": no row of kind \"" + kind + "\"");
  return rows;
}

// Runs `cmd` through the shell and returns its standard output; *status (if given) gets pclose's
// wait status, or -1 if the command could not be started.
inline std::string run_command(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    if (status) *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  if (status) *status = st;
  return out;
}

}  // namespace kiln::test_support
