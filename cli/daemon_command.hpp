#pragma once
// `ktune daemon start|stop|status|log` (cli/commands.hpp for exit codes and output conventions).
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct DaemonStartOptions {
  std::string config;                 // "" = ktuned's default
  std::vector<std::string> kernel_dirs;       // added to the shipped families
  std::vector<std::string> only_kernel_dirs;  // instead of them
};

// `daemon start`: returns 0 when a daemon answers (already running or started and ready).
// The daemon binary is $KTUNE_DAEMON, else `ktuned` next to this executable.
[[nodiscard]] int daemon_start(const GlobalOptions& global, const DaemonStartOptions& options,
                               Output& io);
// `daemon stop`: 0 once the socket stops answering (or nothing was running), 1 after 10 s.
[[nodiscard]] int daemon_stop(const GlobalOptions& global, Output& io);
// `daemon status`: 1 when ktuned is not running.
[[nodiscard]] int daemon_status(const GlobalOptions& global, Output& io);
// `daemon log`: the last `lines` lines of the instance's ktuned.log; `follow` keeps printing
// what is appended until interrupted.
[[nodiscard]] int daemon_log(const GlobalOptions& global, std::int64_t lines, bool follow,
                             Output& io);

// The `daemon` group after add_daemon_commands() registered it on the app.
struct DaemonCommands {
  CLI::App* start = nullptr;
  CLI::App* stop = nullptr;
  CLI::App* status = nullptr;
  CLI::App* log = nullptr;
  DaemonStartOptions start_options;
  std::int64_t log_lines = 50;
  bool log_follow = false;
};
// Registers `daemon` and its subcommands on `app`. `commands` must outlive the parse.
void add_daemon_commands(CLI::App& app, DaemonCommands& commands);
// Runs whichever of them was parsed; nullopt when none was.
[[nodiscard]] std::optional<int> run_daemon_commands(const DaemonCommands& commands,
                                                     const GlobalOptions& global, Output& io);

} // namespace ktune::cli
