#pragma once
// `ktune history KERNEL --shape S [--dtype D] [--device cpu|cuda:N|FINGERPRINT] [--db PATH] [--json]`
//
// Reads the store read-only (ktuned need not run) and lists every finished run (a job that ended
// done) of one key, oldest first: when it finished, the source hash, its winner's median with the
// 95% interval of the kept samples, and the change points of the series (core/change_points.hpp)
// marked where the level steps. --dtype and --device may be left out when the store holds one
// of them for the kernel and shape. Exit codes: 0 listed; 1 an error (no database, no such key,
// several keys match); 2 usage.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct HistoryOptions {
  std::string kernel, shape, dtype, device, db;
};

struct HistoryCommand {
  CLI::App* command = nullptr;
  HistoryOptions options;
};

// Registers `history` on `app`. `command` must outlive the parse.
void add_history_command(CLI::App& app, HistoryCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_history_command(const HistoryCommand& command,
                                                     const GlobalOptions& global, Output& io);
[[nodiscard]] int show_history(const GlobalOptions& global, const HistoryOptions& options, Output& io);

} // namespace ktune::cli
