// ktuned's lifecycle with real processes: idle workers and an idle daemon exit on their own
// (millisecond timeouts from the config), a kill -9 in the middle of a tune loses nothing and
// the restarted daemon completes the job with each config measured once, SIGTERM interrupts a
// job that the next start resumes, and `ktune` starts a daemon when none runs, exactly one even
// when two start at once.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/process_state.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 30s;
constexpr auto k_job_timeout = 300s;

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

std::vector<std::string> daemon_args(const TempDir& home) {
  return {"--config", (home.path() / "ktuned.toml").string(), "--kernel-dir",
          ktune::test::source_path("/kernels_src")};
}

Connection connect(const std::string& socket) {
  auto c = Connection::connect(socket);
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c.ok());
  return std::move(*c);
}

json ok_result(Connection& c, json request) {
  auto reply = c.request(std::move(request), {}, k_reply_timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

// Polls `job` until `done(job)` holds; the job object of the last answer.
template <typename Pred>
json wait_job(Connection& c, std::int64_t id, Pred done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    json job = ok_result(c, {{"op", "job"}, {"job", id}}).at("job");
    if (done(job) || std::chrono::steady_clock::now() > deadline) return job;
    std::this_thread::sleep_for(20ms);
  }
}

struct Rows {
  std::size_t count = 0;
  std::size_t distinct = 0;
  std::size_t reused = 0; // rows copied from earlier jobs
  std::string state;
  std::int64_t total = 0;
  std::string integrity;
};

// Reads the job's rows and runs PRAGMA integrity_check with plain SQLite, read-only.
Rows inspect(const std::string& db_path, std::int64_t job_id) {
  Rows rows;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  auto text = [&](const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  };
  const std::string id = std::to_string(job_id);
  rows.count = std::stoul(text("SELECT COUNT(*) FROM results WHERE job_id = " + id));
  rows.distinct = std::stoul(text("SELECT COUNT(DISTINCT config) FROM results WHERE job_id = " + id));
  rows.reused = std::stoul(text("SELECT COUNT(*) FROM results WHERE job_id = " + id +
                                " AND reason LIKE 'reused from job %'"));
  rows.state = text("SELECT state FROM jobs WHERE id = " + id);
  rows.total = std::stoll(text("SELECT total FROM jobs WHERE id = " + id));
  rows.integrity = text("PRAGMA integrity_check");
  sqlite3_close(db);
  return rows;
}

// Runs bin_dir()/ktune with KTUNE_HOME=`home` plus `extra_env`; its exit code.
pid_t spawn_ktune(const std::string& home, const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& extra_env) {
  std::vector<std::string> argv_text = {ktune::test::bin_path("/ktune")};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  env.erase("KTUNE_DAEMON");
  env.erase("KTUNE_NO_AUTOSTART");
  env["KTUNE_HOME"] = home;
  for (const auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> env_text;
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int read_pid(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

// Whether `pid` has exited within `timeout`. An exited daemon this test did not start (autostart
// detaches it) is its reaper's to collect, which may take its time: a zombie counts as gone.
bool wait_gone(int pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const bool exited = ::kill(pid, 0) != 0 && errno == ESRCH;
    if (exited || ktune::test::process_state(pid) == 'Z') return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

std::size_t count_lines_with(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

json tune_reduce(Connection& c, bool wait) {
  return ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=65536"},
                       {"wait", wait}});
}

// Starts a daemon in `home`, starts a job with `start` (its id), stops the daemon with SIGTERM once
// the job has two results, and checks the daemon exited 0; the job's id.
std::int64_t interrupt_job(const TempDir& home, const std::function<std::int64_t(Connection&)>& start) {
  DaemonProcess daemon(home.str(), daemon_args(home));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  Connection c = connect(daemon.socket());
  const std::int64_t id = start(c);
  const json job = wait_job(c, id, [](const json& j) { return j.at("done") >= 2; }, k_job_timeout);
  REQUIRE(job.at("done") >= 2);
  daemon.signal(SIGTERM);
  CHECK(daemon.wait_exit(30s) == std::optional<int>(0));
  return id;
}

// Starts a daemon in `home` and waits for job `id` (resumed) to end; the job object.
json resume_job(const TempDir& home, std::int64_t id) {
  DaemonProcess daemon(home.str(), daemon_args(home));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  Connection c = connect(daemon.socket());
  return wait_job(c, id, [](const json& j) { return j.at("state") != "queued" && j.at("state") != "running"; },
                  k_job_timeout);
}

} // namespace

TEST_CASE("idle workers and an idle daemon exit on their own", "[integration][lifecycle]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\nidle_s = 0.4\nworker_idle_s = 0.1\n" + k_tiny_measure);
  DaemonProcess daemon(home.str(), daemon_args(home));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  {
    Connection c = connect(daemon.socket());
    const json done = ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"},
                                    {"shape", "N=4096"}, {"budget", 2}, {"wait", true}});
    CHECK(done.at("job").at("state") == "done");
    // Workers go once idle for worker_idle_s; a connected client keeps the daemon alive.
    json workers;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    do {
      std::this_thread::sleep_for(50ms);
      workers = ok_result(c, {{"op", "stats"}}).at("workers");
    } while ((workers.at("compile") != 0 || workers.at("bench") != 0) &&
             std::chrono::steady_clock::now() < deadline);
    CHECK(workers.at("compile") == 0);
    CHECK(workers.at("bench") == 0);
    std::this_thread::sleep_for(800ms);
    CHECK(ok_result(c, {{"op", "stats"}}).at("pid") == daemon.ready_pid());
  }
  // No client and no job: gone after idle_s, exit code 0, socket removed.
  CHECK(daemon.wait_exit(20s) == std::optional<int>(0));
  CHECK_FALSE(std::filesystem::exists(daemon.socket()));
}

TEST_CASE("kill -9 in the middle of a tune loses nothing and the restart completes the job",
          "[integration][lifecycle]") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  std::int64_t id = 0;
  {
    DaemonProcess daemon(home.str(), daemon_args(home));
    REQUIRE(daemon.wait_ready(k_start_timeout));
    Connection c = connect(daemon.socket());
    id = tune_reduce(c, false).at("job").get<std::int64_t>();
    const json job = wait_job(c, id, [](const json& j) { return j.at("done") >= 3; }, k_job_timeout);
    REQUIRE(job.at("done") >= 3);
    daemon.signal(SIGKILL);
    CHECK(daemon.wait_exit(10s) == std::optional<int>(128 + SIGKILL));
  }
  const Rows killed = inspect(home.str() + "/ktune.db", id);
  CHECK(killed.state == "running");
  CHECK(killed.count >= 3);

  DaemonProcess daemon(home.str(), daemon_args(home));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  Connection c = connect(daemon.socket());
  const json job = wait_job(c, id, [](const json& j) { return j.at("state") != "queued" &&
                                                            j.at("state") != "running"; },
                            k_job_timeout);
  CHECK(job.at("state") == "done");
  const Rows rows = inspect(home.str() + "/ktune.db", id);
  CHECK(rows.count == static_cast<std::size_t>(rows.total));
  CHECK(rows.distinct == rows.count);
  CHECK(job.at("done") == rows.total);
  CHECK(rows.integrity == "ok");
}

TEST_CASE("SIGTERM interrupts a running job and the next start resumes it",
          "[integration][lifecycle]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\nstop_grace_s = 5\n" + k_tiny_measure);
  const std::int64_t id =
      interrupt_job(home, [](Connection& c) { return tune_reduce(c, false).at("job").get<std::int64_t>(); });
  const Rows stopped = inspect(home.str() + "/ktune.db", id);
  CHECK(stopped.state == "interrupted");
  CHECK(stopped.integrity == "ok");
  CHECK(stopped.count >= 2);

  const json job = resume_job(home, id);
  CHECK(job.at("state") == "done");
  const Rows rows = inspect(home.str() + "/ktune.db", id);
  CHECK(rows.count == static_cast<std::size_t>(rows.total));
  CHECK(rows.distinct == rows.count);
}

TEST_CASE("a resumed job runs with the options it was asked with", "[integration][lifecycle]") {
  TempDir home;
  // Each candidate measures for at least 5 ms: the second job's compiles are all cached, and
  // with tiny measurements its 35 candidates could all be stored between the poll that saw two
  // done and the SIGTERM, leaving nothing to resume.
  std::string measure = k_tiny_measure;
  const std::string tiny = "max_time_s = 0.01\nmin_time_s = 0\n";
  measure.replace(measure.find(tiny), tiny.size(), "max_time_s = 0.02\nmin_time_s = 0.005\n");
  home.write("ktuned.toml", "[daemon]\nstop_grace_s = 5\n" + measure);
  std::int64_t first = 0;
  const std::int64_t again = interrupt_job(home, [&](Connection& c) {
    first = tune_reduce(c, false).at("job").get<std::int64_t>();
    REQUIRE(wait_job(c, first, [](const json& j) { return j.at("state") == "done"; }, k_job_timeout)
                .at("state") == "done");
    // The same key again, asked to measure every config anew and with a job priority.
    return ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=65536"},
                         {"remeasure", true}, {"priority", 3}, {"wait", false}})
        .at("job")
        .get<std::int64_t>();
  });
  REQUIRE(again != first);
  const Rows stopped = inspect(home.str() + "/ktune.db", again);
  REQUIRE(stopped.state == "interrupted");
  REQUIRE(stopped.count < static_cast<std::size_t>(stopped.total)); // something is left to resume
  CHECK(stopped.reused == 0);

  const json job = resume_job(home, again);
  CHECK(job.at("state") == "done");
  CHECK(job.at("options").at("remeasure") == true);
  CHECK(job.at("options").at("priority") == 3);
  CHECK(job.at("options").at("retry_failed") == false);
  const Rows rows = inspect(home.str() + "/ktune.db", again);
  CHECK(rows.count == static_cast<std::size_t>(rows.total));
  // Measured, not copied from the first job, after the restart as before it.
  CHECK(rows.reused == 0);
  CHECK(inspect(home.str() + "/ktune.db", first).count == rows.count);
}

TEST_CASE("ktune starts a daemon when none runs and two racing starts end with one",
          "[integration][lifecycle][autostart]") {
  TempDir home;
  const std::string pid_file = home.str() + "/ktuned.pid";
  const std::string log = home.str() + "/log/ktuned.log";

  SECTION("two concurrent commands start exactly one daemon, which exits after idle_s") {
    const std::map<std::string, std::string> env = {{"KTUNE_AUTOSTART_IDLE_S", "1"}};
    const pid_t a = spawn_ktune(home.str(), {"jobs"}, env);
    const pid_t b = spawn_ktune(home.str(), {"kernels"}, env);
    CHECK(wait_child(a) == 0);
    CHECK(wait_child(b) == 0);
    CHECK(count_lines_with(log, "listening on") == 1);
    const int pid = read_pid(pid_file);
    REQUIRE(pid > 0);
    CHECK(::kill(pid, 0) == 0);
    CHECK(wait_gone(pid, 30s));
    CHECK_FALSE(std::filesystem::exists(home.str() + "/ktuned.sock"));
  }

  SECTION("ten concurrent `ktune daemon start`: one starts, the others report it and exit 0") {
    std::vector<pid_t> starts;
    for (int i = 0; i < 10; ++i) starts.push_back(spawn_ktune(home.str(), {"daemon", "start"}, {}));
    for (const pid_t start : starts) CHECK(wait_child(start) == 0);
    CHECK(count_lines_with(log, "listening on") == 1);
    const int pid = read_pid(pid_file);
    REQUIRE(pid > 0);
    ::kill(pid, SIGTERM);
    CHECK(wait_gone(pid, 30s));
  }

  SECTION("a killed daemon's stale socket and pid file do not stop the next start") {
    const std::map<std::string, std::string> env = {{"KTUNE_AUTOSTART_IDLE_S", "30"}};
    REQUIRE(wait_child(spawn_ktune(home.str(), {"jobs"}, env)) == 0);
    const int first = read_pid(pid_file);
    REQUIRE(first > 0);
    ::kill(first, SIGKILL);
    REQUIRE(wait_gone(first, 10s));
    CHECK(std::filesystem::exists(home.str() + "/ktuned.sock"));  // left behind
    REQUIRE(wait_child(spawn_ktune(home.str(), {"jobs"}, env)) == 0);
    const int second = read_pid(pid_file);
    CHECK(second > 0);
    CHECK(second != first);
    ::kill(second, SIGTERM);
    CHECK(wait_gone(second, 30s));
  }
}
