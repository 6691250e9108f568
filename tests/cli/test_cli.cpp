// The real `ktune` binary, run as a user would, with KTUNE_HOME in a temporary directory.
#include "tests/support/paths.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;

const std::string k_bin_dir = ktune::test::bin_dir();
const std::string k_ktune = k_bin_dir + "/ktune";

struct Run {
  int code = -1;
  std::string out, err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs ktune with `args`, KTUNE_HOME=<home>/home and the given extra environment; stdout and
// stderr go through files in `home` so a long-lived daemon child cannot hold a pipe open.
Run run_ktune(const ktune::test::TempDir& home, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& extra_env = {}) {
  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos) env_map[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  env_map.erase("KTUNE_DAEMON");
  env_map.erase("KTUNE_NO_AUTOSTART");  // another test case of this binary may have set it
  env_map["KTUNE_HOME"] = (home.path() / "home").string();
  for (const auto& [k, v] : extra_env) env_map[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env_map) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> full{k_ktune};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);

  const std::string out_path = (home.path() / "stdout.txt").string();
  const std::string err_path = (home.path() / "stderr.txt").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, k_ktune.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  Run run;
  if (rc != 0) {
    run.err = std::string("posix_spawn: ") + std::strerror(rc);
    return run;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  return run;
}

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

fs::path write_script(const ktune::test::TempDir& dir, const std::string& name,
                      const std::string& body) {
  auto path = dir.write(name, "#!/bin/sh\n" + body);
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

} // namespace

TEST_CASE("ktune binary without a daemon", "[cli]") {
  ktune::test::TempDir home;

  SECTION("jobs exits 1 with the not-running message when auto-start is off") {
    auto r = run_ktune(home, {"jobs"}, {{"KTUNE_NO_AUTOSTART", "1"}});
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("ktuned is not running (socket " +
                                      (home.path() / "home" / "ktuned.sock").string()) &&
                          Catch::Contains("ktune daemon start"));
  }

  SECTION("--help exits 0 and mentions every command and the exit codes") {
    auto r = run_ktune(home, {"--help"});
    CHECK(r.code == 0);
    for (const char* command : {"daemon", "kernels", "tune", "job", "jobs", "query", "--json",
                                "--socket", "Exit codes", "3 not tuned"})
      CHECK_THAT(r.out, Catch::Contains(command));
    auto daemon = run_ktune(home, {"daemon", "--help"});
    CHECK(daemon.code == 0);
    for (const char* command : {"start", "stop", "status"})
      CHECK_THAT(daemon.out, Catch::Contains(command));
    auto tune = run_ktune(home, {"tune", "--help"});
    CHECK(tune.code == 0);
    CHECK_THAT(tune.out, Catch::Contains("--shape") && Catch::Contains("--wait") &&
                             Catch::Contains("Example"));
  }

  SECTION("tune without --shape fails naming --shape") {
    auto r = run_ktune(home, {"tune", "gemm"});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("--shape"));
  }

  SECTION("a misspelt option is named as unknown, with the nearest names, before any missing one") {
    auto r = run_ktune(home, {"tune", "gemm", "--shpae", "M=1"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown option '--shpae' for `ktune tune`") &&
                          Catch::Contains("did you mean '--shape'?"));
    CHECK_THAT(r.err, !Catch::Contains("is required"));
    auto json = run_ktune(home, {"--json", "query", "gemm", "--shape", "M=1", "--devcie", "cpu"});
    CHECK(json.code == 2);
    const auto error = nlohmann::json::parse(json.out)["error"];
    CHECK(error["code"] == "usage");
    CHECK_THAT(error["message"].get<std::string>(),
               Catch::Contains("unknown option '--devcie' for `ktune query`") &&
                   Catch::Contains("'--device'"));
    auto nested = run_ktune(home, {"daemon", "log", "--lnes", "5"});
    CHECK(nested.code == 2);
    CHECK_THAT(nested.err, Catch::Contains("unknown option '--lnes' for `ktune daemon log`") &&
                               Catch::Contains("'--lines'"));
  }

  SECTION("daemon start reports a daemon that exits before it is ready, with its log") {
    auto fake = write_script(home, "bin/fake-ktuned", "echo 'config_error: bad key [daemon].x'\nexit 3\n");
    auto r = run_ktune(home, {"daemon", "start"}, {{"KTUNE_DAEMON", fake.string()}});
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("exited with status 3 before it was ready") &&
                          Catch::Contains("config_error: bad key [daemon].x"));
    CHECK(fs::exists(home.path() / "home" / "log" / "ktuned.log"));
  }

  SECTION("daemon start passes --ready-fd and reports the ready pid") {
    auto fake = write_script(home, "bin/fake-ktuned",
                             "echo \"$@\" > \"$KTUNE_HOME/args\"\necho \"ready $$\" >&3\n");
    auto kernels = home.path() / "kernels";
    fs::create_directories(kernels);
    auto r = run_ktune(home, {"daemon", "start", "--kernel-dir", kernels.string()},
                       {{"KTUNE_DAEMON", fake.string()}});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::StartsWith("ktuned started (pid ") &&
                          Catch::Contains("socket " + (home.path() / "home" / "ktuned.sock").string()));
    CHECK(read_file(home.path() / "home" / "args") ==
          "--ready-fd 3 --kernel-dir " + kernels.string() + "\n");
  }

  SECTION("daemon start starts ktuned as autostart does: start lock, stale files cleared, who started it in the log") {
    auto fake = write_script(home, "bin/fake-ktuned", "echo \"ready $$\" >&3\n");
    // What a ktuned killed with -9 leaves behind; no process holds the instance lock.
    fs::create_directories(home.path() / "home");
    home.write("home/ktuned.pid", "999999\n");
    auto r = run_ktune(home, {"daemon", "start"}, {{"KTUNE_DAEMON", fake.string()}});
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK_FALSE(fs::exists(home.path() / "home" / "ktuned.pid"));
    CHECK(fs::exists(home.path() / "home" / "ktuned.sock.start.lock"));
    CHECK_THAT(read_file(home.path() / "home" / "log" / "ktuned.log"),
               Catch::Contains(" ktune daemon start: " + fake.string() + " --ready-fd 3\n"));
  }

  SECTION("daemon start names a missing ktuned") {
    auto r = run_ktune(home, {"daemon", "start"},
                       {{"KTUNE_DAEMON", (home.path() / "no-such-ktuned").string()}});
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("no-such-ktuned") && Catch::Contains("KTUNE_DAEMON"));
  }
}

TEST_CASE("ktune round trip with ktuned", "[cli][daemon]") {
  const std::string kernels_dir = ktune::test::source_dir() + "/kernels_src";
  if (!executable(k_bin_dir + "/ktuned") || !executable(k_bin_dir + "/ktune-worker") ||
      !fs::exists(kernels_dir + "/reduce_sum/kernel.toml")) {
    ktune::test::skip_test("needs " + k_bin_dir + "/ktuned, ktune-worker and " + kernels_dir +
                           "/reduce_sum");
  }
  ktune::test::TempDir home;
  auto config = home.write("ktuned.toml",
                           "[measure]\nmin_samples = 3\nmax_time_s = 0.02\nwarmup_ms = 1\n"
                           "flush_cache = false\nmin_time_s = 0\n");

  auto start = run_ktune(home, {"daemon", "start", "--config", config.string(), "--kernel-dir",
                                kernels_dir});
  INFO("daemon start: " << start.out << start.err);
  REQUIRE(start.code == 0);
  REQUIRE_THAT(start.out, Catch::StartsWith("ktuned started (pid "));
  // Stops the daemon however the test ends.
  struct Stopper {
    const ktune::test::TempDir& home;
    ~Stopper() { (void)run_ktune(home, {"daemon", "stop"}); }
  } stopper{home};

  auto again = run_ktune(home, {"daemon", "start"});
  CHECK(again.code == 0);
  CHECK_THAT(again.out, Catch::StartsWith("ktuned already running (pid "));

  auto status = run_ktune(home, {"daemon", "status"});
  CHECK(status.code == 0);
  CHECK_THAT(status.out, Catch::StartsWith("ktuned is running"));

  auto kernels = run_ktune(home, {"kernels"});
  CHECK(kernels.code == 0);
  CHECK_THAT(kernels.out, Catch::Contains("reduce_sum"));
  // Parameters in the spec's order (LANES before CHUNK), not sorted.
  CHECK_THAT(kernels.out, Catch::Contains("LANES(7),CHUNK(5)"));

  auto tune = run_ktune(home, {"tune", "reduce_sum", "--shape", "N=4096", "--wait"});
  INFO("tune: " << tune.out << tune.err);
  REQUIRE(tune.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(tune.out, m, std::regex("job ([0-9]+) done: ([0-9]+) candidates")));
  const std::string job_id = m[1];
  CHECK_THAT(tune.out, Catch::StartsWith("winner: LANES="));

  auto query = run_ktune(home, {"--json", "query", "reduce_sum", "--shape", "N=4096"});
  INFO("query: " << query.out << query.err);
  CHECK(query.code == 0);
  auto answer = nlohmann::json::parse(query.out, nullptr, false);
  REQUIRE(answer.is_object());
  CHECK(answer["rung"] == "exact");

  auto miss = run_ktune(home, {"query", "reduce_sum", "--shape", "N=8192"});
  CHECK(miss.code == 3);
  CHECK_THAT(miss.out, Catch::StartsWith("no tuned winner for reduce_sum N=8192, f32, cpu"));

  auto job = run_ktune(home, {"job", job_id});
  CHECK(job.code == 0);
  CHECK_THAT(job.out, Catch::StartsWith("job " + job_id + ": reduce_sum N=4096") &&
                          Catch::Contains("\n* LANES=") && Catch::Contains("  winner    LANES="));
  CHECK_THAT(job.out, !Catch::Contains("CHUNK=4096,LANES="));

  auto report_json =
      run_ktune(home, {"--json", "report", job_id, "-o", (home.path() / "r.html").string()});
  INFO("report: " << report_json.out << report_json.err);
  CHECK(report_json.code == 0);
  const auto report_result = nlohmann::json::parse(report_json.out, nullptr, false);
  REQUIRE(report_result.is_object());
  CHECK(report_result["jobs"] == 1);

  auto jobs = run_ktune(home, {"jobs"});
  CHECK(jobs.code == 0);
  CHECK_THAT(jobs.out, Catch::Contains("reduce_sum"));

  auto stop = run_ktune(home, {"daemon", "stop"});
  CHECK(stop.code == 0);
  CHECK_THAT(stop.out, Catch::StartsWith("ktuned stopped"));
  auto after = run_ktune(home, {"daemon", "status"});
  CHECK(after.code == 1);

  // One autostart rule: after `daemon stop`, the next command that needs ktuned starts it and
  // says so (devices is one of them).
  auto devices = run_ktune(home, {"devices"});
  INFO("devices: " << devices.out << devices.err);
  CHECK(devices.code == 0);
  CHECK_THAT(devices.err, Catch::Contains("ktuned was not running; started it (pid "));
  auto log = run_ktune(home, {"daemon", "log", "-n", "20"});
  CHECK(log.code == 0);
  CHECK_THAT(log.out, Catch::Contains("listening on"));
  auto unknown = run_ktune(home, {"--json", "tune", "reduce_sun", "--shape", "N=64"});
  CHECK(unknown.code == 1);
  const auto error = nlohmann::json::parse(unknown.out, nullptr, false);
  REQUIRE(error.is_object());
  CHECK(error["error"]["code"] == "unknown_kernel");
  CHECK_THAT(error["error"]["message"].get<std::string>(),
             Catch::Contains("did you mean 'reduce_sum'?"));
  CHECK(run_ktune(home, {"daemon", "stop"}).code == 0);

  // A table over the daemon's message limit: the error names the limit and the setting.
  const auto table = (home.path() / "table.json").string();
  auto exported = run_ktune(home, {"export", "--format", "json", "-o", table});
  REQUIRE(exported.code == 0);
  auto small = home.write("small.toml", "[daemon]\nmax_message_bytes = 1024\n");
  REQUIRE(run_ktune(home, {"daemon", "start", "--config", small.string()}).code == 0);
  auto import = run_ktune(home, {"import", table});
  INFO("import: " << import.out << import.err);
  CHECK(import.code == 1);
  CHECK_THAT(import.err, Catch::Contains("[daemon].max_message_bytes") &&
                             Catch::Contains("bytes"));
}

TEST_CASE("ktune import sends a table over the message limit in parts", "[cli][daemon]") {
  if (!executable(k_bin_dir + "/ktuned") || !executable(k_bin_dir + "/ktune-worker")) {
    ktune::test::skip_test("needs " + k_bin_dir + "/ktuned and ktune-worker");
  }
  ktune::test::TempDir home;
  // 5,000 winners of a made-up GPU: about 1.5 MB as one request, over the 1 MiB default limit.
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i) {
    rows.push_back({{"kernel", "imported"}, {"shape", "M=" + std::to_string(64 + i) + ",N=64"},
                    {"dtype", "f32"}, {"fingerprint", "00ff00ff00ff00ff00ff00ff00ff00ff"},
                    {"source_hash", "h"}, {"config", {{"BM", 32}, {"BN", 32}}},
                    {"median_ms", 1.0 + i * 1e-6}, {"time_ms", 1700000000000LL + i},
                    {"device", {{"name", "cuda:0"}, {"details", {{"kind", "cuda"}}}}}});
  }
  const nlohmann::json table = {{"format", "ktune-table"}, {"schema_version", 1},
                                {"host", "elsewhere"}, {"rows", rows}};
  const auto file = home.write("big.json", table.dump());
  REQUIRE(run_ktune(home, {"daemon", "start"}).code == 0);
  auto imported = run_ktune(home, {"import", file.string(), "--json"});
  INFO("import: " << imported.out << imported.err);
  REQUIRE(imported.code == 0);
  const auto reply = nlohmann::json::parse(imported.out, nullptr, false);
  REQUIRE(reply.is_object());
  CHECK(reply["rows"] == 5000);
  CHECK(reply["imported"] == 5000);
  CHECK(reply["requests"].get<int>() >= 2);
  CHECK(reply["jobs"].size() == 5000);
  // Every row reached the store: a second import finds them all unchanged.
  auto again = run_ktune(home, {"import", file.string(), "--json"});
  REQUIRE(again.code == 0);
  CHECK(nlohmann::json::parse(again.out)["unchanged"] == 5000);
  CHECK(run_ktune(home, {"daemon", "stop"}).code == 0);
}
