#pragma once
// Shell completion scripts generated from the CLI definition (`ktune completion bash|zsh|fish`):
// subcommands where a command is expected, a command's long and short options once '-' is typed,
// an option's choices (CLI11 IsMember) after it and nothing else after an option that takes a
// value, and where a kernel family is expected (tune, query, ... KERNEL) the families of the
// running ktuned (never started for it). The build writes them with the built ktune and installs
// them (cmake/install.cmake), so they never drift from --help.
#include <CLI/CLI.hpp>

#include <ostream>
#include <string_view>

namespace ktune::cli {

// Writes the completion script of `app` for `shell` ("bash", "zsh" or "fish"); false for
// another shell.
[[nodiscard]] bool write_completion(const CLI::App& app, std::string_view shell, std::ostream& out);

} // namespace ktune::cli
