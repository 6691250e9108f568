// A store that notices (daemon/database_file.hpp, db/salvage.hpp): garbage pages are refused at
// start with what to do and `ktune db recover` copies what can be read; a database moved away or
// deleted while ktuned runs stops its writes (results go to the spill journal, a deleted file's
// content is saved from the open connection), and nothing acknowledged is lost once it is back;
// a missing or empty database where history was is refused; a hard link (or a bind mount) from
// another home meets the first ktuned's lock.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::run_tool;
using ktune::test::TempDir;
using ktune::test::ToolRun;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr auto k_start_timeout = 60s;

// Candidates of about 0.15 s each, so that a tune is still running when the file goes.
const std::string k_config = R"(
[daemon]
compile_workers = 1
[measure]
min_samples = 3
max_samples = 100000
min_time_s = 0.15
max_time_s = 0.2
warmup_ms = 0
flush_cache = false
finalists = 0
)";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Home {
  TempDir dir;
  Home() { dir.write("ktuned.toml", k_config); }
  [[nodiscard]] std::string db() const { return dir.str() + "/ktune.db"; }
  [[nodiscard]] std::string log() const { return dir.str() + "/stderr.txt"; }
  [[nodiscard]] std::unique_ptr<DaemonProcess> start(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--config", dir.str() + "/ktuned.toml", "--only-kernel-dir",
                                     ktune::test::source_path("/kernels_src")};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<DaemonProcess>(dir.str(), args, log());
  }
  // A start that must fail: its exit code and log.
  [[nodiscard]] std::pair<int, std::string> refused(std::vector<std::string> extra = {}) const {
    auto daemon = start(std::move(extra));
    CHECK_FALSE(daemon->wait_ready(k_start_timeout));
    const auto code = daemon->wait_exit(k_start_timeout);
    REQUIRE(code.has_value());
    return {*code, read_text(log())};
  }
  [[nodiscard]] ToolRun ktune(std::vector<std::string> args) const {
    args.insert(args.begin(), ktune::test::bin_path("/ktune"));
    return run_tool(args, {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + dir.str()}, 120s);
  }
};

json ok_result(Connection& c, const json& request, std::chrono::milliseconds timeout = 300s) {
  auto reply = c.request(request, {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

void tune_once(const Home& home) {
  auto daemon = home.start();
  REQUIRE(daemon->wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  const json done = ok_result(*conn, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                                      {"budget", 3}, {"wait", true}});
  REQUIRE(done.at("job").at("state") == "done");
}

// The configs of job 1's stored results in `db` (read-only).
std::set<std::string> stored_configs(const std::string& db) {
  std::set<std::string> configs;
  sqlite3* handle = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(handle, "SELECT config FROM results WHERE job_id = 1", -1, &stmt,
                             nullptr) == SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    configs.insert(json::parse(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))).dump());
  }
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return configs;
}

// Runs a tune with progress events; `midway` runs after the third result was acknowledged.
// Returns the configs whose results were acknowledged (their events came), once all were: the
// job's end may never be announced, its write waiting for the file.
std::set<std::string> tune_through(Connection& c, const std::function<void()>& midway) {
  const json request = {{"v", 1}, {"id", 1}, {"op", "tune"}, {"kernel", "reduce_sum"},
                        {"shape", "N=65536"}, {"budget", 8}, {"wait", true}};
  REQUIRE(c.send_raw(request.dump() + "\n").ok());
  std::set<std::string> acknowledged;
  std::int64_t total = -1;
  while (static_cast<std::int64_t>(acknowledged.size()) != total) {
    auto line = c.read_line(120s);
    INFO((line ? *line : line.error().message));
    REQUIRE(line.ok());
    const json message = json::parse(*line);
    if (message.value("event", "") != "progress") {
      INFO(message.dump());
      REQUIRE(message.contains("event"));  // the reply comes only after every event
      continue;
    }
    const json& data = message.at("data");
    total = data.at("total").get<std::int64_t>();
    acknowledged.insert(data.at("last").at("config").dump());
    if (acknowledged.size() == 3) midway();
  }
  return acknowledged;
}

} // namespace

TEST_CASE("a database with garbage pages is refused at start with what to do, and ktune db "
          "recover copies what can be read",
          "[integration][hostile][store]") {
  Home home;
  tune_once(home);
  // Garbage over the root page of the results table, the header left intact.
  std::int64_t root = 0;
  {
    sqlite3* handle = nullptr;
    REQUIRE(sqlite3_open_v2(home.db().c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(handle, "SELECT rootpage FROM sqlite_schema WHERE name = 'results'",
                               -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    root = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(handle);
  }
  REQUIRE(root > 1);
  {
    std::fstream file(home.db(), std::ios::in | std::ios::out | std::ios::binary);
    std::mt19937 random(7);
    std::string garbage(4096, '\0');
    for (auto& byte : garbage) byte = static_cast<char>(random());
    file.seekp((root - 1) * 4096);
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    REQUIRE(file.good());
  }
  const auto [code, text] = home.refused();
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains("is damaged"));
  CHECK_THAT(text, Catch::Contains("ktune db recover " + home.db()));
  CHECK_THAT(text, Catch::Contains("ktune db backup"));

  const std::string recovered = home.dir.str() + "/recovered.db";
  const ToolRun recover = home.ktune({"db", "recover", home.db(), recovered});
  INFO(recover.output);
  REQUIRE(recover.code == 0);
  CHECK_THAT(recover.output, Catch::Contains("jobs: 1 row(s) copied"));
  CHECK_THAT(recover.output, Catch::Contains("some could not be read"));
  // The recovered file serves: ktuned starts on it and knows the job.
  auto daemon = home.start({"--db", recovered});
  REQUIRE(daemon->wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  const json jobs = ok_result(*conn, {{"op", "jobs"}});
  CHECK(jobs.at("jobs").size() == 1);
}

TEST_CASE("a database moved away while ktuned runs stops its writes and loses nothing acknowledged",
          "[integration][hostile][store]") {
  Home home;
  const std::string away = home.db() + ".away";
  std::set<std::string> acknowledged;
  {
    auto daemon = home.start();
    REQUIRE(daemon->wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon->socket());
    REQUIRE(conn.ok());
    acknowledged = tune_through(*conn, [&] { fs::rename(home.db(), away); });
    auto other = Connection::connect(daemon->socket());
    REQUIRE(other.ok());
    const json stats = ok_result(*other, {{"op", "stats"}});
    INFO(stats.dump());
    CHECK(stats.dump().find("no longer at its path") != std::string::npos);
    // Nothing new starts while the database takes nothing.
    auto refused = other->request({{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=1024"},
                                   {"budget", 1}}, {}, 30s);
    REQUIRE(refused.ok());
    CHECK(refused->at("error").at("code") == "store_busy");
    daemon->signal(SIGTERM);
    CHECK(daemon->wait_exit(60s).has_value());
  }
  CHECK(fs::exists(home.db() + "-spill"));
  fs::rename(away, home.db());
  auto daemon = home.start();
  REQUIRE(daemon->wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  // The job resumes; once it is done every acknowledged result is stored.
  const json done = ok_result(*conn, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=65536"},
                                      {"budget", 8}, {"wait", true}});
  (void)done;
  const auto stored = stored_configs(home.db());
  for (const auto& config : acknowledged) {
    INFO(config);
    CHECK(stored.count(config) == 1);
  }
}

TEST_CASE("a database deleted while ktuned runs is saved from the open connection and loses "
          "nothing acknowledged",
          "[integration][hostile][store]") {
  Home home;
  std::set<std::string> acknowledged;
  {
    auto daemon = home.start();
    REQUIRE(daemon->wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon->socket());
    REQUIRE(conn.ok());
    acknowledged = tune_through(*conn, [&] { fs::remove(home.db()); });
    std::this_thread::sleep_for(1500ms);  // the periodic check saves the copy
    auto other = Connection::connect(daemon->socket());
    REQUIRE(other.ok());
    const json stats = ok_result(*other, {{"op", "stats"}});
    INFO(stats.dump());
    CHECK(stats.dump().find("was deleted") != std::string::npos);
    daemon->signal(SIGTERM);
    CHECK(daemon->wait_exit(60s).has_value());
  }
  REQUIRE(fs::exists(home.db() + ".rescued"));
  // Not silently recreated: the next start says where the content is.
  const auto [code, text] = home.refused();
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains("is missing, but one was there before"));
  CHECK_THAT(text, Catch::Contains(home.db() + ".rescued"));

  fs::rename(home.db() + ".rescued", home.db());
  auto daemon = home.start();
  REQUIRE(daemon->wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  (void)ok_result(*conn, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=65536"},
                          {"budget", 8}, {"wait", true}});
  const auto stored = stored_configs(home.db());
  for (const auto& config : acknowledged) {
    INFO(config);
    CHECK(stored.count(config) == 1);
  }
}

TEST_CASE("a missing or empty database where history was is refused, not recreated",
          "[integration][hostile][store]") {
  Home home;
  tune_once(home);
  std::string expected;
  SECTION("empty") {
    fs::resize_file(home.db(), 0);
    expected = "is empty (0 bytes), but a database with history was there";
  }
  SECTION("missing") {
    fs::remove(home.db());
    expected = "is missing, but one was there before";
  }
  const auto [code, text] = home.refused();
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains(expected));
  CHECK_THAT(text, Catch::Contains("ktune.db.identity"));
  // Starting fresh is a decision: remove the marker.
  fs::remove(home.db() + ".identity");
  auto daemon = home.start();
  CHECK(daemon->wait_ready(k_start_timeout));
}

TEST_CASE("a hard link or bind mount to the database from another home is refused while the first "
          "ktuned holds it",
          "[integration][hostile][store]") {
  Home first;
  auto daemon = first.start();
  REQUIRE(daemon->wait_ready(k_start_timeout));
  Home second;
  std::string other_db = second.db();
  bool mounted = false;
  SECTION("a hard link") { REQUIRE(::link(first.db().c_str(), other_db.c_str()) == 0); }
  SECTION("a bind mount") {
    if (::geteuid() != 0) {
      WARN("skipped: a bind mount needs root");
      return;
    }
    const std::string target = second.dir.str() + "/mnt";
    fs::create_directories(target);
    if (::mount(first.dir.str().c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      WARN("skipped: cannot bind-mount: " << std::strerror(errno));
      return;
    }
    mounted = true;
    other_db = target + "/ktune.db";
  }
  const auto [code, text] = second.refused({"--db", other_db});
  if (mounted) ::umount2((second.dir.str() + "/mnt").c_str(), MNT_DETACH);
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains("in use by another ktuned (pid " +
                                   std::to_string(daemon->ready_pid()) + ")"));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  (void)ok_result(*conn, {{"op", "stats"}});
}

TEST_CASE("ktune db backup copies the database while ktuned writes, and refuses to overwrite",
          "[integration][hostile][store]") {
  Home home;
  auto daemon = home.start();
  REQUIRE(daemon->wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon->socket());
  REQUIRE(conn.ok());
  // Writes go on meanwhile: a tune on another connection.
  REQUIRE(conn->send_raw(json({{"v", 1}, {"id", 1}, {"op", "tune"}, {"kernel", "reduce_sum"},
                               {"shape", "N=65536"}, {"budget", 8}, {"wait", true}})
                             .dump() + "\n")
              .ok());
  std::this_thread::sleep_for(1s);
  const std::string copy = home.dir.str() + "/copy.db";
  const ToolRun backup = home.ktune({"db", "backup", copy});
  INFO(backup.output);
  REQUIRE(backup.code == 0);
  CHECK_THAT(backup.output, Catch::Contains("checked"));
  struct stat st {};
  REQUIRE(::stat(copy.c_str(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);
  // The copy is a ktune database another ktuned opens, with the job in it.
  Home other;
  auto second = other.start({"--db", copy});
  REQUIRE(second->wait_ready(k_start_timeout));
  auto c2 = Connection::connect(second->socket());
  REQUIRE(c2.ok());
  CHECK(ok_result(*c2, {{"op", "jobs"}}).at("jobs").size() == 1);
  const ToolRun again = home.ktune({"db", "backup", copy});
  CHECK(again.code != 0);
  CHECK_THAT(again.output, Catch::Contains("exists"));
}
