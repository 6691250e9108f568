#include "db/migrations.hpp"
#include "db/salvage.hpp"
#include "db/store.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

using namespace ktune;
using ktune::db::DbRef;
using ktune::db::Migration;

namespace {

// A read-write connection for driving run_migrations directly.
class Connection {
public:
  explicit Connection(const std::string& path) : m_path(path) {
    const int rc = sqlite3_open_v2(path.c_str(), &m_db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    INFO(sqlite3_errmsg(m_db));
    REQUIRE(rc == SQLITE_OK);
  }
  ~Connection() { sqlite3_close_v2(m_db); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  [[nodiscard]] DbRef ref() const { return DbRef{m_db, m_path}; }

  std::int64_t integer(const char* sql) const {
    auto value = ref().query_int("test", sql);
    INFO((value.ok() ? std::string() : value.error().message));
    REQUIRE(value.ok());
    return *value;
  }
  void exec(const char* sql) const {
    auto done = ref().exec("test", sql);
    INFO((done.ok() ? std::string() : done.error().message));
    REQUIRE(done.ok());
  }
  bool accepts(const char* sql) const { return ref().exec("test", sql).ok(); }
  bool has_table(const std::string& name) const {
    const std::string sql =
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '" + name + "'";
    return integer(sql.c_str()) == 1;
  }
  std::vector<std::string> columns(const std::string& table) const {
    const std::string sql = "SELECT name FROM pragma_table_info('" + table + "') ORDER BY cid";
    auto statement = db::Statement::prepare(ref(), "test", sql);
    REQUIRE(statement.ok());
    std::vector<std::string> names;
    while (statement->step() == SQLITE_ROW) names.push_back(statement->column_text(0));
    return names;
  }

private:
  std::string m_path;
  sqlite3* m_db = nullptr;
};

int run(const Connection& connection, std::span<const Migration> migrations) {
  auto applied = db::run_migrations(connection.ref(), migrations);
  INFO((applied.ok() ? std::string() : applied.error().message));
  REQUIRE(applied.ok());
  return *applied;
}

Result<void> create_a(DbRef db) { return db.exec("create a", "CREATE TABLE a (x INTEGER)"); }
Result<void> create_b(DbRef db) { return db.exec("create b", "CREATE TABLE b (y INTEGER)"); }
Result<void> broken(DbRef db) { return db.exec("broken", "CREATE TABLE c (z INTEGER"); }

} // namespace

TEST_CASE("the schema list matches the schema version", "[db]") {
  CHECK(db::schema_migrations().size() == static_cast<std::size_t>(k_schema_version));
  for (const Migration& step : db::schema_migrations()) {
    CHECK_FALSE(step.description.empty());
    CHECK(step.apply != nullptr);
  }
}

TEST_CASE("migrating a fresh database creates the current schema once", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  CHECK(run(connection, db::schema_migrations()) == k_schema_version);
  CHECK(connection.integer("PRAGMA user_version") == k_schema_version);
  CHECK(connection.integer("PRAGMA application_id") == k_application_id);
  CHECK(run(connection, db::schema_migrations()) == 0);
  CHECK(connection.integer("PRAGMA user_version") == k_schema_version);

  CHECK(connection.columns("kernels") ==
        std::vector<std::string>{"name", "source_hash", "spec_text", "created_at"});
  CHECK(connection.columns("devices") ==
        std::vector<std::string>{"fingerprint", "name", "details", "first_seen", "hardware_id",
                                 "environment"});
  CHECK(connection.columns("jobs") ==
        std::vector<std::string>{"id", "kernel", "source_hash", "shape", "dtype", "device",
                                 "fingerprint", "strategy", "budget", "state", "total", "done",
                                 "failed", "error", "created_at", "started_at", "finished_at",
                                 "seed", "queue_ms", "compile_ms", "bench_ms", "overhead_ms",
                                 "compile_sum_ms", "bench_sum_ms", "compiles", "remeasure",
                                 "retry_failed", "priority", "compile_timeout_s",
                                 "bench_timeout_s", "budget_s", "best_at", "prior",
                                 "winner_result", "configs"});
  CHECK(connection.columns("results") ==
        std::vector<std::string>{"id", "job_id", "kernel", "source_hash", "shape", "dtype",
                                 "fingerprint", "config", "config_index", "status", "reason",
                                 "log", "n", "min_ms", "max_ms", "median_ms", "mean_ms",
                                 "stddev_ms", "q1_ms", "q3_ms", "gflops", "gbps", "compile_ms",
                                 "created_at", "registers", "spill_bytes", "pruned",
                                 "shared_bytes", "remeasured", "tied", "samples", "conditions",
                                 "unlocked"});
  CHECK(connection.columns("winners") ==
        std::vector<std::string>{"kernel", "source_hash", "shape", "dtype", "fingerprint",
                                 "result_id", "job_id", "config", "median_ms", "gflops",
                                 "updated_at"});
}

TEST_CASE("schema v1 constraints hold", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  REQUIRE(run(connection, db::schema_migrations()) == k_schema_version);
  connection.exec("PRAGMA foreign_keys = ON");
  connection.exec(
      "INSERT INTO jobs (id, kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, created_at) VALUES (1, 'gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', "
      "'queued', 1)");

  SECTION("job state must be one of the six") {
    CHECK_FALSE(connection.accepts("UPDATE jobs SET state = 'paused' WHERE id = 1"));
    CHECK(connection.accepts("UPDATE jobs SET state = 'interrupted' WHERE id = 1"));
  }
  SECTION("result status must be one of the ten, and (job_id, config) is unique") {
    const char* insert_ok =
        "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
        "config_index, status, created_at) VALUES (1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, "
        "'ok', 1)";
    CHECK_FALSE(connection.accepts(
        "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
        "config_index, status, created_at) VALUES (1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, "
        "'skipped', 1)"));
    CHECK(connection.accepts(insert_ok));
    CHECK_FALSE(connection.accepts(insert_ok));
  }
  SECTION("a result needs its job") {
    CHECK_FALSE(connection.accepts(
        "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
        "config_index, status, created_at) VALUES (2, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, "
        "'ok', 1)"));
  }
  SECTION("device details are JSON") {
    CHECK_FALSE(connection.accepts(
        "INSERT INTO devices (fingerprint, name, details, first_seen) VALUES ('a', 'cpu', "
        "'{not json', 1)"));
    CHECK(connection.accepts(
        "INSERT INTO devices (fingerprint, name, details, first_seen) VALUES ('a', 'cpu', "
        "'{\"cores\":2}', 1)"));
  }
  SECTION("one winner per key") {
    const char* insert =
        "INSERT INTO winners (kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, "
        "config, median_ms, gflops, updated_at) VALUES ('gemm', 'h', 'M=1', 'f32', 'fp', 0, 0, "
        "'{}', 1.0, 2.0, 1)";
    CHECK(connection.accepts(insert));
    CHECK_FALSE(connection.accepts(insert));
  }
}

TEST_CASE("migrations run in order, in one transaction", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");

  SECTION("only the missing steps run") {
    const std::array<Migration, 1> first{Migration{"create a", &create_a}};
    const std::array<Migration, 2> both{Migration{"create a", &create_a},
                                        Migration{"create b", &create_b}};
    CHECK(run(connection, first) == 1);
    CHECK(connection.has_table("a"));
    CHECK_FALSE(connection.has_table("b"));
    CHECK(run(connection, both) == 1);
    CHECK(connection.has_table("b"));
    CHECK(connection.integer("PRAGMA user_version") == 2);
  }

  SECTION("a failing step leaves the database untouched") {
    const std::array<Migration, 3> steps{Migration{"create a", &create_a},
                                         Migration{"create b", &create_b},
                                         Migration{"create c", &broken}};
    auto applied = db::run_migrations(connection.ref(), steps);
    REQUIRE_FALSE(applied.ok());
    CHECK(applied.error().code == ktune::ErrorCode::db_error);
    CHECK(applied.error().message.find("v3") != std::string::npos);
    CHECK(applied.error().message.find("create c") != std::string::npos);
    CHECK(applied.error().message.find(dir.str()) != std::string::npos);
    CHECK_FALSE(connection.has_table("a"));
    CHECK_FALSE(connection.has_table("b"));
    CHECK(connection.integer("PRAGMA user_version") == 0);
    CHECK(connection.integer("PRAGMA application_id") == 0);
    // The connection is usable afterwards: no transaction was left open.
    CHECK(sqlite3_get_autocommit(connection.ref().handle) != 0);
  }

  SECTION("a newer database is refused") {
    connection.exec("PRAGMA user_version = 99");
    auto applied = db::run_migrations(connection.ref(), db::schema_migrations());
    REQUIRE_FALSE(applied.ok());
    CHECK(applied.error().message.find("99") != std::string::npos);
    CHECK(applied.error().message.find("newer") != std::string::npos);
    CHECK(connection.integer("PRAGMA user_version") == 99);
  }
}

TEST_CASE("schema v2 adds results.registers and spill_bytes to a v1 database", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 2);
  CHECK(run(connection, all.subspan(0, 1)) == 1);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 1)");
  connection.exec(
      "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
      "config_index, status, reason, log, n, compile_ms, created_at) VALUES "
      "(1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, 'ok', '', '', 1, 1.0, 1)");
  CHECK(run(connection, all.subspan(0, 2)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 2);
  CHECK(connection.integer("SELECT registers FROM results") == -1);
  CHECK(connection.integer("SELECT spill_bytes FROM results") == -1);
}

TEST_CASE("schema v4 gives the jobs of a v3 database the default request options", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 4);
  CHECK(run(connection, all.subspan(0, 3)) == 3);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at, seed) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'random', 'interrupted', 4, 1, 0, '', 1, 1, 0, 9)");
  CHECK(run(connection, all.subspan(0, 4)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 4);
  CHECK(connection.integer("SELECT remeasure FROM jobs") == 0);
  CHECK(connection.integer("SELECT retry_failed FROM jobs") == 0);
  CHECK(connection.integer("SELECT priority FROM jobs") == 0);
  CHECK(connection.integer("SELECT compile_timeout_s IS NULL AND bench_timeout_s IS NULL FROM jobs") == 1);
  CHECK(connection.integer("SELECT seed FROM jobs") == 9);
}

TEST_CASE("schema v5 lets the clients find a kernel's newest job without scanning every job",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 5);
  CHECK(run(connection, all.subspan(0, 5)) == 5);
  CHECK(connection.integer("PRAGMA user_version") == 5);
  // The clients' fallback subquery (client/ktune_client.cpp): its plan searches the index
  // instead of scanning the jobs table.
  auto plan = db::Statement::prepare(
      connection.ref(), "test",
      "EXPLAIN QUERY PLAN SELECT source_hash FROM jobs WHERE kernel = 'gemm' ORDER BY id DESC "
      "LIMIT 1");
  REQUIRE(plan.ok());
  std::string details;
  while (plan->step() == SQLITE_ROW) details += plan->column_text(3) + std::string("; ");
  INFO(details);
  CHECK(details.find("USING INDEX jobs_by_kernel") != std::string::npos);
  CHECK(details.find("SCAN jobs") == std::string::npos);
}

TEST_CASE("schema v6 keeps samples of new results, results of a v5 database have none", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 6);
  CHECK(run(connection, all.subspan(0, 5)) == 5);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 2)");
  connection.exec(
      "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
      "config_index, status, reason, log, n, min_ms, max_ms, median_ms, mean_ms, stddev_ms, "
      "gflops, gbps, compile_ms, created_at) VALUES (1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, "
      "'ok', '', '', 3, 1, 3, 2, 2, 1, 0, 0, 0, 5)");
  CHECK(run(connection, all.subspan(0, 6)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 6);
  CHECK(connection.integer("SELECT samples IS NULL FROM results") == 1);
  // Four bytes a sample: a blob of two float32 is 8 bytes.
  connection.exec("UPDATE results SET samples = X'0000803F00000040'");
  CHECK(connection.integer("SELECT length(samples) FROM results") == 8);
}

TEST_CASE("schema v7 keeps a job's time budget, jobs of a v6 database have none", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 7);
  CHECK(run(connection, all.subspan(0, 6)) == 6);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 2)");
  CHECK(run(connection, all.subspan(0, 7)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 7);
  CHECK(connection.integer("SELECT budget_s IS NULL FROM jobs") == 1);
}

TEST_CASE("schema v8 keeps a job's search record, jobs of a v7 database have none", "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 8);
  CHECK(run(connection, all.subspan(0, 7)) == 7);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'bayes', 'done', 1, 1, 0, '', 1, 1, 2)");
  CHECK(run(connection, all.subspan(0, 8)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 8);
  CHECK(connection.integer("SELECT best_at FROM jobs") == 0);
  CHECK(connection.integer("SELECT prior IS NULL FROM jobs") == 1);
}

TEST_CASE("schema v9 keeps each result's measurement conditions, results of a v8 database have none",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 9);
  CHECK(run(connection, all.subspan(0, 8)) == 8);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cuda:0', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 2)");
  connection.exec(
      "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
      "config_index, status, reason, log, n, min_ms, max_ms, median_ms, mean_ms, stddev_ms, "
      "gflops, gbps, compile_ms, created_at) VALUES (1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{}', 0, "
      "'ok', '', '', 3, 1, 3, 2, 2, 1, 0, 0, 0, 5)");
  CHECK(run(connection, all.subspan(0, 9)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 9);
  CHECK(connection.integer("SELECT length(conditions) FROM results") == 0);
  CHECK(connection.integer("SELECT count(*) FROM results WHERE median_ms = 2") == 1);
}

TEST_CASE("schema v10 keeps the result a job named its winner, jobs of a v9 database name none",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 10);
  CHECK(run(connection, all.subspan(0, 9)) == 9);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 2)");
  CHECK(run(connection, all.subspan(0, 10)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 10);
  CHECK(connection.integer("SELECT winner_result IS NULL FROM jobs") == 1);
  CHECK(connection.integer("SELECT count(*) FROM results WHERE unlocked IS NOT NULL") == 0);
}

TEST_CASE("schema v12 keeps the candidates a job was given, jobs of a v11 database have none",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 12);
  CHECK(run(connection, all.subspan(0, 11)) == 11);
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 1, 1, 0, '', 1, 1, 2)");
  CHECK(run(connection, all.subspan(0, 12)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 12);
  CHECK(connection.integer("SELECT count(*) FROM jobs WHERE strategy = 'exhaustive'") == 1);
  CHECK(connection.integer("SELECT configs IS NULL FROM jobs") == 1);
}

TEST_CASE("schema v13 splits every stored device into hardware and environment, keeping its rows",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  REQUIRE(all.size() >= 13);
  CHECK(run(connection, all.subspan(0, 12)) == 12);
  // One CPU under two compilers, and a winner tuned under the first.
  connection.exec(
      "INSERT INTO devices (fingerprint, name, details, first_seen) VALUES "
      "('fp-gcc12', 'cpu', '{\"kind\":\"cpu\",\"model\":\"EPYC\",\"cores\":2,\"compiler\":\"g++ 12.2.0\"}', 1), "
      "('fp-gcc13', 'cpu', '{\"kind\":\"cpu\",\"model\":\"EPYC\",\"cores\":2,\"compiler\":\"g++ 13.1.0\"}', 2), "
      "('fp-other', 'cpu', '{\"kind\":\"cpu\",\"model\":\"Xeon\",\"cores\":8,\"compiler\":\"g++ 12.2.0\"}', 3)");
  connection.exec(
      "INSERT INTO winners (kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, "
      "config, median_ms, gflops, updated_at) VALUES ('gemm', 'h', 'M=1', 'f32', 'fp-gcc12', 0, 0, "
      "'{\"BM\":32}', 1.5, 0, 5)");
  CHECK(run(connection, all.subspan(0, 13)) == 1);
  CHECK(connection.integer("PRAGMA user_version") == 13);
  CHECK(connection.integer("SELECT count(*) FROM devices") == 3);
  CHECK(connection.integer("SELECT count(*) FROM winners WHERE median_ms = 1.5") == 1);
  CHECK(connection.integer("SELECT count(*) FROM devices WHERE hardware_id = ''") == 0);
  CHECK(connection.integer("SELECT count(DISTINCT hardware_id) FROM devices") == 2);
  CHECK(connection.integer("SELECT count(DISTINCT environment) FROM devices") == 2);
  CHECK(connection.integer("SELECT count(*) FROM devices WHERE hardware_id = (SELECT hardware_id FROM "
                           "devices WHERE fingerprint = 'fp-gcc12')") == 2);
  CHECK(connection.integer("SELECT count(*) FROM devices WHERE environment ->> 'compiler' = 'g++ 13.1.0' "
                           "AND fingerprint = 'fp-gcc13'") == 1);
}

TEST_CASE("a database from before schema v13 recovered into a new one gets its devices' identity",
          "[db]") {
  test::TempDir dir;
  {
    Connection connection(dir.str() + "/old.db");
    CHECK(run(connection, db::schema_migrations().subspan(0, 12)) == 12);
    connection.exec(
        "INSERT INTO devices (fingerprint, name, details, first_seen) VALUES "
        "('fp-gcc12', 'cpu', '{\"kind\":\"cpu\",\"model\":\"EPYC\",\"compiler\":\"g++ 12.2.0\"}', 1)");
  }
  auto recovered = recover_database(dir.str() + "/old.db", dir.str() + "/new.db");
  INFO((recovered.ok() ? std::string() : recovered.error().message));
  REQUIRE(recovered.ok());
  Connection fresh(dir.str() + "/new.db");
  CHECK(fresh.integer("SELECT count(*) FROM devices WHERE fingerprint = 'fp-gcc12'") == 1);
  CHECK(fresh.integer("SELECT count(*) FROM devices WHERE hardware_id = ''") == 0);
  CHECK(fresh.integer("SELECT count(*) FROM devices WHERE environment ->> 'compiler' = 'g++ 12.2.0'") == 1);
}

TEST_CASE("a v8 database upgraded to the current schema keeps every result, winner, job and device",
          "[db]") {
  test::TempDir dir;
  Connection connection(dir.str() + "/ktune.db");
  const auto all = db::schema_migrations();
  CHECK(run(connection, all.subspan(0, 8)) == 8);
  connection.exec(
      "INSERT INTO devices (fingerprint, name, details, first_seen) VALUES "
      "('fp', 'cpu', '{\"kind\":\"cpu\",\"model\":\"EPYC\",\"compiler\":\"g++ 12.2.0\"}', 1)");
  connection.exec(
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, "
      "state, total, done, failed, error, created_at, started_at, finished_at) VALUES "
      "('gemm', 'h', 'M=1', 'f32', 'cpu', 'fp', 'exhaustive', 'done', 2, 2, 0, '', 1, 1, 2)");
  connection.exec(
      "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
      "config_index, status, reason, log, n, min_ms, max_ms, median_ms, mean_ms, stddev_ms, "
      "gflops, gbps, compile_ms, created_at) VALUES "
      "(1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{\"BM\":32}', 0, 'ok', '', '', 3, 1, 3, 2, 2, 1, 0, 0, 0, 5), "
      "(1, 'gemm', 'h', 'M=1', 'f32', 'fp', '{\"BM\":64}', 1, 'ok', '', '', 3, 1, 4, 3, 3, 1, 0, 0, 0, 6)");
  connection.exec(
      "INSERT INTO winners (kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, "
      "config, median_ms, gflops, updated_at) VALUES ('gemm', 'h', 'M=1', 'f32', 'fp', 1, 1, "
      "'{\"BM\":32}', 2, 0, 7)");
  CHECK(run(connection, all) == static_cast<int>(all.size()) - 8);
  CHECK(connection.integer("PRAGMA user_version") == k_schema_version);
  CHECK(connection.integer("SELECT count(*) FROM results") == 2);
  CHECK(connection.integer("SELECT count(*) FROM results WHERE median_ms = 3 AND config = '{\"BM\":64}'") == 1);
  CHECK(connection.integer("SELECT count(*) FROM winners WHERE result_id = 1 AND median_ms = 2") == 1);
  CHECK(connection.integer("SELECT count(*) FROM jobs WHERE state = 'done' AND total = 2") == 1);
  CHECK(connection.integer("SELECT count(*) FROM devices WHERE fingerprint = 'fp' AND hardware_id <> ''") == 1);
}
