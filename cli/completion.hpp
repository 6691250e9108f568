#pragma once
// Shell completion scripts generated from the CLI definition (`ktune completion bash|zsh|fish`):
// subcommands at every level and each command's long and short options. The build writes them
// with the built ktune and installs them (cmake/install.cmake), so they never drift from --help.
#include <CLI/CLI.hpp>

#include <ostream>
#include <string_view>

namespace ktune::cli {

// Writes the completion script of `app` for `shell` ("bash", "zsh" or "fish"); false for
// another shell.
[[nodiscard]] bool write_completion(const CLI::App& app, std::string_view shell, std::ostream& out);

} // namespace ktune::cli
