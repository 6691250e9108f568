#include "cli/fleet.hpp"

#include "cli/compare_command.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/daemon_command.hpp"
#include "cli/fleet_layout.hpp"
#include "core/file_io.hpp"
#include "cli/slurm.hpp"
#include "cli/table.hpp"
#include "core/hash.hpp"
#include "core/paths.hpp"
#include "core/safe_fs.hpp"
#include "replay/file_reader.hpp"
#include "sweep/sweep_file.hpp"
#include "tableio/compare.hpp"
#include "tableio/formats.hpp"
#include "tableio/merge.hpp"
#include "tableio/table.hpp"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace ktune::cli {

using namespace fleet;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

// --- the shard entry point ----------------------------------------------------------------------

// Stops the shard's private ktuned and removes its home when the shard ends, also when Slurm
// cancels it (SIGTERM): a thread waits for the termination signals, which are blocked everywhere
// else. stop() runs once; a second caller waits until the first is done.
class PrivateInstance {
public:
  PrivateInstance(std::string home, bool remove) : m_home(std::move(home)), m_remove(remove) {}
  PrivateInstance(const PrivateInstance&) = delete;
  PrivateInstance& operator=(const PrivateInstance&) = delete;
  ~PrivateInstance() { stop(); }

  void stop() {
    std::call_once(m_once, [this] {
      std::ostringstream sink;
      Output quiet{sink, sink};
      (void)daemon_stop({}, quiet);
      if (m_remove) {
        std::error_code ignored;
        fs::remove_all(m_home, ignored);
      }
    });
  }

private:
  std::string m_home;
  bool m_remove;
  std::once_flag m_once;
};

// The end of a shard: the main thread publishes the table, or a termination signal ends the
// process; whichever comes first, the other does not happen (a cancelled shard leaves no table).
struct ShardEnd {
  std::mutex mutex;
  bool terminating = false;
  PrivateInstance* instance = nullptr;
};
ShardEnd g_shard_end;

void watch_termination() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    if (::sigwait(&set, &sig) != 0) return;
    PrivateInstance* instance = nullptr;
    {
      std::lock_guard lock(g_shard_end.mutex);
      g_shard_end.terminating = true;
      instance = g_shard_end.instance;
    }
    std::fprintf(stderr, "fleet shard: %s received; stopping the private ktuned, no table written\n",
                 ::strsignal(sig));
    if (instance != nullptr) instance->stop();
    ::_exit(128 + sig);
  }).detach();
}

} // namespace

namespace {

// The shard's KTUNE_HOME: `given`, else a fresh directory under $TMPDIR (or /tmp).
Result<std::string> shard_home(const std::string& given, std::size_t index) {
  if (!given.empty()) return given;
  const std::string tmp = env("TMPDIR").empty() ? "/tmp" : env("TMPDIR");
  std::string pattern = tmp + "/ktune-shard-" + std::to_string(index) + ".XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return make_error(ErrorCode::io_error, "cannot create a directory under " + tmp + ": " + std::strerror(errno));
  }
  return pattern;
}

// The shard table's provenance: the sweep, the shard, the node, and what Slurm or Kubernetes
// says of the task running it.
ordered_json shard_provenance(const std::string& sweep_name, const sweep::Shard& shard, const std::string& host) {
  ordered_json provenance = {{"kind", "fleet-shard"},
                             {"sweep", sweep_name},
                             {"shard", std::to_string(shard.index) + "/" + std::to_string(shard.count)},
                             {"node", env("SLURMD_NODENAME").empty() ? host : env("SLURMD_NODENAME")},
                             {"host", host},
                             {"started_at_ms", now_ms()}};
  if (!env("SLURM_JOB_ID").empty()) {
    provenance["slurm"] = {{"job_id", env("SLURM_JOB_ID")},
                           {"array_job_id", env("SLURM_ARRAY_JOB_ID")},
                           {"array_task_id", env("SLURM_ARRAY_TASK_ID")},
                           {"cluster", env("SLURM_CLUSTER_NAME")}};
  }
  if (!env("JOB_COMPLETION_INDEX").empty()) {
    provenance["kubernetes"] = {{"job_completion_index", env("JOB_COMPLETION_INDEX")}};
  }
  return provenance;
}

} // namespace

int run_fleet_shard(const FleetShardOptions& options, Output& io) {
  auto shard = sweep::parse_shard(options.shard);
  if (!shard) return report_error(io, ErrorCode::usage, "--shard: " + shard.error().message, k_exit_failed);
  auto parsed = sweep::load_sweep(options.file);
  if (!parsed) return report_error(io, parsed.error().code, parsed.error().message, k_exit_failed);
  const Layout layout{absolute_path(options.out)};
  std::error_code ec;
  fs::create_directories(layout.shards_dir(), ec);
  if (ec) {
    return report_error(io, ErrorCode::io_error, "cannot create " + layout.shards_dir() + ": " + ec.message(),
                        k_exit_failed);
  }

  // A private instance on node-local storage: its own socket, database and compile cache.
  auto home = shard_home(options.home, shard->index);
  if (!home) return report_error(io, home.error().code, home.error().message, k_exit_failed);
  ::setenv("KTUNE_HOME", home->c_str(), 1);
  watch_termination();
  PrivateInstance instance(*home, options.home.empty());
  // The signal thread sees the instance while it exists.
  struct Registration {
    explicit Registration(PrivateInstance& instance) {
      std::lock_guard lock(g_shard_end.mutex);
      g_shard_end.instance = &instance;
    }
    ~Registration() {
      std::lock_guard lock(g_shard_end.mutex);
      g_shard_end.instance = nullptr;
    }
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
  } registration(instance);

  const std::string host = tableio::local_host_name();
  const ordered_json provenance = shard_provenance(parsed->name, *shard, host);
  io.err << "fleet shard " << options.shard << " of sweep " << parsed->name << " on " << host
         << " (KTUNE_HOME " << *home << ")\n";
  Output log_io{io.err, io.err, false, false};
  const int started = daemon_start({}, {options.config, options.kernel_dirs, {}}, log_io);
  if (started != k_exit_ok) {
    io.err << "ktune fleet shard: the private ktuned did not start (KTUNE_HOME " << *home << ")\n";
    return k_exit_failed;
  }
  // The sweep writes a hidden file; it becomes the shard's table below, unless the shard was
  // cancelled meanwhile.
  const std::string table = layout.shard_table(shard->index);
  const std::string partial = layout.shards_dir() + "/.shard-" + std::to_string(shard->index) + ".partial";
  SweepOptions sweep;
  sweep.file = options.file;
  sweep.shard = options.shard;
  sweep.out = partial;
  sweep.remeasure = options.remeasure;
  sweep.provenance = provenance;
  int code = run_sweep({}, sweep, log_io);
  {
    std::unique_lock lock(g_shard_end.mutex);
    if (g_shard_end.terminating) {
      lock.unlock();
      for (;;) ::pause();  // the signal thread ends the process
    }
    if (fs::exists(partial)) {
      fs::rename(partial, table, ec);
      if (ec) {
        io.err << "ktune fleet shard: cannot rename " << partial << " to " << table << ": "
               << ec.message() << '\n';
        code = k_exit_failed;
      }
    }
  }
  instance.stop();
  io.err << "fleet shard " << options.shard << ": exit " << code << '\n';
  return code;
}

// --- status and merge ---------------------------------------------------------------------------

int fleet_status(const GlobalOptions& global, const std::string& dir_option, std::size_t shards,
                 Output& io) {
  std::string dir = dir_option;
  if (dir.empty()) {
    auto last = replay::read_text_file(last_fleet_file());
    if (!last) {
      return report_error(io, ErrorCode::usage, "no fleet directory given and none submitted from here (" +
                                           last_fleet_file() + "): ktune fleet status DIR");
    }
    dir = *last;
    while (!dir.empty() && dir.back() == '\n') dir.pop_back();
  }
  const Layout layout{absolute_path(dir)};
  if (!fs::is_directory(layout.dir)) return report_error(io, ErrorCode::not_found, layout.dir + ": no such directory");
  auto manifest = read_manifest(layout);
  if (!manifest) return report_error(io, manifest.error().code, manifest.error().message);
  const std::size_t count = shards > 0 ? shards : (*manifest ? (*manifest)->shards : 0);
  if (count == 0) {
    return report_error(io, ErrorCode::usage, layout.dir + " has no fleet manifest (fleet.json): give --shards N");
  }
  std::string slurm_error;
  const auto states = collect_shards(layout, *manifest, count, slurm_error);
  std::map<std::string, std::size_t> counts;
  for (const auto& s : states) ++counts[s.state];
  if (global.json) {
    ordered_json list = ordered_json::array();
    for (const auto& s : states) list.push_back(shard_json(s));
    ordered_json out = {{"dir", layout.dir}, {"shards", list}, {"counts", counts}};
    if (!slurm_error.empty()) out["slurm_error"] = slurm_error;
    print_json(io, out);
  } else {
    io.out << layout.dir << ": " << count << " shards:";
    for (const char* state : {"done", "running", "pending", "failed", "missing"}) {
      if (counts[state] > 0) io.out << ' ' << counts[state] << ' ' << state;
    }
    io.out << '\n';
    print_shards(states, io.out);
    if (!slurm_error.empty()) io.err << "ktune fleet status: " << slurm_error << '\n';
  }
  return k_exit_ok;
}

namespace {

// The shards' tables merged into one: every key of every shard, by (kernel, shape, dtype, device
// fingerprint, source hash); shards hold different jobs, so a key in two tables is a sweep that
// lists it twice and `policy` decides (counted in `conflicts`). Its provenance says what was
// merged: the sweep, its shard count, each shard table's provenance and the shards not done.
tableio::Table merge_shards(const std::vector<ShardStatus>& states, tableio::Policy policy, const std::string& sweep,
                            std::size_t count, const ordered_json& incomplete, std::size_t& conflicts) {
  tableio::Table merged;
  ordered_json from = ordered_json::array();
  for (const auto& s : states) {
    if (!s.table) continue;
    auto result = tableio::merge(merged, *s.table, policy);
    conflicts += result.conflicts.size();
    merged = std::move(result.table);
    ordered_json p = s.table->provenance;
    p["rows"] = s.table->rows.size();
    from.push_back(p);
  }
  merged.host = tableio::local_host_name();
  merged.exported_at_ms = now_ms();
  merged.provenance = {{"kind", "fleet-merge"},
                       {"sweep", sweep},
                       {"shards", count},
                       {"merged_from", from},
                       {"incomplete", incomplete}};
  return merged;
}

// The shards as JUnit test cases: a shard not done is a failure.
std::vector<tableio::JunitCase> shard_cases(const std::vector<ShardStatus>& states, std::size_t count) {
  std::vector<tableio::JunitCase> cases;
  for (const auto& s : states) {
    std::string text = "shard " + std::to_string(s.index) + "/" + std::to_string(count) + ": " + s.state;
    if (!s.node.empty()) text += " on " + s.node;
    if (s.table) text += ", " + std::to_string(s.table->rows.size()) + " rows";
    if (!s.why.empty()) text += "; " + s.why;
    if (!s.log.empty()) text += "; log " + s.log;
    cases.push_back(
        {.classname = "ktune.fleet.shards", .name = "shard " + std::to_string(s.index),
         .failure = s.state == "done" ? "" : "shard " + std::to_string(s.index) + " " + s.state,
         .text = text});
  }
  return cases;
}

// What a merge did, for its report.
struct MergeOutcome {
  const std::vector<ShardStatus>& states;
  const tableio::Table& merged;
  const std::string& output;
  std::size_t count = 0, incomplete = 0, conflicts = 0, regressions = 0;
  const std::string& slurm_error;
};

ordered_json merge_json(const MergeOutcome& m, const FleetMergeOptions& options) {
  ordered_json list = ordered_json::array();
  for (const auto& s : m.states) list.push_back(shard_json(s));
  ordered_json out = {{"output", m.output},  {"rows", m.merged.rows.size()}, {"shards", list},
                      {"incomplete", m.incomplete}, {"conflicts", m.conflicts},
                      {"regressions", m.regressions}};
  if (!options.junit.empty()) out["junit"] = options.junit;
  if (!m.slurm_error.empty()) out["slurm_error"] = m.slurm_error;
  return out;
}

void print_merge(const MergeOutcome& m, const Layout& layout, const std::string& markdown, Output& io) {
  io.out << "merged " << (m.count - m.incomplete) << " of " << m.count << " shards: " << m.merged.rows.size()
         << " rows to " << m.output << '\n';
  if (m.incomplete > 0) {
    io.out << m.incomplete << " shard(s) not done:\n";
    std::vector<ShardStatus> not_done;
    for (const auto& s : m.states) {
      if (s.state != "done") not_done.push_back(s);
    }
    print_shards(not_done, io.out);
    io.out << "resubmit them: the same `ktune sweep FILE --slurm --out " << layout.dir << "`\n";
  }
  if (!markdown.empty()) io.out << markdown;
  if (!m.slurm_error.empty()) io.err << "ktune fleet merge: " << m.slurm_error << '\n';
}

} // namespace

int fleet_merge(const GlobalOptions& global, const FleetMergeOptions& options, Output& io) {
  auto fail = [&](ErrorCode code, const std::string& message) {
    return report_error(io, code, message, k_exit_failed);
  };
  const auto policy = tableio::parse_policy(options.policy);
  if (!policy) return fail(ErrorCode::usage, "--policy " + options.policy + ": expected faster, newer or keep");
  auto max_regression = parse_max_regression(options.max_regression);
  if (!max_regression) return fail(max_regression.error().code, max_regression.error().message);
  const Layout layout{absolute_path(options.dir)};
  if (!fs::is_directory(layout.dir)) return fail(ErrorCode::not_found, layout.dir + ": no such directory");
  auto manifest = read_manifest(layout);
  if (!manifest) return fail(manifest.error().code, manifest.error().message);
  const std::size_t count = options.shards > 0 ? options.shards : (*manifest ? (*manifest)->shards : 0);
  if (count == 0) return fail(ErrorCode::usage, layout.dir + " has no fleet manifest (fleet.json): give --shards N");

  std::string slurm_error;
  const auto states = collect_shards(layout, *manifest, count, slurm_error);
  ordered_json problems = ordered_json::array();
  for (const auto& s : states) {
    if (s.state != "done") problems.push_back(shard_json(s));
  }
  std::size_t conflicts = 0;
  const tableio::Table merged =
      merge_shards(states, *policy, *manifest ? (*manifest)->sweep : std::string(), count, problems, conflicts);
  const std::string output = options.output.empty() ? layout.merged() : options.output;
  if (auto w = write_file_atomic(output, tableio::write_json(merged)); !w) return fail(w.error().code, w.error().message);

  // The shards as test cases, then the comparison with the baseline (or the winners).
  std::vector<tableio::JunitSuite> suites{tableio::junit_suite("ktune.fleet.shards", shard_cases(states, count))};
  std::size_t regressions = 0;
  std::string markdown;
  if (!options.baseline.empty()) {
    auto text = replay::read_text_file(options.baseline);
    if (!text) return fail(text.error().code, text.error().message);
    auto baseline = tableio::read_table(*text, options.baseline);
    if (!baseline) return fail(baseline.error().code, baseline.error().message);
    const auto comparison = tableio::compare(merged, *baseline, {.min_effect = *max_regression});
    regressions = comparison.regressions();
    suites.push_back(tableio::junit_suite(comparison, "ktune.fleet.baseline"));
    markdown = tableio::render_markdown(comparison);
  } else {
    suites.push_back(tableio::junit_suite(merged, "ktune.fleet.winners"));
  }
  if (!options.junit.empty()) {
    if (auto w = write_file_atomic(options.junit, tableio::render_junit(suites)); !w) {
      return fail(w.error().code, w.error().message);
    }
  }

  const std::size_t incomplete = problems.size();
  const MergeOutcome outcome{states, merged, output, count, incomplete, conflicts, regressions, slurm_error};
  if (global.json) print_json(io, merge_json(outcome, options));
  else print_merge(outcome, layout, markdown, io);
  if (incomplete > 0) return k_exit_failed;
  return regressions > 0 ? k_exit_regression : k_exit_ok;
}

// --- the commands -------------------------------------------------------------------------------

void add_fleet_commands(CLI::App& app, FleetCommands& commands) {
  commands.fleet = app.add_subcommand("fleet", "Sharded sweeps on a cluster: run a shard, status, merge");
  commands.fleet->require_subcommand(1);
  commands.fleet->footer(
      "\n`ktune sweep FILE --slurm --out DIR` submits a sweep's shards as a Slurm array job; every\n"
      "task runs `ktune fleet shard` and a dependent job runs `ktune fleet merge` (docs/deploy.md).");

  auto& s = commands.shard;
  commands.shard_cmd = commands.fleet->add_subcommand(
      "shard", "Run one shard of a sweep with a private ktuned; write its table into DIR/shards");
  commands.shard_cmd->add_option("file", s.file, "sweep file")->required();
  commands.shard_cmd->add_option("--shard", s.shard, "this shard: i/N")->required();
  commands.shard_cmd->add_option("--out", s.out, "the fleet's output directory")->required();
  commands.shard_cmd->add_option("--config", s.config, "the private ktuned's config file");
  commands.shard_cmd->add_option("--kernel-dir", s.kernel_dirs, "kernel families added to the private ktuned's");
  commands.shard_cmd->add_option("--home", s.home,
                                 "KTUNE_HOME of the private ktuned (default: a fresh directory "
                                 "under $TMPDIR, removed at the end)");
  commands.shard_cmd->add_flag("--remeasure", s.remeasure, "measure every config again");
  commands.shard_cmd->footer(
      "\nThe entry point of every Slurm array task and Kubernetes pod: starts a private ktuned\n"
      "(KTUNE_HOME on node-local storage), runs `ktune sweep FILE --shard i/N`, writes the winners to\n"
      "DIR/shards/shard-i.json (temporary file + rename) with their provenance (node, device\n"
      "fingerprints, Slurm job, array job and task ids or the Kubernetes completion index, job\n"
      "counts), stops the ktuned and exits with the sweep's exit code (0, or 2 when a job failed).\n\n"
      "Examples:\n  ktune fleet shard sweep.toml --shard \"$SLURM_ARRAY_TASK_ID/4\" --out /shared/tables/nightly\n"
      "  ktune fleet shard sweep.toml --shard \"$((JOB_COMPLETION_INDEX + 1))/4\" --out /tables/nightly");

  commands.status_cmd = commands.fleet->add_subcommand(
      "status", "Each shard of a fleet: done, failed, pending, running or missing");
  commands.status_cmd->add_option("dir", commands.status_dir,
                                  "the fleet's output directory (default: the last one submitted from here)");
  commands.status_cmd->add_option("--shards", commands.status_shards,
                                  "the shard count, for a directory without a manifest (Kubernetes)");
  commands.status_cmd->footer(
      "\nStates come from Slurm (scontrol, else sacct) for the tasks the manifest submitted and from\n"
      "the shard tables in DIR/shards: done (a table, every job done), failed (a table with failed\n"
      "jobs, or a task Slurm ended without a table), pending, running, missing (no table and no\n"
      "task Slurm knows of).");

  auto& m = commands.merge;
  commands.merge_cmd = commands.fleet->add_subcommand(
      "merge", "Merge a fleet's shard tables into one table; JUnit; compare with a baseline");
  commands.merge_cmd->add_option("dir", m.dir, "the fleet's output directory")->required();
  commands.merge_cmd->add_option("-o,--output", m.output, "the merged table (default DIR/merged.json)");
  commands.merge_cmd->add_option("--baseline", m.baseline, "a table to compare the merged table with");
  commands.merge_cmd->add_option("--max-regression", m.max_regression,
                                 "the minimum effect of a regression (default 5%)");
  commands.merge_cmd->add_option("--junit", m.junit,
                                 "write JUnit XML here: one case per shard, then the comparison "
                                 "(or one passing case per key)");
  commands.merge_cmd->add_option("--policy", m.policy,
                                 "for a key in two shards: faster, newer or keep (as ktune import)")
      ->check(CLI::IsMember({"faster", "newer", "keep"}));
  commands.merge_cmd->add_option("--shards", m.shards,
                                 "the shard count, for a directory without a manifest (Kubernetes)");
  commands.merge_cmd->footer(
      "\nMerges DIR/shards/shard-1..N.json by winner key (kernel, shape, dtype, device fingerprint,\n"
      "source hash) with the policy of `ktune import`, writes the table (temporary file + rename)\n"
      "with the shards' provenance, and lists every shard that is not done with Slurm's state and\n"
      "its log. Exit codes: 0 every shard done, nothing regressed; 1 a regression; 2 a shard failed\n"
      "or is missing (the table of the others is written), or an error.\n\n"
      "Example:\n  ktune fleet merge /shared/tables/nightly -o merged.json --baseline last-good.json --junit sweep.xml");
}

std::optional<int> run_fleet_commands(const FleetCommands& commands, const GlobalOptions& global,
                                      Output& io) {
  if (commands.shard_cmd != nullptr && commands.shard_cmd->parsed()) {
    return run_fleet_shard(commands.shard, io);
  }
  if (commands.status_cmd != nullptr && commands.status_cmd->parsed()) {
    return fleet_status(global, commands.status_dir, commands.status_shards, io);
  }
  if (commands.merge_cmd != nullptr && commands.merge_cmd->parsed()) {
    return fleet_merge(global, commands.merge, io);
  }
  return std::nullopt;
}

} // namespace ktune::cli
