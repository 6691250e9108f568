// StoreWriter over a real SQLite file, locked by a real second connection where a test needs the
// database to take no writes: writes run at once when nothing waits, wait in order behind a
// stalled one, write_now never queues, and a result acknowledged while stalled survives the
// writer (its journal is replayed by the next one).
#include <catch2/catch.hpp>

#include "daemon/store_writer.hpp"
#include "tests/daemon/service_rig.hpp"

#include <filesystem>
#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::daemon;
using ktune::test::DatabaseLock;

namespace {

struct Rig {
  Rig() : store(ktune::test::ServiceRig::open_store(home)), writer(io, store) {
    store.set_busy_timeout(std::chrono::milliseconds(0));
  }
  [[nodiscard]] std::string db() const { return (home.path() / "ktune.db").string(); }
  // A queued job to hang results on.
  std::int64_t job() { return create_job(store); }
  static std::int64_t create_job(Store& store) {
    JobRecord record;
    record.kernel = "reduce_sum";
    record.source_hash = "hash";
    record.shape = "N=64";
    record.dtype = "f32";
    record.device = "cpu";
    record.fingerprint = "fp";
    record.strategy = "exhaustive";
    record.total = 4;
    auto id = store.create_job(record);
    REQUIRE(id);
    return *id;
  }
  static ResultRecord row(std::int64_t job, int index) {
    ResultRecord r;
    r.job_id = job;
    r.kernel = "reduce_sum";
    r.source_hash = "hash";
    r.shape = "N=64";
    r.dtype = "f32";
    r.fingerprint = "fp";
    r.config = R"({"BLOCK":)" + std::to_string(64 * (index + 1)) + "}";
    r.config_index = index;
    r.status = CandidateStatus::ok;
    r.stats.median_ms = 1.0 + index;
    r.stats.n = 1;
    return r;
  }
  template <class Done>
  bool run_until(Done done) {
    for (int i = 0; i < 400 && !done(); ++i) {
      ktune::test::poll(io);
      if (!done()) ::usleep(5000);
    }
    return done();
  }

  ktune::test::TempDir home;
  boost::asio::io_context io;
  Store store;
  StoreWriter writer;
};

} // namespace

TEST_CASE("StoreWriter: a write runs at once while nothing waits", "[daemon][store_writer]") {
  Rig rig;
  const std::int64_t job = rig.job();
  bool done = false;
  rig.writer.submit("state", [job](Store& store) { return store.set_job_state(job, JobState::running); },
                    [&](const Result<void>& r) { done = r.ok(); });
  CHECK(done);  // before submit returned
  auto stored = rig.store.get_job(job);
  REQUIRE(stored);
  CHECK((*stored)->state == JobState::running);

  // write_now returns the write's own outcome; a failure that is not transient stalls nothing.
  CHECK(rig.writer.write_now("state", [job](Store& store) {
    return store.set_job_state(job, JobState::done);
  }));
  auto failed = rig.writer.write_now("unknown job", [](Store& store) {
    return store.set_job_state(999, JobState::done);
  });
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == ErrorCode::unknown_job);
  CHECK_FALSE(rig.writer.stall());
  CHECK(rig.writer.failed_writes() == 1);
}

TEST_CASE("StoreWriter: writes wait in order behind a locked database, write_now is refused meanwhile",
          "[daemon][store_writer]") {
  Rig rig;
  const std::int64_t job = rig.job();
  DatabaseLock lock(rig.db());
  std::vector<std::string> order;
  for (const JobState state : {JobState::running, JobState::interrupted, JobState::done}) {
    const std::string name(to_string(state));
    rig.writer.submit(name, [job, state](Store& store) { return store.set_job_state(job, state); },
                      [&order, name](const Result<void>& r) {
                        if (r) order.push_back(name);
                      });
  }
  REQUIRE(rig.writer.stall());
  CHECK(rig.writer.stall()->waiting == 3);
  CHECK_THAT(rig.writer.describe_stall(), Catch::Contains("database busy"));
  CHECK(order.empty());

  bool ran = false;
  auto refused = rig.writer.write_now("now", [&ran](Store&) {
    ran = true;
    return Result<void>{};
  });
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::db_busy);
  CHECK(is_transient(refused.error()));
  CHECK_FALSE(ran);

  lock.release();
  REQUIRE(rig.run_until([&] { return order.size() == 3; }));
  CHECK(order == std::vector<std::string>{"running", "interrupted", "done"});
  CHECK_FALSE(rig.writer.stall());
  auto stored = rig.store.get_job(job);
  REQUIRE(stored);
  CHECK((*stored)->state == JobState::done);
}

TEST_CASE("StoreWriter: a result acknowledged while the database is locked survives the writer",
          "[daemon][store_writer]") {
  std::int64_t job = 0;
  ktune::test::TempDir home;
  const std::string db = (home.path() / "ktune.db").string();
  {
    boost::asio::io_context io;
    Store store = ktune::test::ServiceRig::open_store(home);
    store.set_busy_timeout(std::chrono::milliseconds(0));
    job = Rig::create_job(store);
    StoreWriter writer(io, store);
    DatabaseLock lock(db);
    int acknowledged = 0;
    for (int i = 0; i < 2; ++i) {
      writer.submit_result(Rig::row(job, i), i + 1, 0, [&](const Result<void>& r) {
        if (r) ++acknowledged;
      });
    }
    // Acknowledged from the journal while nothing reached the database.
    CHECK(acknowledged == 2);
    REQUIRE(writer.stall());
    CHECK(writer.stall()->spilling);
    CHECK(std::filesystem::exists(StoreWriter::spill_path(db)));
    // The writer goes away with its writes waiting (as ktuned killed): the journal stays.
    writer.flush();
  }
  CHECK(std::filesystem::exists(StoreWriter::spill_path(db)));
  auto store = Store::open(db, OpenMode::read_write);
  REQUIRE(store);
  boost::asio::io_context io;
  StoreWriter next(io, *store);
  auto replayed = next.replay_spill();
  REQUIRE(replayed);
  CHECK(*replayed == 2);
  CHECK_FALSE(std::filesystem::exists(StoreWriter::spill_path(db)));
  auto rows = store->job_results(job);
  REQUIRE(rows);
  CHECK(rows->size() == 2);
  auto stored = store->get_job(job);
  REQUIRE(stored);
  CHECK((*stored)->done == 2);
}

TEST_CASE("StoreWriter: checkpoint_wal folds the log into the database", "[daemon][store_writer]") {
  Rig rig;
  rig.job();
  CHECK(rig.writer.checkpoint_wal());
}
