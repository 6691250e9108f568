#pragma once
// `ktune tune KERNEL --shape ... [--wait]` (cli/commands.hpp for exit codes and output
// conventions).
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ktune::cli {

struct TuneOptions {
  std::string kernel;
  std::string shape;
  std::string dtype = "f32";
  std::string device = "cpu";
  std::string strategy = "exhaustive";
  std::optional<std::int64_t> budget;        // evaluations ...
  std::optional<double> budget_fraction;     // ... or a share of the admitted configs
  std::optional<double> budget_s;            // ... or seconds of the job's run time
  std::optional<std::int64_t> seed;          // the strategy's seed
  bool remeasure = false;                    // measure configs that already have a result again
  bool wait = false;
  bool retry_failed = false;                 // run quarantined configs again
  bool cold = false;                         // search without the store's earlier results
  std::optional<double> compile_timeout_s;   // per-job deadlines; unset = ktuned's settings
  std::optional<double> bench_timeout_s;
};

// "--budget" text: "30" (evaluations), "10%" (share of the admitted configs) or "60s" (seconds of
// the job's compile and bench time). Errors (code "bad_budget") say what was expected.
[[nodiscard]] Result<void> parse_budget_option(const std::string& text, TuneOptions& options);

// `tune`: with `wait`, 0 only when the job finished with a winner.
[[nodiscard]] int tune(const GlobalOptions& global, const TuneOptions& options, Output& io);

// The subcommand after add_tune_command() registered it on the app.
struct TuneCommand {
  CLI::App* tune = nullptr;
  CLI::Option* budget_option = nullptr;
  std::string budget;  // --budget as typed; check_tune_command() parses it into `options`
  TuneOptions options;
};
// Registers `tune` on `app`. `command` must outlive the parse.
void add_tune_command(CLI::App& app, TuneCommand& command);
// After the parse: a --budget that parse_budget_option refuses is a usage error (exit 2).
[[nodiscard]] std::optional<int> check_tune_command(TuneCommand& command, Output& io);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_tune_command(const TuneCommand& command,
                                                  const GlobalOptions& global, Output& io);

} // namespace ktune::cli
