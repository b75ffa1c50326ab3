// The `kiln` CLI is one binary with subcommands; each subcommand lives in its own cmd_*.cpp and
// registers itself with KILN_COMMAND. Errors a user can cause are kiln::Error: main() prints them as
// one line ("kiln: error: [where] what") and exits with status 1.
//
// Example (cmd_devices.cpp):
//   KILN_COMMAND(devices, "List available devices") {
//     auto* json = std::make_shared<bool>(false);  // state outlives setup
//     cmd.add_flag("--json", *json);
//     return [json] { ...; return 0; };
//   }
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cli {

// A command's setup adds its options to `cmd` and returns the function that runs it.
using CommandRun = std::function<int()>;
using CommandSetup = std::function<CommandRun(CLI::App& cmd)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* description, CommandSetup setup) {
    command_registry().push_back({name, description, std::move(setup)});
  }
};

}  // namespace kiln::cli

#define KILN_COMMAND(name, description)                                               \
  static ::kiln::cli::CommandRun kiln_command_setup_##name(CLI::App& cmd);            \
  static ::kiln::cli::CommandRegistrar kiln_command_registrar_##name(                 \
      #name, description, kiln_command_setup_##name);                                 \
  static ::kiln::cli::CommandRun kiln_command_setup_##name(CLI::App& cmd)
