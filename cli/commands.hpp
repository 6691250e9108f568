#pragma once
// The `ktune` commands: each talks to ktuned through client/client.hpp, prints tables (or, with
// --json, the daemon's result object as one JSON document) and returns the process exit code.
//
// Exit codes: 0 ok, 1 error (daemon not running, an error reply, an I/O failure, a failed job),
// 2 usage error (bad command line), 3 not tuned (`query` answered with a fallback config).
// Errors go to `err` as "ktune: <code>: <message>"; results go to `out`. With --json every
// result is one JSON document on `out`, and an error is {"error":{"code":...,"message":...}}
// on `out` with a non-zero exit.
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::cli {

inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_error = 1;
inline constexpr int k_exit_usage = 2;
inline constexpr int k_exit_not_tuned = 3;

// Where a command writes. `err_is_tty` selects a progress line rewritten in place with '\r'
// over periodic progress lines.
struct Output {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
  bool json = false;           // --json: errors too are one JSON object on `out`
  bool error_reported = false; // report() printed an error (the JSON error object, once)
};

struct GlobalOptions {
  std::string socket;  // "" = resolve_paths(path_env_from_process()).socket
  bool json = false;   // print the daemon's result object instead of tables
};

// The end of every command's --help that has no exit codes of its own.
inline const std::string k_exit_codes_help =
    "\n\nExit codes: 0 ok, 1 error (ktuned not running, error reply, failed job), 2 usage "
    "error,\n            3 not tuned (query answered with a fallback config).";

// Parses the command line with CLI11 and runs the chosen command (the table in cli/commands.cpp;
// one file per command or command group, cli/command_table.hpp). --help prints to `io.out`
// and returns 0; a usage error prints to `io.err` and returns 2. With KTUNE_PARSE_ONLY=1 in the
// environment a command line that parses returns 0 without running (tests/cli/check_readme.py
// checks the README's command lines this way).
[[nodiscard]] int run(int argc, const char* const* argv, Output& io);

} // namespace ktune::cli
