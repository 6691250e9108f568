#pragma once
// The daemon's services in-process over real parts: a real SQLite store in a temp dir written
// only through a real StoreWriter, the shipped kernel families, a real Scheduler, Planner and
// DeviceRegistry (its CPU probed through a fake worker), and fake worker endpoints
// (fake_workers.hpp) for the WorkerPool, answered when a test wants. RecordingClient keeps what
// a service sends to a connection.
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/job_service.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/targets.hpp"
#include "daemon/worker_pool.hpp"
#include "tests/daemon/fake_workers.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/thread_pool.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace ktune::test {

// A connection that keeps what it is sent, one parsed JSON line each.
class RecordingClient final : public daemon::Client {
public:
  void send(std::string message) override { sent.push_back(nlohmann::json::parse(message)); }
  [[nodiscard]] const daemon::PeerCredentials& peer() const override { return m_peer; }
  void close_after_flush() override {}
  std::vector<nlohmann::json> sent;

private:
  daemon::PeerCredentials m_peer{::getpid(), ::getuid(), ::getgid()};
};

// Another process's write lock on a database (a second connection in BEGIN IMMEDIATE): writes
// of ktuned's connection (busy timeout 0) fail with db_busy until release().
class DatabaseLock {
public:
  explicit DatabaseLock(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &m_db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(m_db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  ~DatabaseLock() { release(); }
  DatabaseLock(const DatabaseLock&) = delete;
  DatabaseLock& operator=(const DatabaseLock&) = delete;
  void release() {
    if (m_db == nullptr) return;
    sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(m_db);
    m_db = nullptr;
  }

private:
  sqlite3* m_db = nullptr;
};

// The fingerprint the rig's CPU is probed with.
inline const std::string k_rig_cpu_fingerprint = "fedcba9876543210fedcba9876543210";

struct ServiceRig {
  explicit ServiceRig(std::int64_t quota = 4)
      : store(open_store(home)), writer(io, store), fakes(io), pool(io, fakes.spawner(), 1),
        scheduler(io, store, writer, pool, settings()),
        planner(store, writer) {
    config.db = (home.path() / "ktune.db").string();
    config.cache_dir = (home.path() / "cache").string();
    config.max_queued_jobs_per_client = quota;
    registry.load({ktune::test::source_path("/kernels_src")});
    // As in ktuned once it serves: a write that meets a lock fails at once and waits in the writer.
    store.set_busy_timeout(std::chrono::milliseconds(0));
    probe_cpu();
  }
  ~ServiceRig() { offload.join(); }

  static Store open_store(const TempDir& dir) {
    auto opened = Store::open((dir.path() / "ktune.db").string(), OpenMode::read_write);
    REQUIRE(opened);
    return std::move(opened.value());
  }
  static daemon::SchedulerSettings settings() {
    daemon::SchedulerSettings s;
    s.cache_dir = "/nonexistent-cache";
    s.measure.finalists = 0;
    s.measure.prune_factor = 0;
    return s;
  }
  // The device probe answered by a fake worker: the CPU with k_rig_cpu_fingerprint, no CUDA.
  void probe_cpu() {
    bool done = false;
    devices.probe(pool, [&done] { done = true; });
    poll(io);
    REQUIRE(fakes.reply("", "devices",
                        nlohmann::json{{"cpu", {{"name", "cpu"},
                                                {"fingerprint", k_rig_cpu_fingerprint},
                                                {"details", {{"kind", "cpu"}}}}},
                                       {"devices", nlohmann::json::array()}}));
    for (int i = 0; i < 10 && !done; ++i) poll(io);
    REQUIRE(done);
    REQUIRE(devices.cpu().fingerprint == k_rig_cpu_fingerprint);
  }
  daemon::JobContext job_context() {
    return daemon::JobContext{io,       offload,  config,   store,    writer,
                              scheduler, devices, registry, targets, planner};
  }
  // A request line's decoded form: {"v":1,"id":id,"op":op, ...body}.
  static protocol::Request request(const std::string& op, nlohmann::json body, int id = 1) {
    body["v"] = 1;
    body["id"] = id;
    body["op"] = op;
    auto decoded = protocol::decode_request(body.dump());
    REQUIRE(decoded);
    return std::move(*decoded);
  }
  // Runs the io loop until `done()` or `rounds` polls passed.
  template <class Done>
  bool run_until(Done done, int rounds = 2000) {
    for (int i = 0; i < rounds && !done(); ++i) {
      poll(io);
      if (!done()) ::usleep(500);
    }
    return done();
  }

  TempDir home;
  boost::asio::io_context io;
  boost::asio::thread_pool offload{1};
  Store store;
  daemon::StoreWriter writer;
  FakeWorkers fakes;
  daemon::WorkerPool pool;
  daemon::Scheduler scheduler;
  daemon::Planner planner;
  daemon::DaemonConfig config;
  KernelRegistry registry;
  daemon::DeviceRegistry devices;
  daemon::TargetResolver targets{registry, devices, pool};
};

} // namespace ktune::test
