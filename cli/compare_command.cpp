#include "cli/compare_command.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/output_file.hpp"
#include "replay/file_reader.hpp"
#include "tableio/formats.hpp"

#include <charconv>

namespace ktune::cli {

namespace {

using nlohmann::json;

Result<tableio::Table> read_table_file(const std::string& path) {
  auto text = replay::read_text_file(path);
  if (!text) return text.error();
  return tableio::read_table(*text, path);
}

json optional_number(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json interval_json(const std::optional<tableio::Interval>& interval) {
  return interval ? json::array({interval->low, interval->high}) : json(nullptr);
}

} // namespace

Result<double> parse_max_regression(const std::string& text) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  double value = -1;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec == std::errc() && end == number.data() + number.size() && value >= 0) {
    if (percent) return value / 100.0;
    if (value < 1) return value;
  }
  return make_error(ErrorCode::bad_request, "--max-regression: expected a share like 5% (or 0.05), found '" +
                                       text + "'");
}

json comparison_json(const tableio::Comparison& comparison) {
  json keys = json::array();
  for (const auto& k : comparison.keys) {
    keys.push_back({{"kernel", k.key.kernel},
                    {"shape", k.key.shape},
                    {"dtype", k.key.dtype},
                    {"fingerprint", k.key.fingerprint},
                    {"source_hash", k.key.source_hash},
                    {"presence", tableio::to_string(k.presence)},
                    {"verdict", tableio::to_string(k.verdict)},
                    {"method", tableio::to_string(k.method)},
                    {"ratio", optional_number(k.ratio)},
                    {"ratio_interval", interval_json(k.ratio_ci)},
                    {"p_value", optional_number(k.p_value)},
                    {"current_ms", k.current ? json(k.current->median_ms) : json(nullptr)},
                    {"baseline_ms", k.baseline ? json(k.baseline->median_ms) : json(nullptr)},
                    {"current_samples", k.current_samples},
                    {"baseline_samples", k.baseline_samples},
                    {"winner_changed", k.winner_changed},
                    {"baseline_runs", k.baseline_runs},
                    {"baseline_range_ms", interval_json(k.baseline_range)},
                    {"first_ratio", optional_number(k.first_ratio)}});
  }
  return {{"min_effect", comparison.options.min_effect},
          {"alpha", comparison.options.alpha},
          {"regressions", comparison.regressions()},
          {"improved", comparison.count(tableio::Verdict::improved)},
          {"unknown", comparison.count(tableio::Verdict::unknown)},
          {"keys", keys}};
}

void add_compare_command(CLI::App& app, CompareCommand& command) {
  CompareCommandOptions& o = command.options;
  command.command = app.add_subcommand("compare", "Compare two exported tables: regressions, improvements");
  CLI::App* cmd = command.command;
  cmd->add_option("current", o.current, "the table to judge (json export or T4)")->required();
  cmd->add_option("baseline", o.baseline, "the table to compare with")->required();
  cmd->add_option("--max-regression", o.max_regression,
                  "the minimum effect: a slowdown (or speed-up) smaller than this is the same "
                  "(default 5%)");
  cmd->add_option("--alpha", o.alpha, "significance level of the rank test (default 0.01)")
      ->check(CLI::Range(1e-9, 0.5));
  cmd->add_option("--junit", o.junit, "also write the comparison as JUnit XML here");
  cmd->footer(
      "\nPer key: regressed / improved / same / unknown, the ratio of the medians with its 95%\n"
      "interval and the p-value. Where both tables keep the samples of a key (at least 5 each) a\n"
      "Mann-Whitney U test decides together with --max-regression; where one does not (an old\n"
      "table) the report says so and the 95% intervals of the medians decide.\n\n"
      "Exit codes: 0 nothing regressed; 1 a regression; 2 an error.\n\n"
      "Example:\n  ktune compare tonight.json last-good.json --junit compare.xml");
}

std::optional<int> run_compare_command(const CompareCommand& command, const GlobalOptions& global,
                                       Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  return run_compare(global, command.options, io);
}

int run_compare(const GlobalOptions& global, const CompareCommandOptions& options, Output& io) {
  auto min_effect = parse_max_regression(options.max_regression);
  if (!min_effect) return report_error(io, min_effect.error().code, min_effect.error().message, k_exit_failed);
  auto current = read_table_file(options.current);
  if (!current) return report_error(io, current.error().code, current.error().message, k_exit_failed);
  auto baseline = read_table_file(options.baseline);
  if (!baseline) return report_error(io, baseline.error().code, baseline.error().message, k_exit_failed);
  const auto comparison = tableio::compare(*current, *baseline, {*min_effect, options.alpha});
  if (!options.junit.empty()) {
    if (auto w = write_file_atomic(options.junit, tableio::render_junit(comparison)); !w) {
      return report_error(io, w.error().code, w.error().message, k_exit_failed);
    }
  }
  if (global.json) print_json(io, comparison_json(comparison));
  else io.out << tableio::render_markdown(comparison);
  return comparison.regressions() > 0 ? k_exit_regression : k_exit_ok;
}

} // namespace ktune::cli
