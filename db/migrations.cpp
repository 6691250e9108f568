#include "db/migrations.hpp"

#include "db/store.hpp"

#include <array>
#include <string>

namespace ktune::db {

namespace {

// Schema v1. Times are unix milliseconds (0 = not yet). Measurements are REAL and NULL only for
// NaN, which SQLite cannot store. winners.result_id/job_id are 0 for imported winners, so they
// carry no foreign key.
constexpr const char* k_schema_v1 = R"sql(
CREATE TABLE kernels (
  name        TEXT    NOT NULL,
  source_hash TEXT    NOT NULL,
  spec_text   TEXT    NOT NULL,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (name, source_hash)
);

CREATE TABLE devices (
  fingerprint TEXT    NOT NULL PRIMARY KEY,
  name        TEXT    NOT NULL,
  details     TEXT    NOT NULL CHECK (json_valid(details)),
  first_seen  INTEGER NOT NULL
);

CREATE TABLE jobs (
  id          INTEGER PRIMARY KEY,
  kernel      TEXT    NOT NULL,
  source_hash TEXT    NOT NULL,
  shape       TEXT    NOT NULL,
  dtype       TEXT    NOT NULL,
  device      TEXT    NOT NULL,
  fingerprint TEXT    NOT NULL,
  strategy    TEXT    NOT NULL,
  budget      INTEGER,
  state       TEXT    NOT NULL
              CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled', 'interrupted')),
  total       INTEGER NOT NULL DEFAULT 0,
  done        INTEGER NOT NULL DEFAULT 0,
  failed      INTEGER NOT NULL DEFAULT 0,
  error       TEXT    NOT NULL DEFAULT '',
  created_at  INTEGER NOT NULL,
  started_at  INTEGER NOT NULL DEFAULT 0,
  finished_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs (state);

CREATE TABLE results (
  id           INTEGER PRIMARY KEY,
  job_id       INTEGER NOT NULL REFERENCES jobs (id),
  kernel       TEXT    NOT NULL,
  source_hash  TEXT    NOT NULL,
  shape        TEXT    NOT NULL,
  dtype        TEXT    NOT NULL,
  fingerprint  TEXT    NOT NULL,
  config       TEXT    NOT NULL,
  config_index INTEGER NOT NULL,
  status       TEXT    NOT NULL
               CHECK (status IN ('ok', 'invalid_config', 'compile_error', 'compile_timeout',
                                 'launch_error', 'runtime_error', 'mismatch', 'crash', 'timeout',
                                 'worker_lost')),
  reason       TEXT    NOT NULL DEFAULT '',
  log          TEXT    NOT NULL DEFAULT '',
  n            INTEGER NOT NULL DEFAULT 0,
  min_ms       REAL,
  max_ms       REAL,
  median_ms    REAL,
  mean_ms      REAL,
  stddev_ms    REAL,
  q1_ms        REAL,
  q3_ms        REAL,
  gflops       REAL,
  gbps         REAL,
  compile_ms   REAL,
  created_at   INTEGER NOT NULL,
  UNIQUE (job_id, config)
);
CREATE INDEX results_by_key ON results (kernel, source_hash, shape, dtype, fingerprint);

CREATE TABLE winners (
  kernel      TEXT    NOT NULL,
  source_hash TEXT    NOT NULL,
  shape       TEXT    NOT NULL,
  dtype       TEXT    NOT NULL,
  fingerprint TEXT    NOT NULL,
  result_id   INTEGER NOT NULL,
  job_id      INTEGER NOT NULL,
  config      TEXT    NOT NULL,
  median_ms   REAL,
  gflops      REAL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (kernel, source_hash, shape, dtype, fingerprint)
);
)sql";

Result<void> create_schema_v1(DbRef db) { return db.exec("migration to schema v1", k_schema_v1); }

// Schema v2: the candidate's registers per thread and spill bytes (CUDA; -1 = unknown).
constexpr const char* k_schema_v2 = R"sql(
ALTER TABLE results ADD COLUMN registers   INTEGER NOT NULL DEFAULT -1;
ALTER TABLE results ADD COLUMN spill_bytes INTEGER NOT NULL DEFAULT -1;
)sql";

Result<void> add_result_resources_v2(DbRef db) {
  return db.exec("migration to schema v2", k_schema_v2);
}

// Schema v3 (pipelined, reproducible tuning): per result whether sampling was pruned, static
// shared bytes, whether it was re-measured as a near-tie, whether it is a declared tie of the
// winner; per job the search seed and the wall-time breakdown (ms).
constexpr const char* k_schema_v3 = R"sql(
ALTER TABLE results ADD COLUMN pruned       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE results ADD COLUMN shared_bytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE results ADD COLUMN remeasured   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE results ADD COLUMN tied         INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN seed           INTEGER;
ALTER TABLE jobs ADD COLUMN queue_ms       REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN compile_ms     REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN bench_ms       REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN overhead_ms    REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN compile_sum_ms REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN bench_sum_ms   REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN compiles       INTEGER NOT NULL DEFAULT 0;
)sql";

Result<void> add_pipeline_columns_v3(DbRef db) {
  return db.exec("migration to schema v3", k_schema_v3);
}

// Schema v4: the request options a resumed job must honour (remeasure, retry_failed, priority,
// per-job deadlines); jobs of older databases get the defaults.
constexpr const char* k_schema_v4 = R"sql(
ALTER TABLE jobs ADD COLUMN remeasure         INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN retry_failed      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN priority          INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN compile_timeout_s REAL;
ALTER TABLE jobs ADD COLUMN bench_timeout_s   REAL;
)sql";

Result<void> add_job_options_v4(DbRef db) { return db.exec("migration to schema v4", k_schema_v4); }

// Schema v5: the latest job of a kernel without a scan of every job (the clients' database
// fallback asks for it; a daemon with many imported jobs of other kernels made it a full scan).
constexpr const char* k_schema_v5 = R"sql(
CREATE INDEX jobs_by_kernel ON jobs (kernel, id);
)sql";

Result<void> add_jobs_by_kernel_v5(DbRef db) {
  return db.exec("migration to schema v5", k_schema_v5);
}

// Schema v6: every measured result keeps its raw samples (little-endian float32, 4 bytes each),
// so comparisons can test the samples themselves; older rows have NULL (none kept).
constexpr const char* k_schema_v6 = R"sql(
ALTER TABLE results ADD COLUMN samples BLOB;
)sql";

Result<void> add_result_samples_v6(DbRef db) {
  return db.exec("migration to schema v6", k_schema_v6);
}

// Schema v7: a job's time budget (`tune --budget 60s`), so that a resumed job keeps it.
constexpr const char* k_schema_v7 = R"sql(
ALTER TABLE jobs ADD COLUMN budget_s REAL;
)sql";

Result<void> add_job_time_budget_v7(DbRef db) {
  return db.exec("migration to schema v7", k_schema_v7);
}

// Schema v8: what a job's search learnt from and when it found its best (`job` op: `best_at`,
// `prior`).
constexpr const char* k_schema_v8 = R"sql(
ALTER TABLE jobs ADD COLUMN best_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN prior   TEXT;
)sql";

Result<void> add_job_search_v8(DbRef db) { return db.exec("migration to schema v8", k_schema_v8); }

// Schema v9: the conditions a result was measured under (a JSON object; CUDA: the timing plan,
// the spin, SM and memory clocks and their clock-event reasons; '' when none were recorded).
constexpr const char* k_schema_v9 = R"sql(
ALTER TABLE results ADD COLUMN conditions TEXT NOT NULL DEFAULT '';
)sql";

Result<void> add_result_conditions_v9(DbRef db) {
  return db.exec("migration to schema v9", k_schema_v9);
}

// Schema v10: the result a job named its winner (the incumbent kept, or the rule's pick), so
// every reader names the winner the job named, NULL for older jobs and jobs without one; and
// why a result was measured without its device's machine-wide lock, NULL when it held it.
constexpr const char* k_schema_v10 = R"sql(
ALTER TABLE jobs ADD COLUMN winner_result INTEGER;
ALTER TABLE results ADD COLUMN unlocked TEXT;
)sql";

Result<void> add_job_winner_v10(DbRef db) { return db.exec("migration to schema v10", k_schema_v10); }

// Schema v11: the speed canary's readings (daemon/canary.hpp): two small fixed kernels measured on
// a device at a sweep's start and end and while long jobs run, so that a comparison with history
// can tell a machine that moved from a kernel that did.
constexpr const char* k_schema_v11 = R"sql(
CREATE TABLE canary_readings (
  id          INTEGER PRIMARY KEY,
  fingerprint TEXT    NOT NULL,
  device      TEXT    NOT NULL,
  taken_at    INTEGER NOT NULL,
  compute_ms  REAL    NOT NULL,
  memory_ms   REAL    NOT NULL,
  context     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX canary_readings_by_device ON canary_readings (fingerprint, taken_at);
)sql";

Result<void> add_canary_readings_v11(DbRef db) {
  return db.exec("migration to schema v11", k_schema_v11);
}

constexpr std::array k_migrations{
    Migration{"create kernels, devices, jobs, results and winners", &create_schema_v1},
    Migration{"add results.registers and results.spill_bytes", &add_result_resources_v2},
    Migration{"add pruned/remeasured/tied results and job timing", &add_pipeline_columns_v3},
    Migration{"add the job's request options", &add_job_options_v4},
    Migration{"index jobs by kernel", &add_jobs_by_kernel_v5},
    Migration{"keep each result's raw samples", &add_result_samples_v6},
    Migration{"add the job's time budget", &add_job_time_budget_v7},
    Migration{"add the job's search record (best_at, prior)", &add_job_search_v8},
    Migration{"add the conditions each result was measured under", &add_result_conditions_v9},
    Migration{"add each job's named winner and results measured without their device lock",
              &add_job_winner_v10},
    Migration{"add the speed canary's readings", &add_canary_readings_v11},
};
static_assert(k_migrations.size() == static_cast<std::size_t>(k_schema_version),
              "k_schema_version must equal the number of migrations");

} // namespace

std::span<const Migration> schema_migrations() { return k_migrations; }

Result<int> run_migrations(DbRef db, std::span<const Migration> migrations) {
  constexpr std::string_view op = "migrate";
  const auto target = static_cast<std::int64_t>(migrations.size());

  auto check_version = [&](std::int64_t found) -> Result<void> {
    if (found <= target) return {};
    return db.error(op, "schema version " + std::to_string(found) + " is newer than " +
                            std::to_string(target) + ", the newest this ktune knows; "
                            "use the ktune that wrote it or another database");
  };

  auto before = db.query_int(op, "PRAGMA user_version");
  if (!before) return before.error();
  if (auto ok = check_version(*before); !ok) return ok.error();
  if (*before == target) return 0;

  auto tx = Transaction::begin(db, op);
  if (!tx) return tx.error();
  // Read again under the write lock: another connection may have migrated in between.
  auto current = db.query_int(op, "PRAGMA user_version");
  if (!current) return current.error();
  if (auto ok = check_version(*current); !ok) return ok.error();
  if (*current < 0) {
    return db.error(op, "user_version " + std::to_string(*current) + " is negative; expected 0.." +
                            std::to_string(target));
  }

  int applied = 0;
  for (auto version = *current; version < target; ++version) {
    const Migration& step = migrations[static_cast<std::size_t>(version)];
    if (auto done = step.apply(db); !done) {
      Error error = done.error();
      error.message = "schema step to v" + std::to_string(version + 1) + " (" +
                      std::string(step.description) + ") failed, nothing was changed: " +
                      error.message;
      return error;
    }
    ++applied;
  }

  const std::string set_versions = "PRAGMA application_id = " + std::to_string(k_application_id) +
                                   "; PRAGMA user_version = " + std::to_string(target) + ";";
  if (auto set = db.exec(op, set_versions.c_str()); !set) return set.error();
  if (auto committed = tx->commit(); !committed) return committed.error();
  return applied;
}

} // namespace ktune::db
