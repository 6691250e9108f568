#include "cli/compare_command.hpp"

#include "cli/ab_confirm.hpp"
#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"
#include "replay/file_reader.hpp"
#include "tableio/formats.hpp"

#include <algorithm>
#include <charconv>
#include <map>

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

json ab_json(const std::optional<tableio::AbFigures>& ab) {
  if (!ab) return nullptr;
  return {{"verdict", tableio::to_string(ab->verdict)},
          {"measured", ab->measured},
          {"ratio", optional_number(ab->ratio)},
          {"ratio_interval", interval_json(ab->ratio_ci)},
          {"rounds", ab->rounds},
          {"baseline_ms", optional_number(ab->baseline_ms)},
          {"current_ms", optional_number(ab->current_ms)},
          {"baseline_build", ab->baseline_build},
          {"current_build", ab->current_build},
          {"winner_slower", ab->winner_slower},
          {"winners_ratio", optional_number(ab->winners_ratio)},
          {"why", ab->why}};
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
                    {"normalized_ratio", optional_number(k.normalized_ratio)},
                    {"ab", ab_json(k.ab)}});
  }
  json machines = json::array();
  for (const auto& m : comparison.machines) {
    machines.push_back(tableio::machine_json(m, comparison.options.min_effect));
  }
  return {{"min_effect", comparison.options.min_effect},
          {"alpha", comparison.options.alpha},
          {"regressions", comparison.regressions()},
          {"improved", comparison.count(tableio::Verdict::improved)},
          {"same", comparison.count(tableio::Verdict::same)},
          {"ambiguous", comparison.count(tableio::Verdict::ambiguous)},
          {"unknown", comparison.count(tableio::Verdict::unknown)},
          {"machines", machines},
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
  cmd->add_flag("--no-confirm", o.no_confirm,
                "judge by the tables alone: no A/B measurement by ktuned of the keys that look "
                "changed (no daemon needed)");
  cmd->add_flag("--strict", o.strict, "an ambiguous key fails the comparison (exit 3)");
  cmd->footer(
      "\nPer key: regressed / improved / same / ambiguous / unknown, the ratio of the medians with\n"
      "its 95% interval and the p-value. Where both tables keep the samples of a key (at least 5\n"
      "each) a Mann-Whitney U test judges together with --max-regression; where one does not (an\n"
      "old table) the report says so and the 95% intervals of the medians judge. A key that looks\n"
      "regressed or improved, or moved by more than --max-regression, is then measured again by\n"
      "ktuned as an A/B of its two builds (the baseline's source and config from the compile\n"
      "cache or the kept source, interleaved with the current one on the row's device), and that\n"
      "decides; a key that cannot be measured here (another machine's device, a build that is\n"
      "gone, no ktuned) is ambiguous, saying why. --no-confirm: the tables' rule alone.\n\n"
      "Exit codes: 0 nothing regressed; 1 a regression; 2 an error; 3 with --strict, an\n"
      "ambiguous key and no regression.\n\n"
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
  auto comparison = tableio::compare(*current, *baseline, {*min_effect, options.alpha});
  // The machines, where both tables carry canary readings (`ktune sweep --out` writes them).
  const auto readings = [](const tableio::Table& table) {
    return table.provenance.contains("canary") ? tableio::canary_from_json(table.provenance["canary"])
                                               : std::vector<CanaryReading>{};
  };
  const auto now = readings(*current), before = readings(*baseline);
  std::map<std::string, std::string> devices;
  for (const auto& row : current->rows) devices.emplace(row.fingerprint, row.device_name);
  for (const auto& [fingerprint, name] : devices) {
    std::vector<CanaryReading> now_fp, before_fp;
    for (const auto& r : now) if (r.fingerprint == fingerprint) now_fp.push_back(r);
    for (const auto& r : before) if (r.fingerprint == fingerprint) before_fp.push_back(r);
    if (!now_fp.empty() || !before_fp.empty()) {
      comparison.machines.push_back(tableio::compare_canary(fingerprint, name, now_fp, before_fp));
    }
  }
  tableio::normalize(comparison);
  const bool to_confirm = std::any_of(comparison.keys.begin(), comparison.keys.end(),
      [&](const tableio::KeyComparison& k) { return tableio::needs_confirmation(k, comparison.options); });
  if (options.no_confirm) {
    tableio::distrust_moved_machines(comparison);
  } else if (to_confirm) {
    const std::string socket = socket_path(global);
    auto conn = connect_daemon(socket, global, io);
    if (!conn) {
      io.err << "ktune compare: cannot reach ktuned to measure the changed keys as A/Bs ("
             << conn.error().code << "); they are ambiguous (--no-confirm judges by the tables "
             << "alone)\n";
      mark_unconfirmed(comparison, "not confirmed: ktuned could not be reached: " + conn.error().message);
    } else if (auto confirmed = confirm_changed(*conn, comparison, io); !confirmed) {
      (void)report(io, confirmed.error(), socket);  // said on io; compare's exit code is 2
      return k_exit_failed;
    }
  }
  if (!options.junit.empty()) {
    const auto as = options.strict ? tableio::AmbiguousIs::failure : tableio::AmbiguousIs::skipped;
    if (auto w = write_file_atomic(options.junit, tableio::render_junit(comparison, "ktune.baseline", as)); !w) {
      return report_error(io, w.error().code, w.error().message, k_exit_failed);
    }
  }
  if (global.json) print_json(io, comparison_json(comparison));
  else io.out << tableio::render_markdown(comparison);
  if (comparison.regressions() > 0) return k_exit_regression;
  return options.strict && comparison.count(tableio::Verdict::ambiguous) > 0 ? k_exit_ambiguous
                                                                              : k_exit_ok;
}

} // namespace ktune::cli
