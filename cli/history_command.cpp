#include "cli/history_command.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/table.hpp"
#include "core/change_points.hpp"
#include "core/paths.hpp"
#include "db/store.hpp"
#include "tableio/compare.hpp"
#include "tableio/history.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

namespace ktune::cli {

namespace {

using nlohmann::json;

std::string without_spaces(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
}

std::string utc_text(std::int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", ms);
  return buf;
}

std::string signed_percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (ratio - 1.0) * 100.0);
  return buf;
}

std::optional<tableio::Interval> interval_of(const tableio::RunPoint& run) {
  tableio::TableRow row;
  row.median_ms = run.median_ms;
  row.samples_ms = run.samples_ms;
  if (run.samples_ms.size() < tableio::k_min_samples) return std::nullopt;
  return tableio::confidence_interval(row);
}

} // namespace

void add_history_command(CLI::App& app, HistoryCommand& command) {
  HistoryOptions& o = command.options;
  command.command = app.add_subcommand(
      "history", "A key's winning time run after run, with the change points of the series");
  CLI::App* cmd = command.command;
  cmd->add_option("kernel", o.kernel, "kernel family, e.g. gemm")->required();
  cmd->add_option("--shape", o.shape, "problem shape as NAME=value pairs, e.g. M=256,N=256,K=256")
      ->required();
  cmd->add_option("--dtype", o.dtype, "element type (default: the only one stored for the shape)");
  cmd->add_option("--device", o.device,
                  "cpu, cuda:N or a device fingerprint (prefix) (default: the only one stored)");
  cmd->add_option("--db", o.db,
                  "the database to read (default: the instance's, $KTUNE_HOME/ktune.db else "
                  "$XDG_STATE_HOME/ktune/ktune.db)");
  cmd->footer(
      "\nReads the store read-only; ktuned need not be running. One line per finished run (a\n"
      "job that ended done, every source hash of the kernel), oldest first: the winner's median\n"
      "and the 95% interval of its kept samples. CHANGE marks change points: the series is fitted\n"
      "by piecewise-constant levels (least absolute deviations, a penalty per level scaled by the\n"
      "series' own noise, exact by dynamic programming); a step between two levels of at least\n"
      "two runs each that moves the median by more than 5% is a change point. A single outlier\n"
      "run is never one (docs/ARCHITECTURE.md § Regressions).\n\n"
      "Exit codes: 0 listed; 1 an error (no database, no such key, several match); 2 usage.\n\n"
      "Examples:\n  ktune history gemm --shape M=256,N=256,K=256\n"
      "  ktune history reduce_sum --shape N=65536 --dtype f32 --device cpu --json");
}

std::optional<int> run_history_command(const HistoryCommand& command, const GlobalOptions& global,
                                       Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  return show_history(global, command.options, io);
}

namespace {

// The one key (dtype, device fingerprint) of the store's winners that the options name, for the
// kernel at `shape`. Errors: not_found (naming the shapes that have runs), ambiguous (listing the
// keys: pass --dtype and --device).
Result<std::pair<std::string, std::string>> find_key(const std::vector<WinnerRecord>& winners,
                                                     const HistoryOptions& options, const std::string& shape,
                                                     std::map<std::string, std::string>& device_names,
                                                     const std::string& db) {
  std::set<std::pair<std::string, std::string>> keys; // (dtype, fingerprint)
  std::set<std::string> shapes;
  for (const auto& w : winners) {
    if (w.kernel != options.kernel) continue;
    shapes.insert(w.shape);
    if (w.shape != shape) continue;
    if (!options.dtype.empty() && w.dtype != options.dtype) continue;
    const std::string& name = device_names[w.fingerprint];
    if (!options.device.empty() && options.device != name &&
        w.fingerprint.compare(0, options.device.size(), options.device) != 0) {
      continue;
    }
    keys.emplace(w.dtype, w.fingerprint);
  }
  const std::string wanted = options.kernel + " " + shape +
                             (options.dtype.empty() ? "" : " " + options.dtype) +
                             (options.device.empty() ? "" : " on " + options.device);
  if (keys.empty()) {
    std::string known;
    for (const auto& s : shapes) known += (known.empty() ? "" : ", ") + s;
    return make_error(ErrorCode::not_found,
                      "no runs of " + wanted + " in " + db +
                          (known.empty() ? " (the kernel has none)" : " (shapes with runs: " + known + ")"));
  }
  if (keys.size() > 1) {
    std::string listed;
    for (const auto& [dtype, fp] : keys) {
      listed += (listed.empty() ? "" : ", ") + dtype + " on " +
                (device_names[fp].empty() ? fp.substr(0, 12) : device_names[fp] + " (" + fp.substr(0, 12) + ")");
    }
    return make_error(ErrorCode::ambiguous,
                      "several keys match " + wanted + ": " + listed + "; pass --dtype and --device");
  }
  return *keys.begin();
}

// A key's runs and the change points found in them.
struct History {
  std::string shape;
  std::string dtype;
  std::string fingerprint;
  std::string device;  // its name, "" when the store has none
  std::vector<tableio::RunPoint> runs;
  std::vector<double> medians;
  std::vector<ChangePoint> changes;
  std::map<std::size_t, const ChangePoint*> change_at;  // run index -> its change point
};

json history_json(const HistoryOptions& options, const History& h, const ChangePointOptions& method) {
  json runs = json::array();
  for (std::size_t i = 0; i < h.runs.size(); ++i) {
    const auto& run = h.runs[i];
    const auto interval = interval_of(run);
    runs.push_back({{"job", run.job_id},
                    {"finished_at_ms", run.finished_at_ms},
                    {"source_hash", run.source_hash},
                    {"config", json::parse(run.config, nullptr, false)},
                    {"median_ms", run.median_ms},
                    {"interval_ms", interval ? json::array({interval->low, interval->high}) : json(nullptr)},
                    {"samples", run.samples_ms.size()},
                    {"change_point", h.change_at.count(i) != 0}});
  }
  json points = json::array();
  for (const auto& c : h.changes) {
    points.push_back({{"index", c.index},
                      {"job", h.runs[c.index].job_id},
                      {"before_ms", c.before},
                      {"after_ms", c.after},
                      {"ratio", c.ratio()}});
  }
  return json{{"kernel", options.kernel},
              {"shape", h.shape},
              {"dtype", h.dtype},
              {"device", h.device},
              {"fingerprint", h.fingerprint},
              {"runs", runs},
              {"change_points", points},
              {"method",
               {{"name", "l1_piecewise_constant"},
                {"penalty_sigmas", method.penalty_sigmas},
                {"min_effect", method.min_effect},
                {"min_segment", method.min_segment},
                {"sigma_ms", successive_difference_sigma(h.medians)}}}};
}

void print_history(const HistoryOptions& options, const History& h, std::ostream& out) {
  out << options.kernel << " " << h.shape << " " << h.dtype << " on "
      << (h.device.empty() ? h.fingerprint.substr(0, 12) : h.device + " (" + h.fingerprint.substr(0, 12) + ")")
      << ": " << h.runs.size() << " run(s), " << h.changes.size() << " change point(s)\n";
  Table table({{"#", Align::right}, {"JOB", Align::right}, {"FINISHED (UTC)"}, {"SOURCE"},
               {"MEDIAN ms", Align::right}, {"95% INTERVAL"}, {"SAMPLES", Align::right},
               {"CONFIG"}, {"CHANGE"}});
  for (std::size_t i = 0; i < h.runs.size(); ++i) {
    const auto& run = h.runs[i];
    const auto interval = interval_of(run);
    std::string change;
    if (auto it = h.change_at.find(i); it != h.change_at.end()) {
      change = "<- step " + signed_percent(it->second->ratio()) + " (" + ms_text(it->second->before) +
               " -> " + ms_text(it->second->after) + " ms)";
    }
    table.add_row({std::to_string(i + 1), std::to_string(run.job_id), utc_text(run.finished_at_ms),
                   run.source_hash.substr(0, 12), ms_text(run.median_ms),
                   interval ? "[" + ms_text(interval->low) + ", " + ms_text(interval->high) + "]" : "-",
                   std::to_string(run.samples_ms.size()), run.config, change});
  }
  table.print(out);
}

} // namespace

int show_history(const GlobalOptions& global, const HistoryOptions& options, Output& io) {
  const std::string db =
      options.db.empty() ? resolve_paths(path_env_from_process()).db : options.db;
  if (!std::filesystem::exists(db)) {
    return report_error(io, ErrorCode::db_error,
                        "no database at " + db + " (tune something first, or pass --db PATH)");
  }
  auto store = Store::open(db, OpenMode::read_only);
  if (!store) return report_error(io, store.error().code, store.error().message);
  auto devices = store->list_devices();
  if (!devices) return report_error(io, devices.error().code, devices.error().message);
  std::map<std::string, std::string> device_names; // fingerprint -> name
  for (const auto& d : *devices) device_names[d.fingerprint] = d.name;

  // The keys the store knows for the kernel and shape (winners: one per source hash).
  auto winners = store->all_winners();
  if (!winners) return report_error(io, winners.error().code, winners.error().message);
  History h;
  h.shape = without_spaces(options.shape);
  auto key = find_key(*winners, options, h.shape, device_names, db);
  if (!key) return report_error(io, key.error().code, key.error().message);
  std::tie(h.dtype, h.fingerprint) = *key;
  auto series = tableio::load_history(*store, {options.kernel, h.shape, h.dtype, h.fingerprint});
  if (!series) return report_error(io, series.error().code, series.error().message);
  h.runs = std::move(*series);
  for (const auto& run : h.runs) h.medians.push_back(run.median_ms);
  const ChangePointOptions method;
  h.changes = find_change_points(h.medians, method);
  for (const auto& c : h.changes) h.change_at[c.index] = &c;
  h.device = device_names[h.fingerprint];

  if (global.json) print_json(io, history_json(options, h, method));
  else print_history(options, h, io.out);
  return k_exit_ok;
}

} // namespace ktune::cli
