#pragma once
// `ktune compare CURRENT BASELINE [--max-regression 5%] [--alpha 0.01] [--junit FILE]
//                                 [--no-confirm] [--strict] [--json]`
//
// Compares two exported tables (json or T4, docs/export-format.md) key by key with the one
// comparison rule (tableio/compare.hpp): a Mann-Whitney U test on the kept samples plus a minimum
// effect size, the interval rule where a side has no samples. The keys that look changed are
// then measured as A/Bs by ktuned (cli/ab_confirm.hpp; started when it is not running), whose
// verdicts decide; --no-confirm keeps the tables' verdicts and needs no daemon. The tables'
// canary readings (provenance "canary") say how the machine moved. Prints a markdown report
// (regressions first) or, with --json, one object per key; writes JUnit XML to --junit.
// Exit codes: 0 nothing regressed; 1 a regression; 2 an error (unreadable table, bad option);
// 3 (--strict) an ambiguous key and no regression.
#include "cli/commands.hpp"
#include "core/result.hpp"
#include "tableio/compare.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

// Exit codes of the commands that judge regressions (compare, sweep).
inline constexpr int k_exit_regression = 1;
inline constexpr int k_exit_failed = 2;
inline constexpr int k_exit_ambiguous = 3;  // --strict only: an ambiguous key, no regression

struct CompareCommandOptions {
  std::string current, baseline;
  std::string max_regression = "5%";
  double alpha = 0.01;
  std::string junit;
  bool no_confirm = false;   // the tables' rule alone, no daemon
  bool strict = false;       // an ambiguous key is a failure (exit 3)
};

struct CompareCommand {
  CLI::App* command = nullptr;
  CompareCommandOptions options;
};

// "5%" -> 0.05; "0.05" -> 0.05 (a share below 1). Errors ("bad_request") name --max-regression.
[[nodiscard]] Result<double> parse_max_regression(const std::string& text);

// One object per key: key fields, presence, verdict, method, ratio, ratio interval, p-value,
// medians and sample counts.
[[nodiscard]] nlohmann::json comparison_json(const tableio::Comparison& comparison);

// Registers `compare` on `app`. `command` must outlive the parse.
void add_compare_command(CLI::App& app, CompareCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_compare_command(const CompareCommand& command,
                                                     const GlobalOptions& global, Output& io);
[[nodiscard]] int run_compare(const GlobalOptions& global, const CompareCommandOptions& options, Output& io);

} // namespace ktune::cli
