#include "cli/sweep_command.hpp"

#include "cli/ab_confirm.hpp"
#include "cli/autostart.hpp"
#include "cli/compare_command.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/fleet.hpp"
#include "core/file_io.hpp"
#include "cli/shipped_data.hpp"
#include "cli/table.hpp"
#include "db/store.hpp"
#include "replay/file_reader.hpp"
#include "sweep/sweep_file.hpp"
#include "tableio/canary.hpp"
#include "tableio/compare.hpp"
#include "tableio/formats.hpp"
#include "tableio/history.hpp"
#include "tableio/table.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

namespace ktune::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto k_poll_interval = std::chrono::milliseconds(500);
constexpr auto k_plain_progress_interval = std::chrono::seconds(10);
// Jobs of one sweep queued or running at once: below ktuned's default per-user queue limit
// ([limits] max_queued_jobs_per_client = 64), leaving room for the user's interactive tunes.
constexpr std::size_t k_max_outstanding = 32;
// --baseline's value that means the store's history instead of a table file.
constexpr std::string_view k_last_good = "last-good";

bool is_final(const std::string& state) {
  return state == "done" || state == "failed" || state == "cancelled" || state == "interrupted";
}

std::string duration_text(double seconds) {
  char buf[32];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  return buf;
}

std::string describe(const sweep::SweepJob& job) {
  std::string text = job.kernel + " " + job.shape + " " + job.dtype + " " + job.device;
  if (job.strategy != "exhaustive") text += " (" + job.strategy + ")";
  return text;
}

// One progress line: a bar over the candidates of every job, job counts and an ETA.
std::string progress_line(std::int64_t jobs_done, std::size_t jobs, std::int64_t done,
                          std::int64_t total, double elapsed_s) {
  constexpr int width = 30;
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  const int filled = static_cast<int>(share * width);
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(width - filled), '-') + "]";
  std::string eta = "-";
  if (done > 0 && total > done) eta = duration_text(elapsed_s * static_cast<double>(total - done) / static_cast<double>(done));
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %lld/%zu jobs, %lld/%lld candidates, %s elapsed, ETA %s",
                bar.c_str(), static_cast<long long>(jobs_done), jobs, static_cast<long long>(done),
                static_cast<long long>(total), duration_text(elapsed_s).c_str(), eta.c_str());
  return buf;
}


// The markdown summary of a sweep without a baseline: one row per key.
std::string winners_markdown(const tableio::Table& table) {
  std::string out = "| kernel | shape | dtype | device | median (ms) | winner |\n|---|---|---|---|---:|---|\n";
  for (const auto& row : table.rows) {
    char median[32];
    std::snprintf(median, sizeof median, "%.4g", row.median_ms);
    out += "| " + row.kernel + " | " + row.shape + " | " + row.dtype + " | " + row.device_name +
           " | " + median + " | `" + row.config_text() + "` |\n";
  }
  return out;
}

// The jobs of a run: their ids (identical jobs share one) and how many ktuned refused.
struct Submitted {
  std::map<std::int64_t, std::vector<const sweep::SweepJob*>> by_id;
  int rejected = 0;
};

// Submits `jobs` and waits for all of them to end. Errors: ktuned unreachable or gone.
Result<Submitted> submit_and_wait(Connection& conn, const std::vector<const sweep::SweepJob*>& jobs,
                                  int priority, bool remeasure, Output& io) {
  // Submit and wait: at most k_max_outstanding jobs of the sweep queued or running at once (ktuned
  // limits the jobs one user may queue), topped up as jobs end; one progress bar over all.
  Submitted out;
  auto& by_id = out.by_id;
  int& rejected = out.rejected;
  std::map<std::int64_t, json> states;
  std::size_t next = 0;
  const auto start = Clock::now();
  auto last_plain = start - k_plain_progress_interval;
  while (true) {
    std::size_t outstanding = 0;
    for (const auto& [id, members] : by_id) {
      if (!is_final(states[id].value("state", std::string()))) ++outstanding;
    }
    while (next < jobs.size() && outstanding < k_max_outstanding) {
      const sweep::SweepJob& job = *jobs[next];
      json request = {{"op", "tune"},       {"kernel", job.kernel}, {"shape", job.shape},
                      {"dtype", job.dtype}, {"device", job.device}, {"strategy", job.strategy},
                      {"priority", priority}};
      if (job.budget) request["budget"] = *job.budget;
      if (job.budget_fraction) request["budget_fraction"] = *job.budget_fraction;
      if (remeasure) request["remeasure"] = true;
      auto reply = call(conn, request, k_request_timeout);
      if (!reply && reply.error().code == ErrorCode::too_many_jobs) break; // try again as jobs end
      ++next;
      if (!reply) {
        if (reply.error().code == ErrorCode::not_running || reply.error().code == ErrorCode::io_error) {
          return reply.error();
        }
        io.err << "sweep job #" << job.number + 1 << " " << describe(job) << ": "
               << reply.error().code << ": " << reply.error().message << '\n';
        ++rejected;
        continue;
      }
      const auto id = reply->value("job", std::int64_t{0});
      if (by_id.count(id) == 0) ++outstanding;
      by_id[id].push_back(&job);
    }

    auto listed = call(conn, {{"op", "jobs"}, {"limit", 10000}}, k_request_timeout);
    if (!listed) return listed.error();
    for (const auto& j : listed->value("jobs", json::array())) {
      const auto id = j.value("id", std::int64_t{0});
      if (by_id.count(id) != 0) states[id] = j;
    }
    std::int64_t done = 0, total = 0, jobs_done = 0;
    for (const auto& [id, members] : by_id) {
      const json& j = states[id];
      done += j.value("done", std::int64_t{0});
      total += j.value("total", std::int64_t{0});
      if (is_final(j.value("state", std::string()))) jobs_done += static_cast<std::int64_t>(members.size());
    }
    const bool finished = next == jobs.size() &&
                          jobs_done == static_cast<std::int64_t>(jobs.size()) - rejected;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string line = progress_line(jobs_done, jobs.size(), done, total, elapsed);
    if (io.err_is_tty) {
      io.err << '\r' << line << "\x1b[K" << (finished ? "\n" : "") << std::flush;
    } else if (finished || Clock::now() - last_plain >= k_plain_progress_interval) {
      io.err << line << '\n';
      last_plain = Clock::now();
    }
    if (finished) break;
    std::this_thread::sleep_for(k_poll_interval);
  }
  return out;
}

// --baseline last-good: each done job of this sweep against the last good runs of its key that
// finished before the sweep started (tableio::last_good_runs), by the history rule.
// `baseline_runs` receives, per device fingerprint, the baseline runs the keys were compared with
// (whose canary readings describe the baseline's machine).
Result<tableio::Comparison> compare_with_last_good(
    const Store& store, const tableio::Table& table, const std::vector<JobRecord>& jobs,
    const std::map<std::int64_t, std::vector<const sweep::SweepJob*>>& this_sweep,
    std::int64_t started_at_ms, const tableio::CompareOptions& options,
    std::map<std::string, std::vector<tableio::RunPoint>>& baseline_runs) {
  tableio::Comparison out;
  out.options = options;
  for (const JobRecord& job : jobs) {
    auto results = store.job_results(job.id);
    if (!results) return results.error();
    const auto current = tableio::run_point(job, *results);
    if (!current) continue;
    auto history = tableio::load_history(store, {job.kernel, job.shape, job.dtype, job.fingerprint});
    if (!history) return history.error();
    std::erase_if(*history, [&](const tableio::RunPoint& run) {
      return this_sweep.count(run.job_id) != 0 || run.finished_at_ms >= started_at_ms;
    });
    std::vector<tableio::RunPoint> baseline;
    for (std::size_t i : tableio::last_good_runs(*history, options)) baseline.push_back((*history)[i]);
    auto& runs = baseline_runs[job.fingerprint];
    runs.insert(runs.end(), baseline.begin(), baseline.end());
    tableio::TableRow row;
    const tableio::RowKey key{job.kernel, job.shape, job.dtype, job.fingerprint, job.source_hash};
    if (const tableio::TableRow* found = table.find(key)) {
      row = *found;
    } else {
      row.kernel = job.kernel;
      row.shape = job.shape;
      row.dtype = job.dtype;
      row.fingerprint = job.fingerprint;
      row.source_hash = job.source_hash;
      row.device_name = job.device;
    }
    out.keys.push_back(tableio::compare_with_history(row, *current, baseline, options));
  }
  std::sort(out.keys.begin(), out.keys.end(),
            [](const tableio::KeyComparison& a, const tableio::KeyComparison& b) { return a.key < b.key; });
  return out;
}

// One canary reading on each of `devices` (daemon/canary.hpp), added to `readings` by
// fingerprint. A reading that fails is said on io.err and skipped: the canary informs the
// verdicts, it never fails a sweep.
void read_canary(Connection& conn, const std::set<std::string>& devices, const std::string& context,
                 std::map<std::string, std::vector<CanaryReading>>& readings, Output& io) {
  for (const auto& device : devices) {
    auto reply = call(conn, {{"op", "canary"}, {"device", device}, {"context", context}},
                      k_request_timeout);
    if (!reply) {
      io.err << "sweep: no canary reading on " << device << " (" << context
             << "): " << reply.error().code << ": " << reply.error().message << '\n';
      continue;
    }
    CanaryReading r;
    r.fingerprint = reply->value("fingerprint", std::string());
    r.device = reply->value("device", device);
    r.taken_at = reply->value("taken_at_ms", std::int64_t{0});
    r.compute_ms = reply->value("compute_ms", 0.0);
    r.memory_ms = reply->value("memory_ms", 0.0);
    r.context = context;
    readings[r.fingerprint].push_back(std::move(r));
  }
}

// What the canary says of each device of the comparison: this sweep's readings against the
// baseline's (the store's readings around the baseline runs, or a baseline table's own).
Result<std::vector<tableio::MachineMove>> machine_moves(
    const Store& store, const tableio::Comparison& comparison,
    const std::map<std::string, std::vector<CanaryReading>>& now,
    const std::map<std::string, std::vector<tableio::RunPoint>>& baseline_runs,
    const std::vector<CanaryReading>& baseline_table_readings) {
  std::map<std::string, std::string> devices;  // fingerprint -> name
  for (const auto& k : comparison.keys) {
    const auto& row = k.current ? k.current : k.baseline;
    devices.emplace(k.key.fingerprint, row ? row->device_name : std::string());
  }
  std::vector<tableio::MachineMove> out;
  for (const auto& [fingerprint, name] : devices) {
    std::vector<CanaryReading> before;
    if (const auto runs = baseline_runs.find(fingerprint); runs != baseline_runs.end()) {
      std::set<std::int64_t> seen;
      for (const auto& run : runs->second) {
        auto near = tableio::readings_near(store, fingerprint, run.started_at_ms, run.finished_at_ms);
        if (!near) return near.error();
        for (auto& r : *near) {
          if (seen.insert(r.id).second) before.push_back(std::move(r));
        }
      }
    }
    for (const auto& r : baseline_table_readings) {
      if (r.fingerprint == fingerprint) before.push_back(r);
    }
    const auto current = now.find(fingerprint);
    out.push_back(tableio::compare_canary(fingerprint, name,
                                          current == now.end() ? std::vector<CanaryReading>{}
                                                               : current->second,
                                          before));
  }
  return out;
}

// Reports an error that ends the sweep: exit code 2 (1 means a regression).
int fail(Output& io, const Error& error, const std::string& socket) {
  report(io, error, socket);
  return k_exit_failed;
}

} // namespace

void add_sweep_command(CLI::App& app, SweepCommand& command) {
  SweepOptions& o = command.options;
  command.command = app.add_subcommand("sweep", "Tune a grid of kernels and shapes unattended (CI)");
  CLI::App* cmd = command.command;
  cmd->add_option("file", o.file,
                  "sweep file, or the name of a shipped one (cpu, nightly: <prefix>/share/ktune/sweeps)")
      ->required();
  cmd->add_option("--shard", o.shard, "run shard i of N (e.g. 2/4): jobs whose number is i-1 mod N");
  cmd->add_option("--baseline", o.baseline,
                  "last-good (the store's earlier good runs of each entry), or a table (ktune "
                  "export --format json, or T4) to compare with");
  cmd->add_option("--max-regression", o.max_regression,
                  "the minimum effect: a slowdown smaller than this is not a regression, however "
                  "significant (default 5%)");
  cmd->add_option("--out", o.out, "write the sweep's winners here (JSON table)");
  cmd->add_option("--junit", o.junit,
                  "write JUnit XML here: the comparison with --baseline, else one passing case per key");
  cmd->add_flag("--remeasure", o.remeasure,
                "measure every config again with fresh samples instead of reusing earlier rows");
  cmd->add_flag("--no-confirm", o.no_confirm,
                "with --baseline: judge by history or the table alone, without A/B measurements "
                "of the keys that look changed");
  cmd->add_flag("--strict", o.strict, "with --baseline: an ambiguous key fails the sweep (exit 3)");
  cmd->add_flag("--dry-run", o.dry_run, "list the shard's jobs; submit nothing");
  SlurmSubmitOptions& slurm = command.slurm;
  cmd->add_flag("--slurm", slurm.enabled,
                "submit the shards to Slurm as an array job (sbatch) instead of tuning here; "
                "--out is then the fleet's output directory");
  cmd->add_option("--shards", slurm.shards, "with --slurm: the number of shards (default: one per job)");
  cmd->add_option("--partition", slurm.partition, "with --slurm: sbatch --partition");
  cmd->add_option("--gpus-per-task", slurm.gpus_per_task, "with --slurm: sbatch --gpus-per-task");
  cmd->add_option("--max-parallel", slurm.max_parallel,
                  "with --slurm: at most this many shards run at once (--array=...%K)");
  cmd->add_option("--time", slurm.time_limit, "with --slurm: sbatch --time of each shard");
  cmd->add_option("--config", slurm.config, "with --slurm: the ktuned config of every shard's ktuned");
  cmd->add_option("--kernel-dir", slurm.kernel_dirs,
                  "with --slurm: kernel families added to every shard's ktuned");
  cmd->footer(
      "Submits every job of the sweep (or of one shard) to ktuned below interactive tunes, shows\n"
      "one progress bar with an ETA, waits, exports the winners of the sweep's keys and, with\n"
      "--baseline, compares them key by key. --baseline last-good takes each entry's baseline\n"
      "from the store: the last 5 good runs of its kernel, shape, dtype and device that finished\n"
      "before this sweep started (a run is good unless it regressed against the good runs before\n"
      "it); with fewer than 3 good runs the entry is unknown. With a table, `ktune compare`'s rule\n"
      "(a Mann-Whitney U test on the two sides' samples plus --max-regression). Either rule only\n"
      "selects: an entry that looks regressed or improved, or whose time moved by more than\n"
      "--max-regression (also after dividing by the machine's speed canary), is measured again as\n"
      "an A/B -- the baseline's build (from the compile cache, or rebuilt from the kept source) and\n"
      "tonight's, interleaved in rounds on the same device -- and that decides: regressed,\n"
      "improved, same, or ambiguous (the A/B's spread overlaps --max-regression, the old build is\n"
      "gone, the device is another machine's). Two small reference kernels (the speed canary) are\n"
      "measured at the sweep's start and end, and the report says when the machine itself moved.\n"
      "Without --remeasure a config measured before for the same key\n"
      "is reused, not run again. Shards split the jobs deterministically, so N machines running\n"
      "1/N .. N/N cover the sweep exactly once; `ktune fleet merge` merges their tables, and\n"
      "--slurm submits them all as a Slurm array job (docs/deploy.md).\n\n"
      "Exit codes: 0 all done, nothing regressed (ambiguous keys included); 1 a regression; 2 an\n"
      "error (a failed or rejected job, ktuned unreachable, an unreadable baseline, a bad option);\n"
      "3 with --strict, an ambiguous key and no regression.\n\n"
      "Examples:\n  ktune sweep configs/sweeps/nightly.toml --out table.json\n"
      "  ktune sweep configs/sweeps/nightly.toml --remeasure --baseline last-good --junit sweep.xml\n"
      "  ktune sweep configs/sweeps/nightly.toml --remeasure --baseline tonight-ref.json\n"
      "  ktune sweep configs/sweeps/nightly.toml --shard 2/4 --out shard2.json\n"
      "  ktune sweep configs/sweeps/nightly.toml --slurm --partition gpu --gpus-per-task 1 --shards 4 \\\n"
      "      --out /shared/tables/nightly   # then: ktune fleet status, ktune fleet merge (docs/deploy.md)");
}

std::optional<int> run_sweep_command(const SweepCommand& command, const GlobalOptions& global,
                                     Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  SweepOptions options = command.options;
  auto file = resolve_sweep_file(options.file, shipped_data_dir() + "/sweeps");
  if (!file) {
    io.err << "ktune sweep: " << file.error().message << '\n';
    return k_exit_failed;
  }
  if (*file != options.file) io.err << "ktune sweep: using the shipped sweep " << *file << '\n';
  options.file = *file;
  if (command.slurm.enabled) return submit_slurm_sweep(global, options, command.slurm, io);
  for (const char* option : {"--shards", "--partition", "--gpus-per-task", "--max-parallel", "--time",
                             "--config", "--kernel-dir"}) {
    if (command.command->count(option) > 0) {
      io.err << "ktune sweep: " << option << " is an option of --slurm\n";
      return k_exit_usage;
    }
  }
  return run_sweep(global, options, io);
}

namespace {

using SweepKey = std::tuple<std::string, std::string, std::string, std::string, std::string>;
using JobsById = std::map<std::int64_t, std::vector<const sweep::SweepJob*>>;

// --dry-run: the shard's jobs as a table.
void print_dry_run(const std::vector<sweep::SweepJob>& jobs, std::ostream& out) {
  Table table({{"#", Align::right}, {"KERNEL"}, {"SHAPE"}, {"DTYPE"}, {"DEVICE"}, {"STRATEGY"}});
  for (const auto& job : jobs) {
    table.add_row({std::to_string(job.number + 1), job.kernel, job.shape, job.dtype, job.device,
                   job.strategy});
  }
  table.print(out);
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How the sweep's jobs ended, from the store: the keys (kernel, shape, dtype, fingerprint, source
// hash) of those done, their records, and how many did not finish (each said on io.err).
struct Finished {
  std::set<SweepKey> keys;
  std::vector<JobRecord> done_jobs;
  int failed = 0;
};

Result<Finished> collect_finished(const Store& store, const JobsById& by_id, Output& io) {
  Finished out;
  for (const auto& [id, members] : by_id) {
    auto record = store.get_job(id);
    if (!record) return record.error();
    if (!record->has_value()) continue;
    const JobRecord& r = **record;
    if (r.state != JobState::done) {
      for (const auto* job : members) {
        io.err << "sweep job #" << job->number + 1 << " " << describe(*job) << ": job " << id
               << " " << to_string(r.state) << (r.error.empty() ? "" : ": " + r.error) << '\n';
      }
      ++out.failed;
      continue;
    }
    out.keys.emplace(r.kernel, r.shape, r.dtype, r.fingerprint, r.source_hash);
    out.done_jobs.push_back(r);
  }
  return out;
}

// The store's table cut to `keys`, with the kernels its rows name.
Result<tableio::Table> sweep_table(const Store& store, const std::set<SweepKey>& keys) {
  auto all = tableio::load_table(store, {});
  if (!all) return all.error();
  tableio::Table table = std::move(*all);
  std::erase_if(table.rows, [&](const tableio::TableRow& row) {
    return keys.count({row.kernel, row.shape, row.dtype, row.fingerprint, row.source_hash}) == 0;
  });
  std::erase_if(table.kernels, [&](const tableio::KernelSource& k) {
    return std::none_of(table.rows.begin(), table.rows.end(), [&](const tableio::TableRow& row) {
      return row.kernel == k.name && row.source_hash == k.source_hash;
    });
  });
  return table;
}

// The provenance a fleet shard asked for, completed with the sweep's counts and devices.
void stamp_provenance(tableio::Table& table, const nlohmann::json& provenance, std::size_t jobs,
                      int failed, int rejected) {
  table.provenance = provenance;
  table.provenance["jobs"] = jobs;
  table.provenance["failed_jobs"] = failed;
  table.provenance["rejected_jobs"] = rejected;
  json devices = json::array();
  std::set<std::string> seen;
  for (const auto& row : table.rows) {
    if (seen.insert(row.fingerprint).second) {
      devices.push_back({{"name", row.device_name}, {"fingerprint", row.fingerprint}});
    }
  }
  table.provenance["devices"] = devices;
  table.provenance["finished_at_ms"] = now_ms();
}

// What a sweep measured, for the judgement against its baseline.
struct SweepRun {
  const std::string& name;
  const Store& store;
  const tableio::Table& table;
  const std::vector<JobRecord>& done_jobs;
  const JobsById& by_id;
  std::int64_t started_at_ms = 0;
  const std::map<std::string, std::vector<CanaryReading>>& canary;
};

// --baseline: the sweep's table against the last good runs or a baseline table, the machines'
// moves said by the canary, the changes confirmed by A/B measurements unless --no-confirm; into
// `summary` (regressions, ambiguous, regressed, baseline, comparison), as markdown on io.out
// (unless `json_output`) and as JUnit (--junit).
Result<tableio::Comparison> judge(Connection& conn, const SweepRun& run, const SweepOptions& options,
                                  double max_regression, bool json_output, json& summary, Output& io) {
  const tableio::CompareOptions compare_options{.min_effect = max_regression};
  std::map<std::string, std::vector<tableio::RunPoint>> baseline_runs;
  std::vector<CanaryReading> baseline_table_canary;
  Result<tableio::Comparison> compared = make_error(ErrorCode::internal, "no comparison");
  if (options.baseline == k_last_good) {
    compared = compare_with_last_good(run.store, run.table, run.done_jobs, run.by_id, run.started_at_ms,
                                      compare_options, baseline_runs);
  } else {
    auto text = replay::read_text_file(options.baseline);
    if (!text) return text.error();
    auto baseline = tableio::read_table(*text, options.baseline);
    if (!baseline) return baseline.error();
    if (baseline->provenance.contains("canary")) {
      baseline_table_canary = tableio::canary_from_json(baseline->provenance["canary"]);
    }
    compared = tableio::compare(run.table, *baseline, compare_options);
  }
  if (!compared) return compared.error();
  tableio::Comparison comparison = std::move(*compared);
  auto machines = machine_moves(run.store, comparison, run.canary, baseline_runs, baseline_table_canary);
  if (!machines) return machines.error();
  comparison.machines = std::move(*machines);
  tableio::normalize(comparison);
  if (!options.no_confirm) {
    // The verdicts come from A/B measurements; history or the table only selects the keys.
    auto confirmed = confirm_changed(conn, comparison, io);
    if (!confirmed) return confirmed.error();
    summary["confirmed"] = *confirmed;
  } else {
    tableio::distrust_moved_machines(comparison);
  }
  summary["regressions"] = comparison.regressions();
  summary["ambiguous"] = comparison.count(tableio::Verdict::ambiguous);
  json regressed = json::array();
  for (const auto& key : comparison.keys) {
    if (key.regressed()) regressed.push_back(tableio::to_string(key.key));
  }
  summary["regressed"] = regressed;
  summary["baseline"] = options.baseline;
  summary["comparison"] = comparison_json(comparison);
  if (!json_output) io.out << tableio::render_markdown(comparison);
  if (!options.junit.empty()) {
    const auto as = options.strict ? tableio::AmbiguousIs::failure : tableio::AmbiguousIs::skipped;
    if (auto w = write_file_atomic(options.junit, tableio::render_junit(comparison, "ktune.sweep." + run.name, as)); !w) {
      return w.error();
    }
  }
  return comparison;
}

// Submits the shard's jobs and waits for them, reading the speed canary of their devices at the
// sweep's start and end into `canary` (how fast each device was meanwhile).
Result<Submitted> run_jobs(Connection& conn, const std::vector<sweep::SweepJob>& jobs, const sweep::Sweep& parsed,
                           bool remeasure, std::map<std::string, std::vector<CanaryReading>>& canary, Output& io) {
  std::vector<const sweep::SweepJob*> all_jobs;
  std::set<std::string> devices;
  for (const auto& job : jobs) {
    all_jobs.push_back(&job);
    devices.insert(job.device);
  }
  read_canary(conn, devices, "sweep " + parsed.name + " start", canary, io);
  auto submitted = submit_and_wait(conn, all_jobs, parsed.priority, remeasure, io);
  if (!submitted) return submitted.error();
  read_canary(conn, devices, "sweep " + parsed.name + " end", canary, io);
  return submitted;
}

// Every device's canary readings in one list.
std::vector<CanaryReading> all_readings(const std::map<std::string, std::vector<CanaryReading>>& canary) {
  std::vector<CanaryReading> readings;
  for (const auto& [fingerprint, list] : canary) readings.insert(readings.end(), list.begin(), list.end());
  return readings;
}

// The sweep's exit: failed or rejected jobs, then regressions, then (--strict) ambiguous keys.
int sweep_exit(const std::string& name, const SweepOptions& options, int failed, int rejected,
               std::size_t regressions, std::size_t ambiguous, Output& io) {
  if (regressions > 0) io.err << "sweep " << name << ": " << regressions << " key(s) regressed\n";
  if (ambiguous > 0) {
    io.err << "sweep " << name << ": " << ambiguous << " key(s) ambiguous"
           << (options.strict ? " (--strict: a failure)" : "") << '\n';
  }
  if (failed > 0 || rejected > 0) return k_exit_failed;
  if (regressions > 0) return k_exit_regression;
  return options.strict && ambiguous > 0 ? k_exit_ambiguous : k_exit_ok;
}

} // namespace

int run_sweep(const GlobalOptions& global, const SweepOptions& options, Output& io) {
  auto shard = sweep::parse_shard(options.shard);
  if (!shard) {
    io.err << "ktune sweep: --shard: " << shard.error().message << '\n';
    return k_exit_usage;
  }
  auto max_regression = parse_max_regression(options.max_regression);
  if (!max_regression) {
    io.err << "ktune sweep: " << max_regression.error().message << '\n';
    return k_exit_failed;
  }
  auto parsed = sweep::load_sweep(options.file);
  if (!parsed) {
    io.err << "ktune sweep: " << parsed.error().message << '\n';
    return k_exit_failed;
  }
  const auto jobs = sweep::shard_jobs(*parsed, *shard);
  io.err << "sweep " << parsed->name << ": " << jobs.size() << " of " << parsed->jobs.size()
         << " jobs (shard " << shard->index << "/" << shard->count << ")\n";
  if (options.dry_run) {
    print_dry_run(jobs, io.out);
    return k_exit_ok;
  }

  const std::string socket = socket_path(global);
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return fail(io, conn.error(), socket);

  // Runs that finished before this moment are history to a last-good baseline.
  const std::int64_t started_at_ms = now_ms();
  std::map<std::string, std::vector<CanaryReading>> canary;
  auto submitted = run_jobs(*conn, jobs, *parsed, options.remeasure, canary, io);
  if (!submitted) return fail(io, submitted.error(), socket);
  const int rejected = submitted->rejected;

  // The sweep's keys, from the store (read-only; ktuned names its database).
  auto stats = call(*conn, {{"op", "stats"}}, k_request_timeout);
  if (!stats) return fail(io, stats.error(), socket);
  auto store = Store::open(stats->value("db", std::string()), OpenMode::read_only);
  if (!store) return fail(io, store.error(), socket);
  auto finished = collect_finished(*store, submitted->by_id, io);
  if (!finished) return fail(io, finished.error(), socket);
  auto table = sweep_table(*store, finished->keys);
  if (!table) return fail(io, table.error(), socket);
  if (options.provenance.is_object()) {
    stamp_provenance(*table, options.provenance, jobs.size(), finished->failed, rejected);
  }
  const std::vector<CanaryReading> canary_readings = all_readings(canary);
  if (!canary_readings.empty()) table->provenance["canary"] = tableio::canary_json(canary_readings);
  if (!options.out.empty()) {
    if (auto w = write_file_atomic(options.out, tableio::write_json(*table)); !w) return fail(io, w.error(), socket);
    io.err << "wrote " << table->rows.size() << " winners to " << options.out << '\n';
  }

  std::size_t regressions = 0, ambiguous = 0;
  json summary = {{"sweep", parsed->name},
                  {"shard", options.shard},
                  {"jobs", jobs.size()},
                  {"rejected", rejected},
                  {"failed", finished->failed},
                  {"keys", table->rows.size()},
                  {"canary", tableio::canary_json(canary_readings)}};
  if (!options.baseline.empty()) {
    const SweepRun run{parsed->name, *store, *table, finished->done_jobs, submitted->by_id, started_at_ms, canary};
    auto comparison = judge(*conn, run, options, *max_regression, global.json, summary, io);
    if (!comparison) return fail(io, comparison.error(), socket);
    regressions = comparison->regressions();
    ambiguous = comparison->count(tableio::Verdict::ambiguous);
  } else {
    if (!options.junit.empty()) {
      if (auto w = write_file_atomic(options.junit, tableio::render_junit(*table, "ktune.sweep." + parsed->name)); !w) {
        return fail(io, w.error(), socket);
      }
    }
    if (!global.json) io.out << winners_markdown(*table);
  }
  if (global.json) print_json(io, summary);
  return sweep_exit(parsed->name, options, finished->failed, rejected, regressions, ambiguous, io);
}

} // namespace ktune::cli
