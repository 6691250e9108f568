#pragma once
// `ktune report` (cli/commands.hpp for exit codes and output conventions; report/report.hpp for
// the page):
//
//   ktune report JOBS -o report.html [--db PATH]
//       JOBS is a job id, a comma list or a range ("12", "12,15", "20-27": a sweep's jobs in one
//       report). Reads the jobs and their results from the store opened READ-ONLY (the
//       instance's database, core/paths.hpp, else --db; ktuned keeps the only read-write
//       connection, and need not be running) and writes one self-contained HTML file (temp file
//       + rename) that views offline: charts of the best time so far, the distribution of times,
//       the best and median time per parameter value (and a heat map of two parameters) and the
//       candidates by status, a table of the failed candidates with their `ktune repro` lines,
//       under a header table per job; for several jobs, the winners against shape per device.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct ReportOptions {
  std::string jobs;     // "12", "12,15", "20-27"
  std::string output;   // the HTML file to write
  std::string db;       // "" = the instance's database (core/paths.hpp)
};

// The subcommand after add_report_command() registered it on the app.
struct ReportCommand {
  CLI::App* report = nullptr;
  ReportOptions options;
};

// Registers `report` on `app`. `command` must outlive the parse.
void add_report_command(CLI::App& app, ReportCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_report_command(const ReportCommand& command, Output& io);

// Writes the report of options.jobs to options.output. Exit 0 on success; 2 for a bad job list;
// 1 when the store cannot be opened, a job is unknown or the file cannot be written.
[[nodiscard]] int write_report(const ReportOptions& options, Output& io);

} // namespace ktune::cli
