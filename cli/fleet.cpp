#include "cli/fleet.hpp"

#include "cli/compare_command.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/daemon_command.hpp"
#include "cli/output_file.hpp"
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

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* k_manifest_format = "ktune-fleet";

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// Single-quoted for sh: 'it'\''s'.
std::string sh_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// --- the output directory -----------------------------------------------------------------------

struct Layout {
  std::string dir;
  [[nodiscard]] std::string manifest() const { return dir + "/fleet.json"; }
  [[nodiscard]] std::string sweep() const { return dir + "/sweep.toml"; }
  [[nodiscard]] std::string config() const { return dir + "/ktuned.toml"; }
  [[nodiscard]] std::string shard_script() const { return dir + "/shard.sbatch"; }
  [[nodiscard]] std::string merge_script() const { return dir + "/merge.sbatch"; }
  [[nodiscard]] std::string shards_dir() const { return dir + "/shards"; }
  [[nodiscard]] std::string logs_dir() const { return dir + "/logs"; }
  [[nodiscard]] std::string shard_table(std::size_t i) const {
    return shards_dir() + "/shard-" + std::to_string(i) + ".json";
  }
  [[nodiscard]] std::string shard_log(std::size_t i, std::int64_t array_job) const {
    return logs_dir() + "/shard-" + std::to_string(i) + "." + std::to_string(array_job) + ".log";
  }
  [[nodiscard]] std::string merged() const { return dir + "/merged.json"; }
  [[nodiscard]] std::string merged_junit() const { return dir + "/merged.xml"; }
};

struct Submission {
  std::int64_t array_job = 0, merge_job = 0;
  std::vector<int> tasks;
  std::int64_t submitted_at_ms = 0;
};

// DIR/fleet.json: which sweep the directory holds and every submission made for it.
struct Manifest {
  std::string sweep;        // the sweep's name
  std::string sweep_hash;   // of DIR/sweep.toml's text
  std::string source;       // the sweep file submitted, as given
  std::size_t shards = 0;
  std::size_t jobs = 0;
  std::vector<Submission> submissions;

  // The latest submission that ran shard `i`, or nullptr.
  [[nodiscard]] const Submission* latest_for(std::size_t i) const {
    for (auto it = submissions.rbegin(); it != submissions.rend(); ++it) {
      if (std::find(it->tasks.begin(), it->tasks.end(), static_cast<int>(i)) != it->tasks.end()) return &*it;
    }
    return nullptr;
  }
};

json manifest_to_json(const Manifest& m) {
  json subs = json::array();
  for (const auto& s : m.submissions) {
    subs.push_back({{"array_job", s.array_job},
                    {"merge_job", s.merge_job},
                    {"tasks", slurm::task_list(s.tasks)},
                    {"submitted_at_ms", s.submitted_at_ms}});
  }
  return {{"format", k_manifest_format}, {"sweep", m.sweep},   {"sweep_hash", m.sweep_hash},
          {"source", m.source},          {"shards", m.shards}, {"jobs", m.jobs},
          {"submissions", subs}};
}

// The manifest of `layout`, nullopt when there is none. Errors ("bad_fleet") name the file.
Result<std::optional<Manifest>> read_manifest(const Layout& layout) {
  if (!fs::exists(layout.manifest())) return std::optional<Manifest>();
  auto text = replay::read_text_file(layout.manifest());
  if (!text) return text.error();
  const json doc = json::parse(*text, nullptr, false);
  if (!doc.is_object() || doc.value("format", std::string()) != k_manifest_format) {
    return make_error(ErrorCode::bad_fleet, layout.manifest() + ": expected a fleet manifest (\"format\": \"" +
                                       k_manifest_format + "\")");
  }
  try {
    Manifest m;
    m.sweep = doc.value("sweep", std::string());
    m.sweep_hash = doc.value("sweep_hash", std::string());
    m.source = doc.value("source", std::string());
    m.shards = doc.at("shards").get<std::size_t>();
    m.jobs = doc.value("jobs", std::size_t{0});
    for (const auto& s : doc.value("submissions", json::array())) {
      m.submissions.push_back({s.at("array_job").get<std::int64_t>(), s.value("merge_job", std::int64_t{0}),
                               slurm::expand_task_ids(s.value("tasks", std::string())),
                               s.value("submitted_at_ms", std::int64_t{0})});
    }
    return std::optional<Manifest>(std::move(m));
  } catch (const json::exception& e) {
    return make_error(ErrorCode::bad_fleet, layout.manifest() + ": " + e.what());
  }
}

// --- what became of each shard ------------------------------------------------------------------

struct ShardStatus {
  std::size_t index = 0;
  std::string state;        // done, failed, pending, running, missing
  std::string why;          // for failed and missing: what Slurm or the table says
  std::string node;
  std::string slurm_state;  // "" when Slurm was not asked or does not know the task
  std::int64_t job_id = 0, array_job = 0;
  std::string exit_code;
  std::string log;          // "" when unknown
  std::optional<tableio::Table> table;
};

// Reads each shard's table and asks Slurm about the tasks the manifest submitted. `slurm_error`
// receives a Slurm error once (the states are then what the files say).
std::vector<ShardStatus> collect_shards(const Layout& layout, const std::optional<Manifest>& manifest,
                                        std::size_t shards, std::string& slurm_error) {
  std::map<std::int64_t, std::map<int, slurm::TaskState>> known;  // array job -> tasks
  std::vector<ShardStatus> out;
  for (std::size_t i = 1; i <= shards; ++i) {
    ShardStatus s;
    s.index = i;
    const Submission* sub = manifest ? manifest->latest_for(i) : nullptr;
    const slurm::TaskState* task = nullptr;
    if (sub != nullptr) {
      s.array_job = sub->array_job;
      s.log = layout.shard_log(i, sub->array_job);
      if (known.count(sub->array_job) == 0) {
        auto tasks = slurm::array_tasks(sub->array_job);
        if (!tasks && slurm_error.empty()) slurm_error = tasks.error().message;
        known[sub->array_job] = tasks ? *tasks : std::map<int, slurm::TaskState>{};
      }
      auto& tasks = known[sub->array_job];
      if (auto it = tasks.find(static_cast<int>(i)); it != tasks.end()) task = &it->second;
    }
    if (task != nullptr) {
      s.slurm_state = task->state;
      s.node = task->node;
      s.job_id = task->job_id;
      s.exit_code = task->exit_code;
    }
    const std::string path = layout.shard_table(i);
    std::string table_problem;
    if (fs::exists(path)) {
      auto text = replay::read_text_file(path);
      auto table = text ? tableio::read_table(*text, path) : Result<tableio::Table>(text.error());
      if (table) s.table = std::move(*table);
      else table_problem = table.error().message;
    }
    if (task != nullptr && slurm::is_active(task->state)) {
      s.state = task->state == "PENDING" ? "pending" : "running";
      s.why = task->reason;
    } else if (s.table) {
      const auto& p = s.table->provenance;
      const auto failed = p.value("failed_jobs", std::int64_t{0}) + p.value("rejected_jobs", std::int64_t{0});
      if (s.node.empty()) s.node = p.value("node", std::string());
      if (failed > 0) {
        s.state = "failed";
        s.why = std::to_string(failed) + " of " + std::to_string(p.value("jobs", std::int64_t{0})) +
                " jobs failed or were rejected";
      } else {
        s.state = "done";
      }
    } else if (task != nullptr) {
      s.state = "failed";
      s.why = "Slurm " + task->state + (task->exit_code.empty() ? "" : " (exit " + task->exit_code + ")") +
              (task->reason.empty() ? "" : ", " + task->reason) + "; no table " +
              (table_problem.empty() ? "at " + path : "(" + table_problem + ")");
    } else {
      s.state = "missing";
      s.why = table_problem.empty() ? "no table at " + path : table_problem;
      if (sub == nullptr) s.why += manifest ? "; never submitted" : "";
      else s.why += "; Slurm no longer knows array job " + std::to_string(sub->array_job);
    }
    out.push_back(std::move(s));
  }
  return out;
}

ordered_json shard_json(const ShardStatus& s) {
  ordered_json j = {{"shard", s.index}, {"state", s.state}};
  if (!s.why.empty()) j["why"] = s.why;
  j["node"] = s.node;
  if (!s.slurm_state.empty()) j["slurm_state"] = s.slurm_state;
  if (s.array_job > 0) j["array_job"] = s.array_job;
  if (s.job_id > 0) j["job"] = s.job_id;
  if (!s.exit_code.empty()) j["exit_code"] = s.exit_code;
  if (!s.log.empty()) j["log"] = s.log;
  j["rows"] = s.table ? s.table->rows.size() : 0;
  return j;
}

void print_shards(const std::vector<ShardStatus>& shards, std::ostream& out) {
  Table table({{"SHARD", Align::right}, {"STATE"}, {"NODE"}, {"SLURM"}, {"ROWS", Align::right},
               {"LOG"}, {"WHY"}});
  for (const auto& s : shards) {
    const std::string slurm_text =
        s.array_job > 0 ? std::to_string(s.array_job) + "_" + std::to_string(s.index) +
                              (s.slurm_state.empty() ? "" : " " + s.slurm_state)
                        : "-";
    table.add_row({std::to_string(s.index), s.state, s.node.empty() ? "-" : s.node, slurm_text,
                   s.table ? std::to_string(s.table->rows.size()) : "-",
                   s.log.empty() ? "-" : s.log, s.why.empty() ? "-" : s.why});
  }
  table.print(out);
}

// The file naming the last fleet directory this user submitted, for `fleet status` without DIR.
std::string last_fleet_file() {
  return resolve_paths(path_env_from_process()).state_dir + "/last-fleet";
}

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
  std::string home = options.home;
  if (home.empty()) {
    const std::string tmp = env("TMPDIR").empty() ? "/tmp" : env("TMPDIR");
    std::string pattern = tmp + "/ktune-shard-" + std::to_string(shard->index) + ".XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return report_error(io, ErrorCode::io_error, "cannot create a directory under " + tmp + ": " +
                                              std::strerror(errno), k_exit_failed);
    }
    home = pattern;
  }
  ::setenv("KTUNE_HOME", home.c_str(), 1);
  watch_termination();
  PrivateInstance instance(home, options.home.empty());
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
  ordered_json provenance = {{"kind", "fleet-shard"},
                             {"sweep", parsed->name},
                             {"shard", std::to_string(shard->index) + "/" + std::to_string(shard->count)},
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

  io.err << "fleet shard " << options.shard << " of sweep " << parsed->name << " on " << host
         << " (KTUNE_HOME " << home << ")\n";
  Output log_io{io.err, io.err, false, false};
  const int started = daemon_start({}, {options.config, options.kernel_dirs, {}}, log_io);
  if (started != k_exit_ok) {
    io.err << "ktune fleet shard: the private ktuned did not start (KTUNE_HOME " << home << ")\n";
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

// --- submission ---------------------------------------------------------------------------------

int submit_slurm_sweep(const GlobalOptions& global, const SweepOptions& options,
                       const SlurmSubmitOptions& slurm_options, Output& io) {
  auto fail = [&](ErrorCode code, const std::string& message) {
    return report_error(io, code, message, k_exit_failed);
  };
  if (options.out.empty()) return fail(ErrorCode::usage, "--slurm needs --out DIR: the fleet's output directory");
  if (options.shard != "1/1") return fail(ErrorCode::usage, "--slurm submits every shard; --shard is not an option of it");
  if (options.dry_run) return fail(ErrorCode::usage, "--slurm does not take --dry-run");
  if (!options.junit.empty()) {
    return fail(ErrorCode::usage, "with --slurm the merge job writes the JUnit report to DIR/merged.xml; "
                         "--junit is not an option of it");
  }
  if (!options.baseline.empty() && !fs::exists(options.baseline)) {
    return fail(ErrorCode::not_found, "--baseline " + options.baseline + ": no such file");
  }
  if (!options.baseline.empty()) {
    if (auto r = parse_max_regression(options.max_regression); !r) return fail(r.error().code, r.error().message);
  }
  auto text = replay::read_text_file(options.file);
  if (!text) return fail(text.error().code, text.error().message);
  auto parsed = sweep::parse_sweep(*text, options.file);
  if (!parsed) return fail(parsed.error().code, parsed.error().message);
  if (parsed->jobs.empty()) return fail(ErrorCode::sweep_error, options.file + ": the sweep has no jobs");
  const std::size_t shards = slurm_options.shards > 0 ? slurm_options.shards : parsed->jobs.size();
  if (shards > parsed->jobs.size()) {
    return fail(ErrorCode::usage, "--shards " + std::to_string(shards) + ": the sweep has only " +
                             std::to_string(parsed->jobs.size()) + " jobs");
  }

  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return fail(ErrorCode::io_error, "cannot locate the ktune executable (/proc/self/exe): " + ec.message());
  const std::string ktune = self.string();

  const Layout layout{absolute_path(options.out)};
  for (const auto& d : {layout.dir, layout.shards_dir(), layout.logs_dir()}) {
    fs::create_directories(d, ec);
    if (ec) return fail(ErrorCode::io_error, "cannot create " + d + ": " + ec.message());
  }
  auto existing = read_manifest(layout);
  if (!existing) return fail(existing.error().code, existing.error().message);
  Manifest manifest;
  const std::string sweep_hash = hash_hex(*text);
  if (*existing) {
    manifest = **existing;
    if (manifest.sweep_hash != sweep_hash) {
      return fail(ErrorCode::bad_fleet, layout.dir + " holds the shards of another sweep file (" +
                                   manifest.source + ", now changed or different); submit to a new --out");
    }
    if (slurm_options.shards > 0 && slurm_options.shards != manifest.shards) {
      return fail(ErrorCode::bad_fleet, layout.dir + " holds " + std::to_string(manifest.shards) +
                                   " shards; --shards " + std::to_string(slurm_options.shards) +
                                   " would split the jobs differently; submit to a new --out");
    }
  } else {
    manifest.sweep = parsed->name;
    manifest.sweep_hash = sweep_hash;
    manifest.source = absolute_path(options.file);
    manifest.shards = shards;
    manifest.jobs = parsed->jobs.size();
    if (auto w = write_file_atomic(layout.sweep(), *text); !w) return fail(w.error().code, w.error().message);
  }

  // Only the shards that are neither done nor still queued or running.
  std::string slurm_error;
  const auto states = collect_shards(layout, *existing, manifest.shards, slurm_error);
  if (!slurm_error.empty()) return fail(ErrorCode::slurm_error, slurm_error);
  std::vector<int> tasks;
  std::size_t done = 0, active = 0;
  for (const auto& s : states) {
    if (s.state == "done") ++done;
    else if (s.state == "pending" || s.state == "running") ++active;
    else tasks.push_back(static_cast<int>(s.index));
  }
  if (tasks.empty()) {
    if (global.json) {
      print_json(io, {{"out", layout.dir}, {"submitted", false}, {"done", done}, {"active", active}});
    } else {
      io.out << "nothing to submit: " << done << " of " << manifest.shards << " shards done, "
             << active << " queued or running (ktune fleet status " << layout.dir << ")\n";
    }
    return k_exit_ok;
  }

  // The shards' ktuned config travels with the fleet, like the sweep file.
  std::string config;
  if (!slurm_options.config.empty()) {
    auto config_text = replay::read_text_file(slurm_options.config);
    if (!config_text) return fail(config_text.error().code, config_text.error().message);
    if (auto w = write_file_atomic(layout.config(), *config_text); !w) return fail(w.error().code, w.error().message);
    config = layout.config();
  }

  std::string header = "#!/bin/sh\n";
  std::vector<std::string> common;
  if (!slurm_options.partition.empty()) common.push_back("--partition=" + slurm_options.partition);
  if (!slurm_options.time_limit.empty()) common.push_back("--time=" + slurm_options.time_limit);

  std::string shard_script =
      header + "# Written by `ktune sweep --slurm`: array task i runs shard i of " +
      std::to_string(manifest.shards) + " of the sweep\n# (ktune fleet shard; docs/deploy.md).\n" +
      "#SBATCH --job-name=ktune-" + manifest.sweep + "\n#SBATCH --ntasks=1\n" +
      "#SBATCH --output=" + layout.logs_dir() + "/shard-%a.%A.log\n";
  for (const auto& o : common) shard_script += "#SBATCH " + o + "\n";
  if (slurm_options.gpus_per_task > 0) {
    shard_script += "#SBATCH --gpus-per-task=" + std::to_string(slurm_options.gpus_per_task) + "\n";
  }
  shard_script += "exec " + sh_quote(ktune) + " fleet shard " + sh_quote(layout.sweep()) +
                  " --shard \"$SLURM_ARRAY_TASK_ID/" + std::to_string(manifest.shards) + "\" --out " +
                  sh_quote(layout.dir);
  if (!config.empty()) shard_script += " --config " + sh_quote(config);
  for (const auto& d : slurm_options.kernel_dirs) shard_script += " --kernel-dir " + sh_quote(absolute_path(d));
  if (options.remeasure) shard_script += " --remeasure";
  shard_script += "\n";

  std::string merge_script =
      header + "# Written by `ktune sweep --slurm`: merges the shards once the array has ended.\n" +
      "#SBATCH --job-name=ktune-merge-" + manifest.sweep + "\n#SBATCH --ntasks=1\n" +
      "#SBATCH --output=" + layout.logs_dir() + "/merge.%j.log\n";
  for (const auto& o : common) merge_script += "#SBATCH " + o + "\n";
  merge_script += "exec " + sh_quote(ktune) + " fleet merge " + sh_quote(layout.dir) + " --output " +
                  sh_quote(layout.merged()) + " --junit " + sh_quote(layout.merged_junit());
  if (!options.baseline.empty()) {
    merge_script += " --baseline " + sh_quote(absolute_path(options.baseline)) +
                    " --max-regression " + sh_quote(options.max_regression);
  }
  merge_script += "\n";
  for (const auto& [path, script] : {std::pair{layout.shard_script(), shard_script},
                                     std::pair{layout.merge_script(), merge_script}}) {
    if (auto w = write_file_atomic(path, script); !w) return fail(w.error().code, w.error().message);
    fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec, ec);
  }

  std::string array = slurm::task_list(tasks);
  if (slurm_options.max_parallel > 0) array += "%" + std::to_string(slurm_options.max_parallel);
  auto array_job = slurm::submit({"--array=" + array, layout.shard_script()});
  if (!array_job) return fail(array_job.error().code, array_job.error().message);
  auto merge_job = slurm::submit({"--dependency=afterany:" + std::to_string(*array_job), layout.merge_script()});
  manifest.submissions.push_back({*array_job, merge_job ? *merge_job : 0, tasks, now_ms()});
  if (auto w = write_file_atomic(layout.manifest(), manifest_to_json(manifest).dump(2) + "\n"); !w) {
    return fail(w.error().code, w.error().message + " (array job " + std::to_string(*array_job) +
                                    " is submitted)");
  }
  if (auto state = SafeDir::open(resolve_paths(path_env_from_process()).state_dir, DirCreate::yes)) {
    (void)state->write_atomic("last-fleet", layout.dir + "\n");
  }
  if (!merge_job) {
    return fail(merge_job.error().code, "array job " + std::to_string(*array_job) +
                                            " is submitted, the merge job is not: " +
                                            merge_job.error().message);
  }
  if (global.json) {
    print_json(io, {{"out", layout.dir},
                    {"submitted", true},
                    {"sweep", manifest.sweep},
                    {"shards", manifest.shards},
                    {"tasks", slurm::task_list(tasks)},
                    {"array_job", *array_job},
                    {"merge_job", *merge_job},
                    {"script", layout.shard_script()},
                    {"merged", layout.merged()}});
  } else {
    io.out << "sweep " << manifest.sweep << ": shards " << slurm::task_list(tasks) << " of "
           << manifest.shards << " submitted as array job " << *array_job << ", merge job "
           << *merge_job << " (afterany)\n"
           << "logs " << layout.logs_dir() << "/shard-<i>." << *array_job << ".log; merged table "
           << layout.merged() << "\nktune fleet status " << layout.dir << '\n';
  }
  return k_exit_ok;
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
  // Every key of every shard, by (kernel, shape, dtype, device fingerprint, source hash): shards
  // hold different jobs, so a key in two tables is a sweep that lists it twice; the import
  // policy decides.
  tableio::Table merged;
  ordered_json from = ordered_json::array();
  std::size_t conflicts = 0;
  for (const auto& s : states) {
    if (!s.table) continue;
    auto result = tableio::merge(merged, *s.table, *policy);
    conflicts += result.conflicts.size();
    merged = std::move(result.table);
    ordered_json p = s.table->provenance;
    p["rows"] = s.table->rows.size();
    from.push_back(p);
  }
  merged.host = tableio::local_host_name();
  merged.exported_at_ms = now_ms();
  ordered_json problems = ordered_json::array();
  for (const auto& s : states) {
    if (s.state != "done") problems.push_back(shard_json(s));
  }
  merged.provenance = {{"kind", "fleet-merge"},
                       {"sweep", *manifest ? (*manifest)->sweep : std::string()},
                       {"shards", count},
                       {"merged_from", from},
                       {"incomplete", problems}};
  const std::string output = options.output.empty() ? layout.merged() : options.output;
  if (auto w = write_file_atomic(output, tableio::write_json(merged)); !w) return fail(w.error().code, w.error().message);

  // The shards as test cases, then the comparison with the baseline (or the winners).
  std::vector<tableio::JunitCase> shard_cases;
  for (const auto& s : states) {
    std::string text = "shard " + std::to_string(s.index) + "/" + std::to_string(count) + ": " + s.state;
    if (!s.node.empty()) text += " on " + s.node;
    if (s.table) text += ", " + std::to_string(s.table->rows.size()) + " rows";
    if (!s.why.empty()) text += "; " + s.why;
    if (!s.log.empty()) text += "; log " + s.log;
    shard_cases.push_back(
        {.classname = "ktune.fleet.shards", .name = "shard " + std::to_string(s.index),
         .failure = s.state == "done" ? "" : "shard " + std::to_string(s.index) + " " + s.state,
         .text = text});
  }
  std::vector<tableio::JunitSuite> suites{tableio::junit_suite("ktune.fleet.shards", shard_cases)};
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
  if (global.json) {
    ordered_json list = ordered_json::array();
    for (const auto& s : states) list.push_back(shard_json(s));
    ordered_json out = {{"output", output},  {"rows", merged.rows.size()}, {"shards", list},
                        {"incomplete", incomplete}, {"conflicts", conflicts},
                        {"regressions", regressions}};
    if (!options.junit.empty()) out["junit"] = options.junit;
    if (!slurm_error.empty()) out["slurm_error"] = slurm_error;
    print_json(io, out);
  } else {
    io.out << "merged " << (count - incomplete) << " of " << count << " shards: " << merged.rows.size()
           << " rows to " << output << '\n';
    if (incomplete > 0) {
      io.out << incomplete << " shard(s) not done:\n";
      std::vector<ShardStatus> not_done;
      for (const auto& s : states) {
        if (s.state != "done") not_done.push_back(s);
      }
      print_shards(not_done, io.out);
      io.out << "resubmit them: the same `ktune sweep FILE --slurm --out " << layout.dir << "`\n";
    }
    if (!markdown.empty()) io.out << markdown;
    if (!slurm_error.empty()) io.err << "ktune fleet merge: " << slurm_error << '\n';
  }
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
