#include <algorithm>
#include <iostream>

#include "kiln/core/error.h"
#include "tools/cli/command.h"

namespace kiln::cli {

std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"kiln: run and train Hugging Face causal language models"};
  app.require_subcommand(1);
  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandInfo& a, const CommandInfo& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, CommandRun>> runs;
  for (auto& info : registry) {
    CLI::App* sub = app.add_subcommand(info.name, info.description);
    runs.emplace_back(sub, info.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
