#pragma once
// `ktune sweep FILE [--shard i/N] [--baseline TABLE] [--max-regression 5%] [--out TABLE]
//                   [--junit FILE] [--dry-run]`
//
// Submits every job of the sweep file (sweep/sweep_file.hpp) -- or of one shard of it -- to ktuned
// at the sweep's priority (below interactive tunes), shows one progress bar over all of them with
// an ETA on stderr, waits, and exports the winners of the sweep's keys as a JSON table
// (docs/export-format.md) to --out. With --baseline, compares them key by key (winner changed,
// time ratio; a regression only beyond --max-regression AND outside the 95% confidence
// intervals), prints a markdown summary and writes JUnit XML to --junit.
// Exit codes: 0 every job done and nothing regressed; 1 a regression, a failed job or an error;
// 2 usage. --dry-run lists the shard's jobs and submits nothing.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct SweepOptions {
  std::string file;
  std::string shard = "1/1";
  std::string baseline;
  std::string max_regression = "5%";
  std::string out;
  std::string junit;
  bool dry_run = false;
};

struct SweepCommand {
  CLI::App* command = nullptr;
  SweepOptions options;
};

// Registers `sweep` on `app`. `command` must outlive the parse.
void add_sweep_command(CLI::App& app, SweepCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_sweep_command(const SweepCommand& command,
                                                   const GlobalOptions& global, Output& io);

[[nodiscard]] int run_sweep(const GlobalOptions& global, const SweepOptions& options, Output& io);

} // namespace ktune::cli
