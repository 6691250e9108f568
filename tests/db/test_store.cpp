#include "db/job_winner.hpp"
#include "db/store.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

using namespace ktune;

namespace {

// A plain SQLite connection, to look at the file independently of Store.
class RawDb {
public:
  RawDb(const std::string& path, int flags) {
    const int rc = sqlite3_open_v2(path.c_str(), &m_db, flags, nullptr);
    INFO(sqlite3_errmsg(m_db));
    REQUIRE(rc == SQLITE_OK);
  }
  ~RawDb() { sqlite3_close_v2(m_db); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, &message);
    INFO(sql << ": " << (message ? message : ""));
    sqlite3_free(message);
    REQUIRE(rc == SQLITE_OK);
  }
  // First column of the first row as text ("" when there is no row).
  std::string text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(m_db, sql.c_str(), -1, &stmt, nullptr);
    INFO(sql << ": " << sqlite3_errmsg(m_db));
    REQUIRE(rc == SQLITE_OK);
    std::string value;
    const int step = sqlite3_step(stmt);
    if (step == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    REQUIRE((step == SQLITE_ROW || step == SQLITE_DONE));
    return value;
  }
  std::int64_t integer(const std::string& sql) { return std::stoll(text(sql)); }

private:
  sqlite3* m_db = nullptr;
};

Store open_store(const std::string& path, OpenMode mode = OpenMode::read_write) {
  auto store = Store::open(path, mode);
  INFO((store.ok() ? std::string() : store.error().message));
  REQUIRE(store.ok());
  return std::move(store).value();
}

template <class T>
T must(Result<T> result) {
  INFO((result.ok() ? std::string() : ktune::describe(result.error())));
  REQUIRE(result.ok());
  return std::move(result).value();
}

void must(Result<void> result) {
  INFO((result.ok() ? std::string() : ktune::describe(result.error())));
  REQUIRE(result.ok());
}

JobRecord sample_job() {
  JobRecord job;
  job.kernel = "gemm";
  job.source_hash = "0123456789abcdef";
  job.shape = "K=512,M=256,N=128";
  job.dtype = "f32";
  job.device = "cpu";
  job.fingerprint = "fp-cpu-1";
  job.strategy = "random";
  job.budget = 40;
  job.state = JobState::queued;
  job.total = 120;
  job.done = 3;
  job.failed = 1;
  job.error = "";
  job.created_at = 1'700'000'000'000;
  job.started_at = 0;
  job.finished_at = 0;
  return job;
}

ResultRecord sample_result(std::int64_t job_id, const std::string& config, std::int64_t index) {
  ResultRecord r;
  r.job_id = job_id;
  r.kernel = "gemm";
  r.source_hash = "0123456789abcdef";
  r.shape = "K=512,M=256,N=128";
  r.dtype = "f32";
  r.fingerprint = "fp-cpu-1";
  r.config = config;
  r.config_index = index;
  r.status = CandidateStatus::ok;
  r.reason = "";
  r.log = "ptxas info: 32 registers";
  r.stats.n = 17;
  r.stats.min_ms = 1.25;
  r.stats.max_ms = 2.5;
  r.stats.median_ms = 1.5;
  r.stats.mean_ms = 1.625;
  r.stats.stddev_ms = 0.125;
  r.stats.q1_ms = 1.375;
  r.stats.q3_ms = 1.75;
  r.gflops = 812.5;
  r.gbps = 96.25;
  r.compile_ms = 143.0;
  r.created_at = 1'700'000'000'123;
  return r;
}

WinnerRecord sample_winner() {
  WinnerRecord w;
  w.kernel = "gemm";
  w.source_hash = "0123456789abcdef";
  w.shape = "K=512,M=256,N=128";
  w.dtype = "f32";
  w.fingerprint = "fp-cpu-1";
  w.result_id = 7;
  w.job_id = 3;
  w.config = R"({"BLOCK_M":64,"BLOCK_N":32})";
  w.median_ms = 1.5;
  w.gflops = 812.5;
  w.updated_at = 1'700'000'000'456;
  return w;
}

void check_same(const JobRecord& a, const JobRecord& b) {
  CHECK(a.id == b.id);
  CHECK(a.kernel == b.kernel);
  CHECK(a.source_hash == b.source_hash);
  CHECK(a.shape == b.shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.device == b.device);
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.strategy == b.strategy);
  CHECK(a.budget == b.budget);
  CHECK(a.budget_s == b.budget_s);
  CHECK(a.state == b.state);
  CHECK(a.total == b.total);
  CHECK(a.done == b.done);
  CHECK(a.failed == b.failed);
  CHECK(a.error == b.error);
  CHECK(a.created_at == b.created_at);
  CHECK(a.started_at == b.started_at);
  CHECK(a.finished_at == b.finished_at);
  CHECK(a.seed == b.seed);
  CHECK(a.options.remeasure == b.options.remeasure);
  CHECK(a.options.retry_failed == b.options.retry_failed);
  CHECK(a.options.priority == b.options.priority);
  CHECK(a.options.compile_timeout_s == b.options.compile_timeout_s);
  CHECK(a.options.bench_timeout_s == b.options.bench_timeout_s);
}

void check_same(const ResultRecord& a, const ResultRecord& b) {
  CHECK(a.id == b.id);
  CHECK(a.job_id == b.job_id);
  CHECK(a.kernel == b.kernel);
  CHECK(a.source_hash == b.source_hash);
  CHECK(a.shape == b.shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.config == b.config);
  CHECK(a.config_index == b.config_index);
  CHECK(a.status == b.status);
  CHECK(a.reason == b.reason);
  CHECK(a.log == b.log);
  CHECK(a.stats.n == b.stats.n);
  CHECK(a.stats.min_ms == b.stats.min_ms);
  CHECK(a.stats.max_ms == b.stats.max_ms);
  CHECK(a.stats.median_ms == b.stats.median_ms);
  CHECK(a.stats.mean_ms == b.stats.mean_ms);
  CHECK(a.stats.stddev_ms == b.stats.stddev_ms);
  CHECK(a.stats.q1_ms == b.stats.q1_ms);
  CHECK(a.stats.q3_ms == b.stats.q3_ms);
  CHECK(a.gflops == b.gflops);
  CHECK(a.gbps == b.gbps);
  CHECK(a.compile_ms == b.compile_ms);
  CHECK(a.created_at == b.created_at);
  CHECK(a.samples_ms == b.samples_ms);
  CHECK(a.conditions == b.conditions);
}

void check_same(const WinnerRecord& a, const WinnerRecord& b) {
  CHECK(a.kernel == b.kernel);
  CHECK(a.source_hash == b.source_hash);
  CHECK(a.shape == b.shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.result_id == b.result_id);
  CHECK(a.job_id == b.job_id);
  CHECK(a.config == b.config);
  CHECK(a.median_ms == b.median_ms);
  CHECK(a.gflops == b.gflops);
  CHECK(a.updated_at == b.updated_at);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("job states convert to text and back", "[db]") {
  for (JobState state : {JobState::queued, JobState::running, JobState::done, JobState::failed,
                         JobState::cancelled, JobState::interrupted}) {
    CHECK(parse_job_state(to_string(state)) == state);
  }
  CHECK(to_string(JobState::cancelled) == "cancelled");
  CHECK_FALSE(parse_job_state("Running").has_value());
  CHECK_FALSE(parse_job_state("").has_value());
}

TEST_CASE("opening read-write creates schema v1 in WAL mode", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  Store store = open_store(path);
  CHECK(store.schema_version() == k_schema_version);
  CHECK(store.mode() == OpenMode::read_write);
  CHECK(store.path() == path);
  REQUIRE(std::filesystem::exists(path));

  RawDb raw(path, SQLITE_OPEN_READONLY);
  CHECK(raw.text("PRAGMA journal_mode") == "wal");
  CHECK(raw.integer("PRAGMA user_version") == k_schema_version);
  CHECK(raw.integer("PRAGMA application_id") == k_application_id);
  for (const char* table : {"kernels", "devices", "jobs", "results", "winners"}) {
    INFO(table);
    CHECK(raw.integer(std::string("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND "
                                  "name = '") + table + "'") == 1);
  }
  CHECK(raw.integer("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND "
                    "name = 'results_by_key'") == 1);
}

TEST_CASE("records round-trip with every field", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");

  SECTION("kernels") {
    must(store.upsert_kernel("gemm", "hash-a", "[kernel]\nname = \"gemm\"\n"));
    CHECK(must(store.kernel_spec("gemm", "hash-a")) == "[kernel]\nname = \"gemm\"\n");
    must(store.upsert_kernel("gemm", "hash-a", "[kernel]\nname = \"gemm\" # edited\n"));
    CHECK(must(store.kernel_spec("gemm", "hash-a")) == "[kernel]\nname = \"gemm\" # edited\n");
    must(store.upsert_kernel("gemm", "hash-b", "other"));
    CHECK(must(store.kernel_spec("gemm", "hash-b")) == "other");
    CHECK_FALSE(must(store.kernel_spec("gemm", "hash-c")).has_value());
    CHECK_FALSE(must(store.kernel_spec("conv", "hash-a")).has_value());
  }

  SECTION("devices") {
    DeviceInfo device;
    device.name = "cpu";
    device.fingerprint = "fp-cpu-1";
    device.details = {{"model", "AMD EPYC 7B13"}, {"cores", 2}, {"flags", {"avx2", "fma"}}};
    must(store.upsert_device(device));
    auto stored = must(store.get_device("fp-cpu-1"));
    REQUIRE(stored.has_value());
    CHECK(stored->name == device.name);
    CHECK(stored->fingerprint == device.fingerprint);
    CHECK(stored->details == device.details);

    device.name = "cpu:1";
    device.details["cores"] = 4;
    must(store.upsert_device(device));
    stored = must(store.get_device("fp-cpu-1"));
    REQUIRE(stored.has_value());
    CHECK(stored->name == "cpu:1");
    CHECK(stored->details["cores"] == 4);
    CHECK_FALSE(must(store.get_device("fp-other")).has_value());
  }

  SECTION("jobs, with and without a budget") {
    JobRecord job = sample_job();
    job.state = JobState::running;
    job.error = "previous attempt: worker lost";
    job.started_at = 1'700'000'000'500;
    job.finished_at = 1'700'000'000'900;
    job.seed = 42;
    job.options.remeasure = true;
    job.options.retry_failed = true;
    job.options.priority = -3;
    job.options.compile_timeout_s = 7.5;
    job.budget_s = 42.5;
    job.id = must(store.create_job(job));
    CHECK(job.id > 0);
    auto stored = must(store.get_job(job.id));
    REQUIRE(stored.has_value());
    check_same(*stored, job);
    CHECK_FALSE(stored->options.bench_timeout_s.has_value());

    JobRecord unbounded = sample_job();
    unbounded.budget.reset();
    unbounded.created_at = 0;
    unbounded.id = must(store.create_job(unbounded));
    CHECK(unbounded.id != job.id);
    stored = must(store.get_job(unbounded.id));
    REQUIRE(stored.has_value());
    CHECK_FALSE(stored->budget.has_value());
    CHECK_FALSE(stored->budget_s.has_value());
    CHECK(stored->created_at > 1'600'000'000'000); // stamped with the current time
    CHECK_FALSE(stored->options.remeasure);          // the defaults
    CHECK_FALSE(stored->options.retry_failed);
    CHECK(stored->options.priority == 0);
    CHECK_FALSE(stored->options.compile_timeout_s.has_value());
    CHECK(stored->configs.empty());                  // the whole space
    CHECK_FALSE(must(store.get_job(unbounded.id + 100)).has_value());
  }

  SECTION("a job of given configs keeps them, in order") {
    JobRecord job = sample_job();
    job.strategy = "configs";
    job.configs = R"([{"BM":64,"BN":32},{"BM":32,"BN":32}])";
    job.id = must(store.create_job(job));
    auto stored = must(store.get_job(job.id));
    REQUIRE(stored.has_value());
    CHECK(stored->strategy == "configs");
    CHECK(stored->configs == job.configs);
  }

  SECTION("a job's search record: none until set, then kept; an unknown job is an error") {
    const auto id = must(store.create_job(sample_job()));
    auto stored = must(store.get_job(id));
    REQUIRE(stored.has_value());
    CHECK(stored->search.best_at == 0);
    CHECK(stored->search.prior.empty());
    const std::string prior = R"({"sources":[],"results":3,"trusted":true,"favourite_rank":2})";
    must(store.set_job_search(id, JobSearch{7, prior}));
    stored = must(store.get_job(id));
    REQUIRE(stored.has_value());
    CHECK(stored->search.best_at == 7);
    CHECK(stored->search.prior == prior);
    must(store.set_job_search(id, JobSearch{4, ""}));  // a cold search: no prior
    CHECK(must(store.get_job(id))->search.prior.empty());
    auto unknown = store.set_job_search(id + 100, JobSearch{1, ""});
    REQUIRE_FALSE(unknown);
    CHECK(unknown.error().code == ktune::ErrorCode::unknown_job);
  }

  SECTION("the winner a job named, a remeasurement with its samples, a row measured unlocked") {
    const auto id = must(store.create_job(sample_job()));
    CHECK_FALSE(must(store.get_job(id))->winner_result.has_value());
    ResultRecord first = sample_result(id, R"({"BLOCK_M":64})", 0);
    first.unlocked = "lock file /run/lock/x.lock is a symbolic link: refused";
    const auto a = must(store.insert_result(first));
    const auto b = must(store.insert_result(sample_result(id, R"({"BLOCK_M":128})", 1)));
    must(store.set_job_winner(id, b));
    const JobRecord job = *must(store.get_job(id));
    CHECK(job.winner_result == b);
    auto rows = must(store.job_results(id));
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].unlocked == first.unlocked);
    CHECK(rows[1].unlocked.empty());
    // The named row, whatever the rule would pick among the rows.
    CHECK(job_winner(job, rows)->id == b);
    JobRecord older = job;
    older.winner_result.reset();
    CHECK(job_winner(older, rows) == pick_winner(rows));
    WinnerRecord key;
    key.job_id = id;
    key.result_id = a;
    CHECK(job_winner(older, rows, &key)->id == a);

    Remeasurement again;
    again.samples_ms = {1.0f, 2.0f, 3.0f};
    again.stats = summarize({1.0, 2.0, 3.0});
    again.gflops = 2;
    must(store.update_measurement(a, again));
    rows = must(store.job_results(id));
    CHECK(rows[0].samples_ms == again.samples_ms);
    CHECK(rows[0].stats.median_ms == 2.0);
    CHECK(rows[0].remeasured);
    CHECK(rows[0].unlocked.empty());
    auto unknown = store.set_job_winner(id + 100, a);
    REQUIRE_FALSE(unknown);
    CHECK(unknown.error().code == ktune::ErrorCode::unknown_job);
  }

  SECTION("every job state is accepted by the schema") {
    for (JobState state : {JobState::queued, JobState::running, JobState::done, JobState::failed,
                           JobState::cancelled, JobState::interrupted}) {
      JobRecord job = sample_job();
      job.state = state;
      const auto id = must(store.create_job(job));
      auto stored = must(store.get_job(id));
      REQUIRE(stored.has_value());
      CHECK(stored->state == state);
    }
  }

  SECTION("results") {
    const auto job_id = must(store.create_job(sample_job()));
    ResultRecord ok = sample_result(job_id, R"({"BLOCK_M":64})", 1);
    ok.samples_ms = {0.125f, 0.0915f, 8.1f, 0.09f};  // kept as float32, exactly
    ok.conditions = R"({"timing":"batch","launches_per_sample":50,"sm_mhz":[1980,1980]})";
    ok.id = must(store.insert_result(ok));
    ResultRecord failed = sample_result(job_id, R"({"BLOCK_M":128})", 0);
    failed.status = CandidateStatus::compile_error;
    failed.reason = "error: 'foo' was not declared in this scope";
    failed.log = "kernel.cpp:12:3: error: 'foo' was not declared\n  12 |   foo();\n";
    failed.stats = SampleStats{};
    failed.gflops = 0;
    failed.gbps = 0;
    failed.created_at = 0;
    failed.id = must(store.insert_result(failed));
    CHECK(failed.id != ok.id);

    auto rows = must(store.job_results(job_id));
    REQUIRE(rows.size() == 2);
    // Ordered by config_index, not by insertion.
    CHECK(rows[1].created_at > 1'600'000'000'000);
    failed.created_at = rows[0].created_at;
    check_same(rows[0], failed);
    check_same(rows[1], ok);
    CHECK(rows[0].samples_ms.empty());  // a failed candidate keeps none: NULL
    CHECK(must(store.job_results(job_id + 1)).empty());
    // One result by its id (ktune repro): the same row, log and reason included.
    auto one = must(store.get_result(failed.id));
    REQUIRE(one.has_value());
    check_same(*one, failed);
    CHECK_FALSE(must(store.get_result(ok.id + failed.id + 100)).has_value());
  }

  SECTION("every candidate status is accepted by the schema") {
    const auto job_id = must(store.create_job(sample_job()));
    const CandidateStatus statuses[] = {
        CandidateStatus::ok,           CandidateStatus::invalid_config,
        CandidateStatus::compile_error, CandidateStatus::compile_timeout,
        CandidateStatus::launch_error, CandidateStatus::runtime_error,
        CandidateStatus::mismatch,     CandidateStatus::crash,
        CandidateStatus::timeout,      CandidateStatus::worker_lost};
    std::int64_t index = 0;
    for (CandidateStatus status : statuses) {
      ResultRecord r = sample_result(job_id, "{\"I\":" + std::to_string(index) + "}", index);
      r.status = status;
      must(store.insert_result(r));
      ++index;
    }
    auto rows = must(store.job_results(job_id));
    REQUIRE(rows.size() == std::size(statuses));
    for (std::size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].status == statuses[i]);
  }

  SECTION("NaN measurements read back as NaN") {
    const auto job_id = must(store.create_job(sample_job()));
    ResultRecord r = sample_result(job_id, "{}", 0);
    r.gbps = std::numeric_limits<double>::quiet_NaN();
    must(store.insert_result(r));
    auto rows = must(store.job_results(job_id));
    REQUIRE(rows.size() == 1);
    CHECK(std::isnan(rows[0].gbps));
    CHECK(rows[0].gflops == r.gflops);
  }

  SECTION("winners") {
    WinnerRecord winner = sample_winner();
    must(store.upsert_winner(winner));
    auto found = must(store.find_winner(winner.kernel, winner.source_hash, winner.shape,
                                        winner.dtype, winner.fingerprint));
    REQUIRE(found.has_value());
    check_same(*found, winner);

    WinnerRecord unstamped = sample_winner();
    unstamped.shape = "K=1,M=1,N=1";
    unstamped.updated_at = 0;
    must(store.upsert_winner(unstamped));
    found = must(store.find_winner(unstamped.kernel, unstamped.source_hash, unstamped.shape,
                                   unstamped.dtype, unstamped.fingerprint));
    REQUIRE(found.has_value());
    CHECK(found->updated_at > 1'600'000'000'000);
  }
}

TEST_CASE("job state changes stamp times and record errors", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  JobRecord job = sample_job();
  job.done = 0;
  job.failed = 0;
  const auto id = must(store.create_job(job));

  auto get = [&] {
    auto stored = must(store.get_job(id));
    REQUIRE(stored.has_value());
    return *stored;
  };

  CHECK(get().state == JobState::queued);
  CHECK(get().started_at == 0);

  must(store.set_job_state(id, JobState::running));
  const JobRecord running = get();
  CHECK(running.state == JobState::running);
  CHECK(running.started_at > 0);
  CHECK(running.finished_at == 0);

  must(store.update_job_progress(id, 10, 2));
  CHECK(get().done == 10);
  CHECK(get().failed == 2);
  CHECK(get().total == job.total);

  must(store.set_job_state(id, JobState::interrupted, "ktuned stopped"));
  CHECK(get().state == JobState::interrupted);
  CHECK(get().error == "ktuned stopped");
  CHECK(get().finished_at == 0);

  must(store.set_job_state(id, JobState::running));
  CHECK(get().started_at == running.started_at); // a resumed job keeps its first start
  CHECK(get().error.empty());

  SECTION("done") {
    must(store.set_job_state(id, JobState::done));
    const JobRecord done = get();
    CHECK(done.state == JobState::done);
    CHECK(done.finished_at >= done.started_at);
    CHECK(done.finished_at > 0);
    CHECK(done.done == 10);
  }
  SECTION("failed keeps its reason") {
    must(store.set_job_state(id, JobState::failed, "every candidate failed to compile"));
    CHECK(get().state == JobState::failed);
    CHECK(get().error == "every candidate failed to compile");
    CHECK(get().finished_at > 0);
  }
  SECTION("cancelled") {
    must(store.set_job_state(id, JobState::cancelled));
    CHECK(get().state == JobState::cancelled);
    CHECK(get().finished_at > 0);
  }
  SECTION("an unknown job id is reported, not ignored") {
    auto state = store.set_job_state(id + 1, JobState::done);
    REQUIRE_FALSE(state.ok());
    CHECK(state.error().code == ktune::ErrorCode::unknown_job);
    CHECK(contains(state.error().message, std::to_string(id + 1)));
    auto progress = store.update_job_progress(id + 1, 1, 0);
    REQUIRE_FALSE(progress.ok());
    CHECK(progress.error().code == ktune::ErrorCode::unknown_job);
  }
}

TEST_CASE("a job never gets two results for one config", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  Store store = open_store(path);
  const auto job_id = must(store.create_job(sample_job()));
  const auto other_job = must(store.create_job(sample_job()));
  const std::string config = R"({"BLOCK_M":64,"BLOCK_N":64})";

  const auto first = must(store.insert_result(sample_result(job_id, config, 0)));
  auto again = store.insert_result(sample_result(job_id, config, 5));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == ktune::ErrorCode::duplicate_result);
  CHECK(contains(again.error().message, path));
  CHECK(contains(again.error().message, config));

  auto rows = must(store.job_results(job_id));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == first);
  CHECK(rows[0].config_index == 0);

  // The same config in another job is a new measurement, and the store still writes afterwards.
  must(store.insert_result(sample_result(other_job, config, 0)));
  must(store.insert_result(sample_result(job_id, R"({"BLOCK_M":32,"BLOCK_N":64})", 1)));
  CHECK(must(store.job_results(job_id)).size() == 2);

  SECTION("a result for a job that does not exist") {
    auto orphan = store.insert_result(sample_result(other_job + 10, config, 0));
    REQUIRE_FALSE(orphan.ok());
    CHECK(orphan.error().code == ktune::ErrorCode::unknown_job);
  }
}

TEST_CASE("results are found by winner key across jobs", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  const auto job_a = must(store.create_job(sample_job()));
  const auto job_b = must(store.create_job(sample_job()));
  ResultRecord crashed = sample_result(job_a, R"({"B":1})", 0);
  crashed.status = CandidateStatus::crash;
  crashed.reason = "SIGSEGV";
  must(store.insert_result(crashed));
  must(store.insert_result(sample_result(job_b, R"({"B":2})", 0)));
  ResultRecord other_shape = sample_result(job_b, R"({"B":3})", 1);
  other_shape.shape = "K=1,M=1,N=1";
  must(store.insert_result(other_shape));

  auto rows = must(store.results_for_key("gemm", "0123456789abcdef", "K=512,M=256,N=128", "f32",
                                         "fp-cpu-1"));
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].status == CandidateStatus::crash);
  CHECK(rows[0].reason == "SIGSEGV");
  CHECK(rows[1].config == R"({"B":2})");
  CHECK(must(store.results_for_key("gemm", "0123456789abcdef", "K=512,M=256,N=128", "f16",
                                   "fp-cpu-1")).empty());
}

TEST_CASE("find_winner hits only the exact key", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  const WinnerRecord w = sample_winner();
  CHECK_FALSE(must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
                  .has_value());
  must(store.upsert_winner(w));

  CHECK(must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
            .has_value());
  CHECK_FALSE(must(store.find_winner("conv", w.source_hash, w.shape, w.dtype, w.fingerprint))
                  .has_value());
  CHECK_FALSE(must(store.find_winner(w.kernel, "stale-hash", w.shape, w.dtype, w.fingerprint))
                  .has_value());
  CHECK_FALSE(must(store.find_winner(w.kernel, w.source_hash, "K=1,M=1,N=1", w.dtype,
                                     w.fingerprint)).has_value());
  CHECK_FALSE(must(store.find_winner(w.kernel, w.source_hash, w.shape, "f16", w.fingerprint))
                  .has_value());
  CHECK_FALSE(must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, "fp-gpu"))
                  .has_value());
  // The cached lookup statement is reusable after hits and misses.
  CHECK(must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
            .has_value());
}

TEST_CASE("a winner tuned under another environment of the same hardware is found as stale",
          "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  auto cpu = [](const std::string& fingerprint, const std::string& model, const std::string& compiler) {
    return DeviceInfo{"cpu", fingerprint,
                      {{"kind", "cpu"}, {"model", model}, {"cores", 2}, {"compiler", compiler}}, ""};
  };
  must(store.upsert_device(cpu("fp-cpu-1", "EPYC", "g++ 12.2.0")));
  must(store.upsert_device(cpu("fp-cpu-2", "EPYC", "g++ 13.1.0")));
  must(store.upsert_device(cpu("fp-xeon", "Xeon", "g++ 12.2.0")));
  WinnerRecord old = sample_winner();  // tuned under g++ 12 (fp-cpu-1)
  must(store.upsert_winner(old));
  WinnerRecord elsewhere = sample_winner();
  elsewhere.fingerprint = "fp-xeon";
  must(store.upsert_winner(elsewhere));

  const auto devices = must(store.same_hardware("fp-cpu-2"));
  REQUIRE(devices.size() == 2);
  CHECK(devices[0].hardware_id == devices[1].hardware_id);
  CHECK(must(store.same_hardware("fp-xeon")).size() == 1);
  CHECK(must(store.same_hardware("fp-none")).empty());

  // Under g++ 13 the key has no winner; g++ 12's is there, with its environment.
  CHECK_FALSE(must(store.find_winner(old.kernel, old.source_hash, old.shape, old.dtype, "fp-cpu-2")));
  const auto stale = must(store.stale_winners(old.kernel, old.source_hash, old.shape, old.dtype, "fp-cpu-2"));
  REQUIRE(stale.size() == 1);
  check_same(stale[0].winner, old);
  CHECK(stale[0].environment["compiler"] == "g++ 12.2.0");
  // The exact key is no stale winner of itself; another source of the kernel is.
  CHECK(must(store.stale_winners(old.kernel, old.source_hash, old.shape, old.dtype, "fp-cpu-1")).empty());
  CHECK(must(store.stale_winners(old.kernel, "new-source", old.shape, old.dtype, "fp-cpu-1")).size() == 1);
  CHECK(must(store.stale_winners(old.kernel, old.source_hash, "K=1,M=1,N=1", old.dtype, "fp-cpu-2")).empty());

  SECTION("an upsert of a device keeps its identity current") {
    must(store.upsert_device(cpu("fp-cpu-2", "EPYC-v2", "g++ 13.1.0")));
    CHECK(must(store.same_hardware("fp-cpu-2")).size() == 1);
    CHECK(must(store.stale_winners(old.kernel, old.source_hash, old.shape, old.dtype, "fp-cpu-2")).empty());
  }
}

TEST_CASE("upsert_winner replaces the winner of a key", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  WinnerRecord w = sample_winner();
  must(store.upsert_winner(w));

  WinnerRecord better = sample_winner();
  better.result_id = 42;
  better.job_id = 9;
  better.config = R"({"BLOCK_M":128,"BLOCK_N":64})";
  better.median_ms = 1.0;
  better.gflops = 1218.75;
  better.updated_at = w.updated_at + 1000;
  must(store.upsert_winner(better));

  auto found = must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint));
  REQUIRE(found.has_value());
  check_same(*found, better);

  WinnerRecord f16 = sample_winner();
  f16.dtype = "f16";
  must(store.upsert_winner(f16));
  auto all = must(store.all_winners());
  REQUIRE(all.size() == 2);
  CHECK(all[0].dtype == "f16");
  check_same(all[1], better);
}

TEST_CASE("list_jobs is newest first within the limit and jobs_in_state filters", "[db]") {
  test::TempDir dir;
  Store store = open_store(dir.str() + "/ktune.db");
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    JobRecord job = sample_job();
    job.shape = "K=" + std::to_string(i);
    ids.push_back(must(store.create_job(job)));
  }

  auto three = must(store.list_jobs(3));
  REQUIRE(three.size() == 3);
  CHECK(three[0].id == ids[4]);
  CHECK(three[1].id == ids[3]);
  CHECK(three[2].id == ids[2]);
  CHECK(three[0].shape == "K=4");
  CHECK(must(store.list_jobs(0)).size() == 5);
  CHECK(must(store.list_jobs(100)).size() == 5);

  must(store.set_job_state(ids[1], JobState::running));
  must(store.set_job_state(ids[3], JobState::running));
  must(store.set_job_state(ids[4], JobState::done));

  auto running = must(store.jobs_in_state(JobState::running));
  REQUIRE(running.size() == 2);
  CHECK(running[0].id == ids[1]);
  CHECK(running[1].id == ids[3]);
  CHECK(must(store.jobs_in_state(JobState::queued)).size() == 2);
  CHECK(must(store.jobs_in_state(JobState::done)).size() == 1);
  CHECK(must(store.jobs_in_state(JobState::interrupted)).empty());
}

TEST_CASE("a read-only store reads what the daemon wrote and refuses writes", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  std::int64_t job_id = 0;
  {
    Store writer = open_store(path);
    job_id = must(writer.create_job(sample_job()));
    must(writer.insert_result(sample_result(job_id, R"({"B":1})", 0)));
    must(writer.upsert_winner(sample_winner()));

    SECTION("while the writer is open") {
      Store reader = open_store(path, OpenMode::read_only);
      CHECK(reader.mode() == OpenMode::read_only);
      CHECK(reader.schema_version() == k_schema_version);
      CHECK(must(reader.get_job(job_id)).has_value());
      CHECK(must(reader.job_results(job_id)).size() == 1);

      // A write committed after the reader opened is visible to its next read.
      must(writer.insert_result(sample_result(job_id, R"({"B":2})", 1)));
      CHECK(must(reader.job_results(job_id)).size() == 2);

      const WinnerRecord w = sample_winner();
      CHECK(must(reader.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
                .has_value());

      auto refused = reader.insert_result(sample_result(job_id, R"({"B":3})", 2));
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().code == ktune::ErrorCode::db_error);
      CHECK(contains(refused.error().message, "read-only"));
      CHECK(contains(refused.error().message, path));
      CHECK_FALSE(reader.upsert_kernel("gemm", "h", "spec").ok());
      CHECK_FALSE(reader.upsert_device(DeviceInfo{"cpu", "fp", nlohmann::json::object(), ""}).ok());
      CHECK_FALSE(reader.create_job(sample_job()).ok());
      CHECK_FALSE(reader.update_job_progress(job_id, 1, 1).ok());
      CHECK_FALSE(reader.set_job_state(job_id, JobState::done).ok());
      CHECK_FALSE(reader.upsert_winner(sample_winner()).ok());
      CHECK_FALSE(reader.checkpoint().ok());
      CHECK(must(writer.job_results(job_id)).size() == 2);
    }
  }

  SECTION("after the writer closed") {
    Store reader = open_store(path, OpenMode::read_only);
    auto job = must(reader.get_job(job_id));
    REQUIRE(job.has_value());
    CHECK(job->kernel == "gemm");
    CHECK(must(reader.all_winners()).size() == 1);
  }
}

TEST_CASE("a read-only open of a missing file names the path", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/absent/ktune.db";
  auto store = Store::open(path, OpenMode::read_only);
  REQUIRE_FALSE(store.ok());
  CHECK(store.error().code == ktune::ErrorCode::db_error);
  CHECK(contains(store.error().message, path));
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("files that are not ktune databases are refused", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/other.db";
  const OpenMode mode = GENERATE(OpenMode::read_write, OpenMode::read_only);

  SECTION("another application id") {
    {
      RawDb raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      raw.exec("PRAGMA application_id = 305419896; CREATE TABLE notes (body TEXT);");
    }
    auto store = Store::open(path, mode);
    REQUIRE_FALSE(store.ok());
    CHECK(store.error().code == ktune::ErrorCode::db_error);
    CHECK(contains(store.error().message, path));
    CHECK(contains(store.error().message, "0x12345678"));
    RawDb raw(path, SQLITE_OPEN_READONLY);
    CHECK(raw.text("PRAGMA journal_mode") == "delete"); // left untouched
    CHECK(raw.integer("PRAGMA user_version") == 0);
  }

  SECTION("no application id but tables of its own") {
    {
      RawDb raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      raw.exec("CREATE TABLE notes (body TEXT);");
    }
    auto store = Store::open(path, mode);
    REQUIRE_FALSE(store.ok());
    CHECK(contains(store.error().message, path));
    CHECK(contains(store.error().message, "not a ktune database"));
  }

  SECTION("not an SQLite file at all") {
    dir.write("other.db", std::string(4096, 'x'));
    auto store = Store::open(path, mode);
    REQUIRE_FALSE(store.ok());
    CHECK(store.error().code == ktune::ErrorCode::db_error);
    CHECK(contains(store.error().message, path));
  }
}

TEST_CASE("a database from a newer ktune is refused", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  {
    Store store = open_store(path);
    must(store.create_job(sample_job()));
  }
  {
    RawDb raw(path, SQLITE_OPEN_READWRITE);
    raw.exec("PRAGMA user_version = 99");
  }
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    auto store = Store::open(path, mode);
    REQUIRE_FALSE(store.ok());
    CHECK(store.error().code == ktune::ErrorCode::db_error);
    CHECK(contains(store.error().message, path));
    CHECK(contains(store.error().message, "99"));
    CHECK(contains(store.error().message, "newer"));
  }
  RawDb raw(path, SQLITE_OPEN_READONLY);
  CHECK(raw.integer("PRAGMA user_version") == 99);
  CHECK(raw.integer("SELECT count(*) FROM jobs") == 1);
}

TEST_CASE("reopening a current database migrates nothing and keeps the data", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  std::int64_t job_id = 0;
  {
    Store store = open_store(path);
    job_id = must(store.create_job(sample_job()));
    must(store.insert_result(sample_result(job_id, R"({"B":1})", 0)));
    must(store.upsert_winner(sample_winner()));
  }

  // data_version changes for this connection whenever another connection commits a write.
  RawDb watcher(path, SQLITE_OPEN_READONLY);
  const auto version_before = watcher.integer("PRAGMA data_version");
  {
    Store store = open_store(path);
    CHECK(store.schema_version() == k_schema_version);
    CHECK(must(store.job_results(job_id)).size() == 1);
    CHECK(must(store.all_winners()).size() == 1);
  }
  CHECK(watcher.integer("PRAGMA data_version") == version_before);
  CHECK(watcher.integer("SELECT count(*) FROM jobs") == 1);
}

TEST_CASE("the file passes integrity_check after writes and checkpoint", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  Store store = open_store(path);
  must(store.upsert_kernel("gemm", "0123456789abcdef", "spec"));
  must(store.upsert_device(DeviceInfo{"cpu", "fp-cpu-1", {{"cores", 2}}, ""}));
  for (int j = 0; j < 3; ++j) {
    const auto job_id = must(store.create_job(sample_job()));
    for (int i = 0; i < 20; ++i) {
      must(store.insert_result(sample_result(job_id, "{\"I\":" + std::to_string(i) + "}", i)));
      must(store.update_job_progress(job_id, i + 1, 0));
    }
    must(store.set_job_state(job_id, JobState::done));
  }
  must(store.upsert_winner(sample_winner()));

  {
    RawDb raw(path, SQLITE_OPEN_READONLY);
    CHECK(raw.text("PRAGMA integrity_check") == "ok");
    CHECK(raw.text("PRAGMA foreign_key_check") == "");
  }

  // A lookup just before must not leave its cached statement holding a read transaction.
  const WinnerRecord w = sample_winner();
  CHECK(must(store.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
            .has_value());
  must(store.checkpoint());
  CHECK(std::filesystem::file_size(path + "-wal") == 0);
  RawDb raw(path, SQLITE_OPEN_READONLY);
  CHECK(raw.text("PRAGMA integrity_check") == "ok");
  CHECK(raw.integer("SELECT count(*) FROM results") == 60);
}

TEST_CASE("a store moves, and the moved-to store keeps working", "[db]") {
  test::TempDir dir;
  const std::string path_a = dir.str() + "/a.db";
  const std::string path_b = dir.str() + "/b.db";
  Store a = open_store(path_a);
  const WinnerRecord w = sample_winner();
  must(a.upsert_winner(w));
  CHECK(must(a.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint)).has_value());

  Store moved(std::move(a));
  CHECK(moved.path() == path_a);
  CHECK(must(moved.find_winner(w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint))
            .has_value());

  Store b = open_store(path_b);
  b = std::move(moved); // closes b.db, takes a.db
  CHECK(b.path() == path_a);
  CHECK(must(b.all_winners()).size() == 1);
  must(b.create_job(sample_job()));
}

TEST_CASE("writes in one transaction are committed together or not at all", "[db]") {
  test::TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  Store store = open_store(path);
  const auto job_id = must(store.create_job(sample_job()));

  // Two rows and the progress in one commit (the store's own transactions become savepoints).
  auto ok = store.in_transaction([&]() -> Result<void> {
    if (auto r = store.insert_result(sample_result(job_id, R"({"BLOCK_M":64})", 0)); !r) {
      return r.error();
    }
    if (auto r = store.insert_result(sample_result(job_id, R"({"BLOCK_M":32})", 1)); !r) {
      return r.error();
    }
    return store.update_job_progress(job_id, 2, 0);
  });
  REQUIRE(ok.ok());
  CHECK(must(store.job_results(job_id)).size() == 2);
  CHECK(must(store.get_job(job_id))->done == 2);

  // A failure inside rolls back every write made in it, and the store goes on writing.
  auto failed = store.in_transaction([&]() -> Result<void> {
    if (auto r = store.insert_result(sample_result(job_id, R"({"BLOCK_M":16})", 2)); !r) {
      return r.error();
    }
    if (auto r = store.update_job_progress(job_id, 3, 0); !r) return r.error();
    return store.insert_result(sample_result(job_id, R"({"BLOCK_M":64})", 3)).error(); // duplicate
  });
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().code == ktune::ErrorCode::duplicate_result);
  CHECK(must(store.job_results(job_id)).size() == 2);
  CHECK(must(store.get_job(job_id))->done == 2);
  must(store.insert_result(sample_result(job_id, R"({"BLOCK_M":8})", 4)));

  // Read back by another connection: only committed rows exist.
  Store reader = must(Store::open(path, OpenMode::read_only));
  CHECK(must(reader.job_results(job_id)).size() == 3);
}

TEST_CASE("pick_winner: the incumbent among ties, else the fastest, the lower index among equals",
          "[db]") {
  const auto row = [](std::int64_t index, double median_ms, bool tied) {
    ResultRecord r;
    r.config_index = index;
    r.config = "{\"X\":" + std::to_string(index) + "}";
    r.status = CandidateStatus::ok;
    r.stats.median_ms = median_ms;
    r.tied = tied;
    return r;
  };
  // Within 1% of the fastest: the same time, the lower index wins whichever measured faster.
  std::vector<ResultRecord> rows{row(0, 7.02, false), row(3, 6.983, true), row(5, 6.973, true)};
  CHECK(pick_winner(rows)->config_index == 3);
  rows[1].stats.median_ms = 6.963;
  CHECK(pick_winner(rows)->config_index == 3);
  // Further apart: the fastest.
  rows[1].stats.median_ms = 7.05;
  CHECK(pick_winner(rows)->config_index == 5);
  // The incumbent in the group, whatever its time.
  CHECK(pick_winner(rows, rows[1].config)->config_index == 3);
  // Not tied: never the winner while there are ties.
  CHECK(pick_winner(rows, rows[0].config)->config_index == 5);
  // No ties: the fastest ok result.
  for (auto& r : rows) r.tied = false;
  CHECK(pick_winner(rows)->config_index == 5);
}

TEST_CASE("pick_winner: an oversubscribed tie gives way to one that fits the machine", "[db]") {
  const auto row = [](std::int64_t index, double median_ms, bool over) {
    ResultRecord r;
    r.config_index = index;
    r.config = "{\"NTHREADS\":" + std::to_string(index) + "}";
    r.status = CandidateStatus::ok;
    r.stats.median_ms = median_ms;
    r.tied = true;
    r.conditions = over ? R"({"cpus":[1,0],"oversubscribed":true,"threads":4})"
                        : R"({"cpus":[1,0],"threads":2})";
    return r;
  };
  std::vector<ResultRecord> rows{row(2, 32.8, false), row(4, 31.1, true)};
  CHECK(oversubscribed(rows[1]));
  CHECK_FALSE(oversubscribed(rows[0]));
  CHECK(pick_winner(rows)->config_index == 2);
  // Not even as the incumbent.
  CHECK(pick_winner(rows, rows[1].config)->config_index == 2);
  // Out of the group, it is not considered at all; every tie oversubscribed: the usual rule.
  rows[0].tied = false;
  CHECK(pick_winner(rows)->config_index == 4);
}

TEST_CASE("canary readings are stored per device and read back by time", "[db][canary]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "ktune.db").string();
  Store store = open_store(path);
  const auto reading = [](const std::string& fingerprint, std::int64_t at, double compute) {
    CanaryReading r;
    r.fingerprint = fingerprint;
    r.device = "cpu";
    r.taken_at = at;
    r.compute_ms = compute;
    r.memory_ms = 2 * compute;
    r.context = "sweep start";
    return r;
  };
  REQUIRE(store.insert_canary_reading(reading("fp-a", 1000, 1.0)).ok());
  REQUIRE(store.insert_canary_reading(reading("fp-a", 3000, 1.5)).ok());
  REQUIRE(store.insert_canary_reading(reading("fp-b", 2000, 9.0)).ok());
  auto read = store.canary_readings("fp-a", 0, 2500);
  REQUIRE(read.ok());
  REQUIRE(read->size() == 1);
  CHECK((*read)[0].compute_ms == 1.0);
  CHECK((*read)[0].memory_ms == 2.0);
  CHECK((*read)[0].context == "sweep start");
  auto all = store.canary_readings("fp-a", 0, 10'000);
  REQUIRE(all.ok());
  CHECK(all->size() == 2);
  CHECK(all->back().taken_at == 3000);
  // A reader sees them too; it cannot write.
  Store reader = open_store(path, OpenMode::read_only);
  auto seen = reader.canary_readings("fp-b", 0, 10'000);
  REQUIRE(seen.ok());
  CHECK(seen->size() == 1);
  CHECK_FALSE(reader.insert_canary_reading(reading("fp-b", 5, 1)).ok());
}
