// The store under faults (docs/ARCHITECTURE.md § Store writes): another process holding the
// database locked, a full disk, kill -9 while writes wait, a read-only database, two daemons on
// one database. Real ktuned, real SQLite files, a real tmpfs that fills (root only).
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 10s;
constexpr uid_t k_nobody = 65534;

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

// A tune of several candidates, each a separate compile: long enough to lock the database after
// its first result and see more results while it is held.
const json k_tune = {{"op", "tune"},      {"kernel", "gemm"},  {"shape", "M=32,N=32,K=32"},
                     {"strategy", "random"}, {"budget", 8}, {"seed", 3}, {"wait", true}};

std::unique_ptr<DaemonProcess> start_daemon(const TempDir& home, const std::string& db = "") {
  home.write("ktuned.toml", k_tiny_measure);
  std::vector<std::string> args = {"--config", (home.path() / "ktuned.toml").string(),
                                   "--kernel-dir", ktune::test::source_path("/kernels_src")};
  if (!db.empty()) {
    args.push_back("--db");
    args.push_back(db);
  }
  auto daemon = std::make_unique<DaemonProcess>(home.str(), args);
  REQUIRE(daemon->wait_ready(k_start_timeout));
  return daemon;
}

// Starts ktuned where it must refuse to start; returns its exit code and what it wrote.
std::pair<int, std::string> refused_start(const TempDir& home, const std::string& db) {
  home.write("ktuned.toml", k_tiny_measure);
  const std::string log = home.str() + "/stderr.txt";
  DaemonProcess daemon(home.str(),
                       {"--config", (home.path() / "ktuned.toml").string(), "--kernel-dir",
                        ktune::test::source_path("/kernels_src"), "--db", db},
                       log);
  CHECK_FALSE(daemon.wait_ready(k_start_timeout));
  const auto code = daemon.wait_exit(k_start_timeout);
  REQUIRE(code.has_value());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {*code, text.str()};
}

Connection connect(const std::string& socket) {
  auto c = Connection::connect(socket);
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c.ok());
  return std::move(*c);
}

json ok_result(Connection& c, const json& request) {
  auto reply = c.request(request, {}, k_reply_timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

// Another process's hold on the database: a read-write connection in an exclusive transaction
// (what a careless sqlite3 shell or backup tool does).
class ForeignLock {
public:
  explicit ForeignLock(const std::string& path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    // take() may meet one of ktuned's own short write transactions: wait for it to commit
    // instead of failing with SQLITE_BUSY.
    sqlite3_busy_timeout(m_db, 10'000);
  }
  ~ForeignLock() {
    release();
    sqlite3_close(m_db);
  }
  void take() {
    char* message = nullptr;
    const int rc = sqlite3_exec(m_db, "BEGIN EXCLUSIVE", nullptr, nullptr, &message);
    INFO((message != nullptr ? message : ""));
    sqlite3_free(message);
    REQUIRE(rc == SQLITE_OK);
    m_held = true;
  }
  void release() {
    if (!m_held.exchange(false)) return;
    sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  [[nodiscard]] bool held() const { return m_held; }

private:
  sqlite3* m_db = nullptr;
  std::atomic<bool> m_held{false};
};

// The configs stored for a job, read as any other process would: read-only.
std::set<std::string> stored_configs(const std::string& db, std::int64_t job) {
  auto store = ktune::Store::open(db, ktune::OpenMode::read_only);
  INFO((store ? std::string() : store.error().message));
  REQUIRE(store.ok());
  auto rows = store->job_results(job);
  REQUIRE(rows.ok());
  std::set<std::string> configs;
  for (const auto& row : *rows) configs.insert(json::parse(row.config).dump());
  return configs;
}

// A tmpfs of `megabytes` mounted for one test (root only); unmounted at the end.
class SmallDisk {
public:
  SmallDisk(fs::path dir, int megabytes) : m_dir(std::move(dir)) {
    fs::create_directories(m_dir);
    const std::string options = "size=" + std::to_string(megabytes) + "m,mode=0700";
    if (::mount("tmpfs", m_dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      m_error = std::strerror(errno);
    }
  }
  ~SmallDisk() {
    if (m_error.empty()) ::umount2(m_dir.c_str(), MNT_DETACH);
  }
  [[nodiscard]] const std::string& error() const { return m_error; }
  // Writes zeros into a file until the disk is full.
  void fill() {
    const std::string path = (m_dir / "filler").string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    std::vector<char> block(64 * 1024, 0);
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    std::vector<char> byte(1, 0);
    while (::write(fd, byte.data(), 1) > 0) {
    }
    ::close(fd);
  }
  void free_space() { fs::remove(m_dir / "filler"); }

private:
  fs::path m_dir;
  std::string m_error;
};

} // namespace

TEST_CASE("a database locked by another process delays writes without freezing lookups or losing "
          "results",
          "[integration][store]") {
  TempDir home;
  auto daemon = start_daemon(home);
  const std::string db = home.str() + "/ktune.db";
  const std::string spill = db + "-spill";
  ForeignLock lock(db);

  // Once the first result is in, the database is locked for 3 s. Meanwhile another client looks
  // a winner up, asks for the stats and the jobs, and the tune's results keep being acknowledged.
  std::atomic<int> events_while_locked{0};
  std::atomic<bool> lookup_answered_while_locked{false}, spill_seen{false};
  json stats_while_locked, jobs_while_locked;
  std::thread holder;
  std::int64_t job = 0;
  Connection c = connect(daemon->socket());
  auto reply = c.request(k_tune, [&](const json& event) {
    if (event.value("event", "") != "progress") return;
    job = event["data"]["job"].get<std::int64_t>();
    if (lock.held()) {
      ++events_while_locked;
      spill_seen = spill_seen || fs::exists(spill);
    }
    if (holder.joinable()) return;
    lock.take();
    holder = std::thread([&] {
      Connection other = connect(daemon->socket());
      auto found = other.request({{"op", "lookup"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"}},
                                 {}, k_reply_timeout);
      lookup_answered_while_locked = found.ok() && found->value("ok", false) && lock.held();
      std::this_thread::sleep_for(1500ms);  // results of the tune meet the lock meanwhile
      stats_while_locked = ok_result(other, {{"op", "stats"}});
      jobs_while_locked = ok_result(other, {{"op", "jobs"}});
      std::this_thread::sleep_for(1500ms);
      lock.release();
    });
  }, 120s);
  if (holder.joinable()) holder.join();
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  CHECK(lookup_answered_while_locked);
  INFO("stats while locked: " << stats_while_locked.dump());
  INFO("jobs while locked: " << jobs_while_locked.dump());

  const json& result = reply->at("result").at("job");
  CHECK(result.value("state", "") == "done");
  const auto total = result.value("done", 0);
  // Every candidate of the job is stored once, those measured while the lock was held included.
  CHECK(stored_configs(db, job).size() == static_cast<std::size_t>(total));
  CHECK_FALSE(fs::exists(spill));
  if (events_while_locked > 0) {
    // Results met the lock: the writer said so and kept them in the journal meanwhile.
    CHECK(spill_seen);
    CHECK(stats_while_locked["store"].value("stalled", false));
    CHECK_THAT(stats_while_locked["store"].value("reason", ""), Catch::Contains("busy"));
    bool marked = false;
    for (const auto& j : jobs_while_locked["jobs"]) marked = marked || j.contains("stalled");
    CHECK(marked);
  } else {
    WARN("no result of the tune was measured while the database was locked; the stall was not seen");
  }
}

TEST_CASE("a result acknowledged while the database is locked survives kill -9",
          "[integration][store]") {
  TempDir home;
  auto daemon = start_daemon(home);
  const std::string db = home.str() + "/ktune.db";
  ForeignLock lock(db);
  std::set<std::string> acknowledged;
  std::int64_t job = 0;
  int while_locked = 0;
  {
    Connection c = connect(daemon->socket());
    auto reply = c.request(k_tune, [&](const json& event) {
      if (event.value("event", "") != "progress") return;
      job = event["data"]["job"].get<std::int64_t>();
      acknowledged.insert(event["data"]["last"]["config"].dump());
      if (!lock.held()) {
        if (while_locked == 0) lock.take();
        return;
      }
      // Two results acknowledged while nothing could be written to the database: kill -9.
      if (++while_locked == 2) daemon->signal(SIGKILL);
    }, 120s);
    CHECK_FALSE(reply.ok()); // the daemon died under it
  }
  REQUIRE(daemon->wait_exit(10s).has_value());
  REQUIRE(while_locked == 2);
  CHECK(fs::exists(db + "-spill"));
  lock.release();

  // The next ktuned writes the journal's rows before anything else.
  daemon = start_daemon(home);
  const auto stored = stored_configs(db, job);
  for (const auto& config : acknowledged) {
    INFO(config);
    CHECK(stored.count(config) == 1);
  }
  CHECK_FALSE(fs::exists(db + "-spill"));
}

TEST_CASE("a tune asked for while the database is locked is refused with store_busy, lookups go on",
          "[integration][store]") {
  TempDir home;
  auto daemon = start_daemon(home);
  const std::string db = home.str() + "/ktune.db";
  Connection c = connect(daemon->socket());
  (void)ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"}, {"budget", 1},
                      {"wait", true}});
  ForeignLock lock(db);
  lock.take();
  auto refused = c.request({{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=8192"},
                            {"budget", 1}},
                           {}, k_reply_timeout);
  REQUIRE(refused.ok());
  INFO(refused->dump());
  REQUIRE_FALSE(refused->value("ok", true));
  CHECK(refused->at("error").value("code", "") == "store_busy");
  CHECK_THAT(refused->at("error").value("message", ""), Catch::Contains(db));
  // Winners are served from memory meanwhile.
  const json found = ok_result(c, {{"op", "lookup"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"}});
  CHECK(found.value("rung", "") == "exact");
  lock.release();
  (void)ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=8192"}, {"budget", 1},
                      {"wait", true}});
}

TEST_CASE("a full disk stalls the store's writes until space returns and nothing is lost",
          "[integration][store]") {
  if (::geteuid() != 0) ktune::test::skip_test("mounting a small tmpfs needs root");
  TempDir home;
  SmallDisk disk(home.path() / "disk", 16);
  if (!disk.error().empty()) ktune::test::skip_test("cannot mount a tmpfs: " + disk.error());
  const std::string db = (home.path() / "disk" / "ktune.db").string();
  auto daemon = start_daemon(home, db);
  Connection c = connect(daemon->socket());

  // Full before the request: the job cannot even be created; the error says why.
  disk.fill();
  auto refused = c.request({{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                            {"budget", 1}},
                           {}, k_reply_timeout);
  REQUIRE(refused.ok());
  INFO(refused->dump());
  REQUIRE_FALSE(refused->value("ok", true));
  CHECK(refused->at("error").value("code", "") == "store_busy");
  disk.free_space();

  // Full in the middle of a tune: its results wait (in memory: the journal is on the same full
  // disk), the job says it is stalled, and every result is stored once space returns.
  std::thread freer;
  json jobs_while_full;
  std::int64_t job = 0;
  auto reply = c.request(k_tune, [&](const json& event) {
    if (event.value("event", "") != "progress") return;
    job = event["data"]["job"].get<std::int64_t>();
    if (freer.joinable()) return;
    disk.fill();
    freer = std::thread([&] {
      std::this_thread::sleep_for(2500ms);
      Connection other = connect(daemon->socket());
      jobs_while_full = ok_result(other, {{"op", "jobs"}});
      disk.free_space();
    });
  }, 120s);
  if (freer.joinable()) freer.join();
  INFO((reply ? reply->dump() : reply.error().message));
  INFO("jobs while full: " << jobs_while_full.dump());
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  const json& result = reply->at("result").at("job");
  CHECK(result.value("state", "") == "done");
  CHECK(stored_configs(db, job).size() == static_cast<std::size_t>(result.value("done", 0)));
  bool stalled_full = false;
  for (const auto& j : jobs_while_full["jobs"]) {
    stalled_full = stalled_full || j.value("stalled", "").find("full") != std::string::npos;
  }
  if (!stalled_full) WARN("no write of the tune met the full disk (SQLite reused WAL space)");
}

TEST_CASE("one daemon per database: a second ktuned on the same --db is refused, whatever its home",
          "[integration][store]") {
  TempDir first_home, second_home;
  const std::string db = first_home.str() + "/shared.db";
  auto first = start_daemon(first_home, db);
  const auto [code, text] = refused_start(second_home, db);
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains("in use by another ktuned"));
  CHECK_THAT(text, Catch::Contains(std::to_string(first->ready_pid())));
  // The first one is untouched.
  Connection c = connect(first->socket());
  (void)ok_result(c, {{"op", "stats"}});
}

TEST_CASE("ktuned refuses to start on a read-only database", "[integration][store]") {
  TempDir home;
  const std::string db = home.str() + "/ro.db";
  {
    auto daemon = start_daemon(home, db);
  }
  if (::geteuid() == 0) {
    // Root writes any file whatever its mode: a read-only bind mount of its directory instead.
    const std::string dir = home.str() + "/ro";
    fs::create_directories(dir);
    fs::copy_file(db, dir + "/ro.db");
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      ktune::test::skip_test(std::string("cannot bind-mount: ") + std::strerror(errno));
    }
    const int remounted = ::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY,
                                  nullptr);
    const int err = errno;
    if (remounted != 0) {
      ::umount2(dir.c_str(), MNT_DETACH);
      ktune::test::skip_test(std::string("cannot remount read-only: ") + std::strerror(err));
    }
    const auto [code, text] = refused_start(home, dir + "/ro.db");
    ::umount2(dir.c_str(), MNT_DETACH);
    INFO(text);
    CHECK(code != 0);
    // Either the lock file next to it or SQLite's open says so.
    CHECK_THAT(text, Catch::Contains("read-only", Catch::CaseSensitive::No));
    return;
  }
  REQUIRE(::chmod(db.c_str(), 0400) == 0);
  const auto [code, text] = refused_start(home, db);
  INFO(text);
  CHECK(code != 0);
  CHECK_THAT(text, Catch::Contains("read-only"));
}
