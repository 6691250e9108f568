#pragma once
// Shell completion scripts generated from the CLI definition (`ktune completion bash|zsh|fish`):
// subcommands where a command is expected, a command's long and short options once '-' is typed,
// an option's choices (CLI11 IsMember) after it and nothing else after an option that takes a
// value, and where a kernel family is expected (tune, query, ... KERNEL) the families of the
// running ktuned (never started for it). The build writes them with the built ktune and installs
// them (cmake/install.cmake), so they never drift from --help.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace ktune::cli {

// Writes the completion script of `app` for `shell` ("bash", "zsh" or "fish"); false for
// another shell.
[[nodiscard]] bool write_completion(const CLI::App& app, std::string_view shell, std::ostream& out);

// `ktune completion SHELL` after add_completion_command() registered it on the app.
struct CompletionCommand {
  CLI::App* completion = nullptr;
  const CLI::App* app = nullptr;  // the whole command line, whose script is written
  std::string shell;
};
// Registers `completion` on `app`. `command` must outlive the parse.
void add_completion_command(CLI::App& app, CompletionCommand& command);
// When it was parsed: the script on io.out (exit 0); nullopt otherwise.
[[nodiscard]] std::optional<int> run_completion_command(const CompletionCommand& command,
                                                        const GlobalOptions& global, Output& io);

} // namespace ktune::cli
