#include "db/store.hpp"

#include "db/client_query.hpp"

#include "core/device_identity.hpp"
#include "db/migrations.hpp"
#include "db/sqlite.hpp"

#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace ktune {

using db::DbRef;
using db::Lifetime;
using db::ResetOnExit;
using db::Statement;
using db::Transaction;

namespace {

constexpr std::array k_job_states{JobState::queued, JobState::running,   JobState::done,
                                  JobState::failed, JobState::cancelled, JobState::interrupted};

constexpr int k_busy_timeout_ms = 5000;

std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string hex32(std::int64_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(static_cast<std::uint32_t>(value)));
  return text;
}

struct ConnectionCloser {
  void operator()(sqlite3* handle) const noexcept { sqlite3_close_v2(handle); }
};
using Connection = std::unique_ptr<sqlite3, ConnectionCloser>;

Error unknown_job(DbRef db, std::string_view op, std::int64_t job_id) {
  return make_error(ErrorCode::unknown_job, std::string(op) + " on " + std::string(db.path) +
                                       ": no job with id " + std::to_string(job_id));
}

// ---- row layouts: the SELECT column lists and their readers stay side by side ----

constexpr const char* k_job_columns =
    "id, kernel, source_hash, shape, dtype, device, fingerprint, strategy, budget, state, total, "
    "done, failed, error, created_at, started_at, finished_at, seed, queue_ms, compile_ms, "
    "bench_ms, overhead_ms, compile_sum_ms, bench_sum_ms, compiles, remeasure, retry_failed, "
    "priority, compile_timeout_s, bench_timeout_s, budget_s, best_at, prior, winner_result, configs";

Result<JobRecord> read_job(DbRef db, std::string_view op, const Statement& row) {
  JobRecord job;
  job.id = row.column_int(0);
  job.kernel = row.column_text(1);
  job.source_hash = row.column_text(2);
  job.shape = row.column_text(3);
  job.dtype = row.column_text(4);
  job.device = row.column_text(5);
  job.fingerprint = row.column_text(6);
  job.strategy = row.column_text(7);
  if (!row.column_is_null(8)) job.budget = row.column_int(8);
  const std::string state = row.column_text(9);
  const auto parsed = parse_job_state(state);
  if (!parsed) {
    return db.error(op, "jobs.state '" + state + "' of job " + std::to_string(job.id) +
                            " is not a job state");
  }
  job.state = *parsed;
  job.total = row.column_int(10);
  job.done = row.column_int(11);
  job.failed = row.column_int(12);
  job.error = row.column_text(13);
  job.created_at = row.column_int(14);
  job.started_at = row.column_int(15);
  job.finished_at = row.column_int(16);
  if (!row.column_is_null(17)) job.seed = row.column_int(17);
  job.timing.queue_ms = row.column_double(18);
  job.timing.compile_ms = row.column_double(19);
  job.timing.bench_ms = row.column_double(20);
  job.timing.overhead_ms = row.column_double(21);
  job.timing.compile_sum_ms = row.column_double(22);
  job.timing.bench_sum_ms = row.column_double(23);
  job.timing.compiles = row.column_int(24);
  job.options.remeasure = row.column_int(25) != 0;
  job.options.retry_failed = row.column_int(26) != 0;
  job.options.priority = static_cast<int>(row.column_int(27));
  if (!row.column_is_null(28)) job.options.compile_timeout_s = row.column_double(28);
  if (!row.column_is_null(29)) job.options.bench_timeout_s = row.column_double(29);
  if (!row.column_is_null(30)) job.budget_s = row.column_double(30);
  job.search.best_at = row.column_int(31);
  if (!row.column_is_null(32)) job.search.prior = row.column_text(32);
  if (!row.column_is_null(33)) job.winner_result = row.column_int(33);
  if (!row.column_is_null(34)) job.configs = row.column_text(34);
  return job;
}

// results.samples: float32 little-endian, 4 bytes a sample.
static_assert(std::endian::native == std::endian::little && sizeof(float) == 4,
              "results.samples is stored as the machine's float32; add a byte swap here");

std::string encode_samples(const std::vector<float>& samples_ms) {
  std::string out(samples_ms.size() * sizeof(float), '\0');
  if (!samples_ms.empty()) std::memcpy(out.data(), samples_ms.data(), out.size());
  return out;
}

// A blob whose size is not a multiple of 4 is cut to the whole samples it holds.
std::vector<float> decode_samples(const std::string& blob) {
  std::vector<float> out(blob.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), blob.data(), out.size() * sizeof(float));
  return out;
}

constexpr const char* k_result_columns =
    "id, job_id, kernel, source_hash, shape, dtype, fingerprint, config, config_index, status, "
    "reason, log, n, min_ms, max_ms, median_ms, mean_ms, stddev_ms, q1_ms, q3_ms, gflops, gbps, "
    "compile_ms, created_at, registers, spill_bytes, pruned, shared_bytes, remeasured, tied, samples, "
    "conditions, unlocked";

Result<ResultRecord> read_result(DbRef db, std::string_view op, const Statement& row) {
  ResultRecord result;
  result.id = row.column_int(0);
  result.job_id = row.column_int(1);
  result.kernel = row.column_text(2);
  result.source_hash = row.column_text(3);
  result.shape = row.column_text(4);
  result.dtype = row.column_text(5);
  result.fingerprint = row.column_text(6);
  result.config = row.column_text(7);
  result.config_index = row.column_int(8);
  const std::string status = row.column_text(9);
  const auto parsed = parse_candidate_status(status);
  if (!parsed) {
    return db.error(op, "results.status '" + status + "' of result " + std::to_string(result.id) +
                            " is not a candidate status");
  }
  result.status = *parsed;
  result.reason = row.column_text(10);
  result.log = row.column_text(11);
  result.stats.n = static_cast<std::size_t>(row.column_int(12));
  result.stats.min_ms = row.column_double(13);
  result.stats.max_ms = row.column_double(14);
  result.stats.median_ms = row.column_double(15);
  result.stats.mean_ms = row.column_double(16);
  result.stats.stddev_ms = row.column_double(17);
  result.stats.q1_ms = row.column_double(18);
  result.stats.q3_ms = row.column_double(19);
  result.gflops = row.column_double(20);
  result.gbps = row.column_double(21);
  result.compile_ms = row.column_double(22);
  result.created_at = row.column_int(23);
  result.registers = static_cast<int>(row.column_int(24));
  result.spill_bytes = static_cast<int>(row.column_int(25));
  result.pruned = row.column_int(26) != 0;
  result.shared_bytes = static_cast<int>(row.column_int(27));
  result.remeasured = row.column_int(28) != 0;
  result.tied = row.column_int(29) != 0;
  result.samples_ms = decode_samples(row.column_blob(30));
  result.conditions = row.column_text(31);
  if (!row.column_is_null(32)) result.unlocked = row.column_text(32);
  return result;
}

constexpr const char* k_winner_columns =
    "kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, config, median_ms, gflops, "
    "updated_at";

WinnerRecord read_winner(const Statement& row) {
  WinnerRecord winner;
  winner.kernel = row.column_text(0);
  winner.source_hash = row.column_text(1);
  winner.shape = row.column_text(2);
  winner.dtype = row.column_text(3);
  winner.fingerprint = row.column_text(4);
  winner.result_id = row.column_int(5);
  winner.job_id = row.column_int(6);
  winner.config = row.column_text(7);
  winner.median_ms = row.column_double(8);
  winner.gflops = row.column_double(9);
  winner.updated_at = row.column_int(10);
  return winner;
}

// Steps `statement` to the end, turning each row into a T with `read` (which returns T or
// Result<T>).
template <class T, class Read>
Result<std::vector<T>> collect(DbRef db, std::string_view op, Statement& statement, Read read) {
  std::vector<T> rows;
  int rc = statement.step();
  for (; rc == SQLITE_ROW; rc = statement.step()) {
    auto row = read(statement);
    if constexpr (std::is_same_v<decltype(row), T>) {
      rows.push_back(std::move(row));
    } else {
      if (!row) return row.error();
      rows.push_back(std::move(row).value());
    }
  }
  if (rc != SQLITE_DONE) return db.error(op);
  return rows;
}

// Runs one prepared write in its own BEGIN IMMEDIATE transaction; returns the rows changed.
Result<int> write_one(DbRef db, std::string_view op, Statement& statement) {
  auto tx = Transaction::begin(db, op);
  if (!tx) {
    statement.reset();
    return tx.error();
  }
  ResetOnExit reset(statement);  // before the transaction ends, on every path
  if (auto ran = statement.run(db, op); !ran) return ran.error();
  const int changes = sqlite3_changes(db.handle);
  statement.reset();
  if (auto committed = tx->commit(); !committed) return committed.error();
  return changes;
}

// A statement from the store's cache, prepared on first use.
Result<Statement*> cached(DbRef db, std::string_view op, Statement& slot, const char* sql) {
  if (!slot.valid()) {
    auto prepared = Statement::prepare(db, op, sql, Lifetime::persistent);
    if (!prepared) return prepared.error();
    slot = std::move(prepared).value();
  }
  return &slot;
}

constexpr const char* k_insert_result_sql =
    "INSERT INTO results (job_id, kernel, source_hash, shape, dtype, fingerprint, config, "
    "config_index, status, reason, log, n, min_ms, max_ms, median_ms, mean_ms, stddev_ms, q1_ms, "
    "q3_ms, gflops, gbps, compile_ms, created_at, registers, spill_bytes, pruned, shared_bytes, "
    "remeasured, tied, samples, conditions, unlocked) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
    "?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)";

constexpr const char* k_find_winner_sql =
    "SELECT kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, config, median_ms, "
    "gflops, updated_at FROM winners "
    "WHERE kernel = ?1 AND source_hash = ?2 AND shape = ?3 AND dtype = ?4 AND fingerprint = ?5";

constexpr const char* k_upsert_winner_sql =
    "INSERT INTO winners (kernel, source_hash, shape, dtype, fingerprint, result_id, job_id, "
    "config, median_ms, gflops, updated_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
    "ON CONFLICT (kernel, source_hash, shape, dtype, fingerprint) DO UPDATE SET "
    "result_id = excluded.result_id, job_id = excluded.job_id, config = excluded.config, "
    "median_ms = excluded.median_ms, gflops = excluded.gflops, updated_at = excluded.updated_at";

constexpr const char* k_update_job_progress_sql =
    "UPDATE jobs SET done = ?2, failed = ?3 WHERE id = ?1";

} // namespace

// Statements used once per candidate or per lookup; the rest are prepared per call.
struct Store::Statements {
  Statement insert_result;
  Statement find_winner;
  Statement upsert_winner;
  Statement update_job_progress;
};

void Store::StatementsDeleter::operator()(Statements* statements) const noexcept {
  delete statements;
}

std::string_view to_string(JobState state) {
  switch (state) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::done: return "done";
    case JobState::failed: return "failed";
    case JobState::cancelled: return "cancelled";
    case JobState::interrupted: return "interrupted";
  }
  return "unknown";
}

std::optional<JobState> parse_job_state(std::string_view text) {
  for (JobState state : k_job_states) {
    if (to_string(state) == text) return state;
  }
  return std::nullopt;
}

// ---- open / close ----

static_assert(db::k_client_query_last_schema == k_schema_version &&
                  db::k_client_query_application_id == k_application_id,
              "the schema changed: check db/client_query.hpp's queries against it, then move its range");

namespace {

// The file's application id and schema version: ktune's (or, read-write, a new empty file) and
// not newer than this ktune; read-only, exactly the current schema (only ktuned migrates).
Result<void> check_identity(const DbRef& db, std::string_view op, bool read_only) {
  auto application_id = db.query_int(op, "PRAGMA application_id");
  if (!application_id) return application_id.error();
  auto version = db.query_int(op, "PRAGMA user_version");
  if (!version) return version.error();
  if (*application_id != 0 && *application_id != k_application_id) {
    return db.error(op, "application_id " + hex32(*application_id) + " is not ktune's (" +
                            hex32(k_application_id) + "): the file belongs to another program");
  }
  if (*version > k_schema_version) {
    return db.error(op, "schema version " + std::to_string(*version) + " is newer than " +
                            std::to_string(k_schema_version) +
                            ", the newest this ktune knows; use the ktune that wrote it");
  }
  if (read_only) {
    if (*application_id != k_application_id) {
      return db.error(op, "not a ktune database (application_id " + hex32(*application_id) +
                              ", expected " + hex32(k_application_id) + ")");
    }
    if (*version != k_schema_version) {
      return db.error(op, "schema version " + std::to_string(*version) + ", expected " +
                              std::to_string(k_schema_version) +
                              "; a read-only open cannot migrate (ktuned does on its start)");
    }
    return {};
  }
  if (*application_id == 0) {
    auto tables = db.query_int(op, "SELECT count(*) FROM sqlite_schema");
    if (!tables) return tables.error();
    if (*tables != 0) {
      return db.error(op, "not a ktune database: application_id is 0 and it already holds " +
                              std::to_string(*tables) + " schema objects");
    }
  }
  return {};
}

// The writer's settings, each checked to have taken (WAL, synchronous=FULL, foreign keys), then
// the migrations to the current schema.
Result<void> prepare_for_writing(const DbRef& db, std::string_view op) {
  auto journal = db.query_text(op, "PRAGMA journal_mode = WAL");
  if (!journal) return journal.error();
  if (*journal != "wal") {
    return db.error(op, "expected journal_mode 'wal', SQLite kept '" + *journal +
                            "' (WAL needs a local file system with shared memory)");
  }
  if (auto set = db.exec(op, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"); !set) {
    return set.error();
  }
  auto foreign_keys = db.query_int(op, "PRAGMA foreign_keys");
  if (!foreign_keys) return foreign_keys.error();
  if (*foreign_keys != 1) return db.error(op, "foreign_keys did not turn on");
  auto migrated = db::run_migrations(db, db::schema_migrations());
  if (!migrated) return migrated.error();
  return {};
}

} // namespace

Result<Store> Store::open(const std::string& path, OpenMode mode) {
  const bool read_only = mode == OpenMode::read_only;
  const std::string_view op = read_only ? "open (read-only)" : "open (read-write)";
  if (read_only) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return make_error(ErrorCode::db_error, std::string(op) + " on " + path +
                                        ": no database file there (ktuned creates it)");
    }
  }

  sqlite3* handle = nullptr;
  // The daemon's file is never reached through a link (ktuned opened it O_NOFOLLOW already).
  const int flags = (read_only ? SQLITE_OPEN_READONLY
                               : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW) |
                    SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  Connection connection(handle);
  const DbRef db{handle, path};
  if (rc != SQLITE_OK) return db.error(op);
  sqlite3_extended_result_codes(handle, 1);
  if (sqlite3_busy_timeout(handle, k_busy_timeout_ms) != SQLITE_OK) return db.error(op);

  // SQLite opens a file it may not write read-only without a word; every write would then fail.
  if (!read_only && sqlite3_db_readonly(handle, "main") == 1) {
    return db.error(op, "the file is read-only (its permissions, owner or file system); the "
                        "daemon must write its database");
  }
  // Identify the file before anything is changed in it.
  if (auto identified = check_identity(db, op, read_only); !identified) return identified.error();
  if (!read_only) {
    if (auto prepared = prepare_for_writing(db, op); !prepared) return prepared.error();
  }

  Store store(connection.release(), mode);
  store.m_path = path;
  store.m_schema_version = k_schema_version;
  store.m_statements.reset(new Statements{});
  return store;
}

Store::Store(Store&& other) noexcept
    : m_db(std::exchange(other.m_db, nullptr)),
      m_mode(other.m_mode),
      m_path(std::move(other.m_path)),
      m_schema_version(other.m_schema_version),
      m_statements(std::move(other.m_statements)),
      m_write_check(std::move(other.m_write_check)) {}

Store& Store::operator=(Store&& other) noexcept {
  if (this != &other) {
    close();
    m_db = std::exchange(other.m_db, nullptr);
    m_mode = other.m_mode;
    m_path = std::move(other.m_path);
    m_schema_version = other.m_schema_version;
    m_statements = std::move(other.m_statements);
    m_write_check = std::move(other.m_write_check);
  }
  return *this;
}

Store::~Store() { close(); }

void Store::close() noexcept {
  m_statements.reset();  // finalize before the connection closes
  if (m_db != nullptr) sqlite3_close_v2(std::exchange(m_db, nullptr));
}

int Store::schema_version() const { return m_schema_version; }

void Store::set_busy_timeout(std::chrono::milliseconds timeout) {
  sqlite3_busy_timeout(m_db, static_cast<int>(timeout.count()));
}

bool is_transient(const Error& error) {
  return error.code == ErrorCode::db_busy || error.code == ErrorCode::db_full || error.code == ErrorCode::db_io ||
         error.code == ErrorCode::db_gone;
}

Result<void> Store::backup_to(const std::string& path) const {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return make_error(ErrorCode::io_error, path + " exists; not overwritten");
  sqlite3* raw = nullptr;
  const mode_t before = ::umask(077);
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                                 nullptr);
  ::umask(before);
  Connection target(raw);
  const DbRef to{raw, path};
  if (rc != SQLITE_OK) return to.error("backup");
  sqlite3_backup* backup = sqlite3_backup_init(raw, "main", m_db, "main");
  if (backup == nullptr) return to.error("backup of " + m_path + " to");
  const int stepped = sqlite3_backup_step(backup, -1);
  sqlite3_backup_finish(backup);
  if (stepped != SQLITE_DONE) return to.error("backup of " + m_path + " to");
  return {};
}

Result<void> Store::verify(Verify depth) const {
  const std::string_view op = depth == Verify::full ? "integrity_check" : "quick_check";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(
      db, op, depth == Verify::full ? "PRAGMA integrity_check(5)" : "PRAGMA quick_check(5)");
  const auto corrupt = [&](const std::string& findings) {
    return make_error(ErrorCode::db_corrupt, "the database " + m_path + " is damaged (SQLite's " +
                                        std::string(op) + ": " + findings + ")");
  };
  if (!statement) return corrupt(statement.error().message);
  std::string findings;
  for (;;) {
    const int rc = statement->step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return corrupt(db.error(op).message);
    const std::string line = statement->column_text(0);
    if (line == "ok") return {};
    findings += (findings.empty() ? "" : "; ") + line;
  }
  if (findings.empty()) return {};
  return corrupt(findings);
}

Result<void> Store::require_writable(std::string_view op) const {
  if (m_mode == OpenMode::read_write) return m_write_check ? m_write_check() : Result<void>{};
  return DbRef{m_db, m_path}.error(op, "the store is open read-only (only ktuned writes)");
}

// ---- writes ----

Result<void> Store::upsert_kernel(const std::string& name, const std::string& source_hash,
                                  const std::string& spec_text) {
  constexpr std::string_view op = "upsert_kernel";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "INSERT INTO kernels (name, source_hash, spec_text, created_at) VALUES (?1, ?2, ?3, ?4) "
      "ON CONFLICT (name, source_hash) DO UPDATE SET spec_text = excluded.spec_text");
  if (!statement) return statement.error();
  statement->bind_text(1, name);
  statement->bind_text(2, source_hash);
  statement->bind_text(3, spec_text);
  statement->bind_int(4, now_ms());
  auto written = write_one(db, op, *statement);
  if (!written) return written.error();
  return {};
}

Result<void> Store::upsert_device(const DeviceInfo& device) {
  constexpr std::string_view op = "upsert_device";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "INSERT INTO devices (fingerprint, name, details, first_seen, hardware_id, environment) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
      "ON CONFLICT (fingerprint) DO UPDATE SET name = excluded.name, details = excluded.details, "
      "hardware_id = excluded.hardware_id, environment = excluded.environment");
  if (!statement) return statement.error();
  const DeviceIdentity identity = split_device_identity(device.details);
  statement->bind_text(1, device.fingerprint);
  statement->bind_text(2, device.name);
  statement->bind_text(3, device.details.is_null() ? std::string("{}") : device.details.dump());
  statement->bind_int(4, now_ms());
  statement->bind_text(5, identity.hardware_id);
  statement->bind_text(6, identity.environment.dump());
  auto written = write_one(db, op, *statement);
  if (!written) return written.error();
  return {};
}

Result<void> Store::in_transaction(const std::function<Result<void>()>& body) {
  constexpr std::string_view op = "transaction";
  if (auto writable = require_writable(op); !writable) return writable.error();
  auto tx = db::Transaction::begin(DbRef{m_db, m_path}, op);
  if (!tx) return tx.error();
  if (auto done = body(); !done) return done.error(); // rolled back by tx
  return tx->commit();
}

Result<std::int64_t> Store::create_job(const JobRecord& job) {
  constexpr std::string_view op = "create_job";
  if (auto writable = require_writable(op); !writable) return writable.error();
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "INSERT INTO jobs (kernel, source_hash, shape, dtype, device, fingerprint, strategy, budget, "
      "state, total, done, failed, error, created_at, started_at, finished_at, seed, remeasure, "
      "retry_failed, priority, compile_timeout_s, bench_timeout_s, budget_s, configs) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
      "?20, ?21, ?22, ?23, ?24)");
  if (!statement) return statement.error();
  statement->bind_text(1, job.kernel);
  statement->bind_text(2, job.source_hash);
  statement->bind_text(3, job.shape);
  statement->bind_text(4, job.dtype);
  statement->bind_text(5, job.device);
  statement->bind_text(6, job.fingerprint);
  statement->bind_text(7, job.strategy);
  statement->bind_optional_int(8, job.budget);
  statement->bind_text(9, to_string(job.state));
  statement->bind_int(10, job.total);
  statement->bind_int(11, job.done);
  statement->bind_int(12, job.failed);
  statement->bind_text(13, job.error);
  statement->bind_int(14, job.created_at != 0 ? job.created_at : now_ms());
  statement->bind_int(15, job.started_at);
  statement->bind_int(16, job.finished_at);
  statement->bind_optional_int(17, job.seed);
  statement->bind_int(18, job.options.remeasure ? 1 : 0);
  statement->bind_int(19, job.options.retry_failed ? 1 : 0);
  statement->bind_int(20, job.options.priority);
  statement->bind_optional_double(21, job.options.compile_timeout_s);
  statement->bind_optional_double(22, job.options.bench_timeout_s);
  statement->bind_optional_double(23, job.budget_s);
  if (job.configs.empty()) {
    statement->bind_null(24);
  } else {
    statement->bind_text(24, job.configs);
  }

  auto tx = Transaction::begin(db, op);
  if (!tx) return tx.error();
  if (auto ran = statement->run(db, op); !ran) return ran.error();
  const std::int64_t id = sqlite3_last_insert_rowid(m_db);
  statement->reset();
  if (auto committed = tx->commit(); !committed) return committed.error();
  return id;
}

Result<void> Store::update_job_progress(std::int64_t job_id, std::int64_t done,
                                        std::int64_t failed) {
  constexpr std::string_view op = "update_job_progress";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = cached(db, op, m_statements->update_job_progress, k_update_job_progress_sql);
  if (!statement) return statement.error();
  Statement& update = **statement;
  update.bind_int(1, job_id);
  update.bind_int(2, done);
  update.bind_int(3, failed);
  auto changed = write_one(db, op, update);
  if (!changed) return changed.error();
  if (*changed == 0) return unknown_job(db, op, job_id);
  return {};
}

Result<void> Store::set_job_state(std::int64_t job_id, JobState state, const std::string& error) {
  constexpr std::string_view op = "set_job_state";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "UPDATE jobs SET state = ?2, error = ?3, "
      "started_at = CASE WHEN ?4 AND started_at = 0 THEN ?6 ELSE started_at END, "
      "finished_at = CASE ?5 WHEN 1 THEN ?6 WHEN 0 THEN 0 ELSE finished_at END "
      "WHERE id = ?1");
  if (!statement) return statement.error();
  const bool starts = state == JobState::running;
  const bool finishes =
      state == JobState::done || state == JobState::failed || state == JobState::cancelled;
  const bool active = state == JobState::queued || state == JobState::running;
  statement->bind_int(1, job_id);
  statement->bind_text(2, to_string(state));
  // A job's error is a line for people, whatever its cause quoted (a spec, a compiler's output).
  constexpr std::size_t k_max_job_error = 4096;
  statement->bind_text(3, error.size() <= k_max_job_error
                              ? error
                              : error.substr(0, k_max_job_error) + "... (" +
                                    std::to_string(error.size()) + " bytes)");
  statement->bind_int(4, starts ? 1 : 0);
  // ?5: 1 = stamp finished_at, 0 = clear it (the job is live again), 2 = keep it.
  statement->bind_int(5, finishes ? 1 : (active ? 0 : 2));
  statement->bind_int(6, now_ms());
  auto changed = write_one(db, op, *statement);
  if (!changed) return changed.error();
  if (*changed == 0) return unknown_job(db, op, job_id);
  return {};
}

Result<std::int64_t> Store::insert_result(const ResultRecord& result) {
  constexpr std::string_view op = "insert_result";
  if (auto writable = require_writable(op); !writable) return writable.error();
  const DbRef db{m_db, m_path};
  auto statement = cached(db, op, m_statements->insert_result, k_insert_result_sql);
  if (!statement) return statement.error();
  Statement& insert = **statement;

  auto tx = Transaction::begin(db, op);
  if (!tx) return tx.error();
  ResetOnExit reset(insert);
  insert.bind_int(1, result.job_id);
  insert.bind_text(2, result.kernel);
  insert.bind_text(3, result.source_hash);
  insert.bind_text(4, result.shape);
  insert.bind_text(5, result.dtype);
  insert.bind_text(6, result.fingerprint);
  insert.bind_text(7, result.config);
  insert.bind_int(8, result.config_index);
  insert.bind_text(9, to_string(result.status));
  insert.bind_text(10, result.reason);
  insert.bind_text(11, result.log);
  insert.bind_int(12, static_cast<std::int64_t>(result.stats.n));
  insert.bind_double(13, result.stats.min_ms);
  insert.bind_double(14, result.stats.max_ms);
  insert.bind_double(15, result.stats.median_ms);
  insert.bind_double(16, result.stats.mean_ms);
  insert.bind_double(17, result.stats.stddev_ms);
  insert.bind_double(18, result.stats.q1_ms);
  insert.bind_double(19, result.stats.q3_ms);
  insert.bind_double(20, result.gflops);
  insert.bind_double(21, result.gbps);
  insert.bind_double(22, result.compile_ms);
  insert.bind_int(23, result.created_at != 0 ? result.created_at : now_ms());
  insert.bind_int(24, result.registers);
  insert.bind_int(25, result.spill_bytes);
  insert.bind_int(26, result.pruned ? 1 : 0);
  insert.bind_int(27, result.shared_bytes);
  insert.bind_int(28, result.remeasured ? 1 : 0);
  insert.bind_int(29, result.tied ? 1 : 0);
  const std::string samples = encode_samples(result.samples_ms);
  insert.bind_blob(30, samples.data(), samples.size());
  insert.bind_text(31, result.conditions);
  if (result.unlocked.empty()) {
    insert.bind_null(32);
  } else {
    insert.bind_text(32, result.unlocked);
  }

  if (auto ran = insert.run(db, op); !ran) {
    const int code = sqlite3_extended_errcode(m_db);
    if (code == SQLITE_CONSTRAINT_UNIQUE) {
      return make_error(ErrorCode::duplicate_result,
                        std::string(op) + " on " + m_path + ": job " +
                            std::to_string(result.job_id) + " already has a result for config " +
                            result.config);
    }
    if (code == SQLITE_CONSTRAINT_FOREIGNKEY) return unknown_job(db, op, result.job_id);
    return ran.error();
  }
  const std::int64_t id = sqlite3_last_insert_rowid(m_db);
  insert.reset();
  if (auto committed = tx->commit(); !committed) return committed.error();
  return id;
}

Result<void> Store::upsert_winner(const WinnerRecord& winner) {
  constexpr std::string_view op = "upsert_winner";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = cached(db, op, m_statements->upsert_winner, k_upsert_winner_sql);
  if (!statement) return statement.error();
  Statement& upsert = **statement;
  upsert.bind_text(1, winner.kernel);
  upsert.bind_text(2, winner.source_hash);
  upsert.bind_text(3, winner.shape);
  upsert.bind_text(4, winner.dtype);
  upsert.bind_text(5, winner.fingerprint);
  upsert.bind_int(6, winner.result_id);
  upsert.bind_int(7, winner.job_id);
  upsert.bind_text(8, winner.config);
  upsert.bind_double(9, winner.median_ms);
  upsert.bind_double(10, winner.gflops);
  upsert.bind_int(11, winner.updated_at != 0 ? winner.updated_at : now_ms());
  auto written = write_one(db, op, upsert);
  if (!written) return written.error();
  return {};
}

Result<void> Store::update_measurement(std::int64_t result_id, const Remeasurement& m) {
  constexpr std::string_view op = "update_measurement";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "UPDATE results SET n = ?2, min_ms = ?3, max_ms = ?4, median_ms = ?5, mean_ms = ?6, "
      "stddev_ms = ?7, q1_ms = ?8, q3_ms = ?9, gflops = ?10, gbps = ?11, remeasured = 1, "
      "pruned = 0, samples = ?12, unlocked = ?13 WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, result_id);
  statement->bind_int(2, static_cast<std::int64_t>(m.stats.n));
  statement->bind_double(3, m.stats.min_ms);
  statement->bind_double(4, m.stats.max_ms);
  statement->bind_double(5, m.stats.median_ms);
  statement->bind_double(6, m.stats.mean_ms);
  statement->bind_double(7, m.stats.stddev_ms);
  statement->bind_double(8, m.stats.q1_ms);
  statement->bind_double(9, m.stats.q3_ms);
  statement->bind_double(10, m.gflops);
  statement->bind_double(11, m.gbps);
  const std::string samples = encode_samples(m.samples_ms);
  statement->bind_blob(12, samples.data(), samples.size());
  if (m.unlocked.empty()) {
    statement->bind_null(13);
  } else {
    statement->bind_text(13, m.unlocked);
  }
  auto changed = write_one(db, op, *statement);
  if (!changed) return changed.error();
  if (*changed == 0) {
    return make_error(ErrorCode::unknown_result, std::string(op) + " on " + m_path +
                                            ": no result with id " + std::to_string(result_id));
  }
  return {};
}

Result<void> Store::mark_ties(std::int64_t job_id, const std::vector<std::int64_t>& result_ids) {
  constexpr std::string_view op = "mark_ties";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto clear = Statement::prepare(db, op, "UPDATE results SET tied = 0 WHERE job_id = ?1");
  if (!clear) return clear.error();
  auto set = Statement::prepare(db, op, "UPDATE results SET tied = 1 WHERE job_id = ?1 AND id = ?2");
  if (!set) return set.error();
  auto tx = Transaction::begin(db, op);
  if (!tx) return tx.error();
  clear->bind_int(1, job_id);
  if (auto ran = clear->run(db, op); !ran) return ran.error();
  for (const std::int64_t id : result_ids) {
    set->reset();
    set->bind_int(1, job_id);
    set->bind_int(2, id);
    if (auto ran = set->run(db, op); !ran) return ran.error();
  }
  set->reset();
  return tx->commit();
}

Result<void> Store::set_job_timing(std::int64_t job_id, const JobTiming& timing) {
  constexpr std::string_view op = "set_job_timing";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "UPDATE jobs SET queue_ms = ?2, compile_ms = ?3, bench_ms = ?4, overhead_ms = ?5, "
      "compile_sum_ms = ?6, bench_sum_ms = ?7, compiles = ?8 WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, job_id);
  statement->bind_double(2, timing.queue_ms);
  statement->bind_double(3, timing.compile_ms);
  statement->bind_double(4, timing.bench_ms);
  statement->bind_double(5, timing.overhead_ms);
  statement->bind_double(6, timing.compile_sum_ms);
  statement->bind_double(7, timing.bench_sum_ms);
  statement->bind_int(8, timing.compiles);
  auto changed = write_one(db, op, *statement);
  if (!changed) return changed.error();
  if (*changed == 0) return unknown_job(db, op, job_id);
  return {};
}

Result<void> Store::set_job_search(std::int64_t job_id, const JobSearch& search) {
  constexpr std::string_view op = "set_job_search";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op, "UPDATE jobs SET best_at = ?2, prior = ?3 WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, job_id);
  statement->bind_int(2, search.best_at);
  if (search.prior.empty()) {
    statement->bind_null(3);
  } else {
    statement->bind_text(3, search.prior);
  }
  auto changed = write_one(db, op, *statement);
  if (!changed) return changed.error();
  if (*changed == 0) return unknown_job(db, op, job_id);
  return {};
}

Result<void> Store::set_job_winner(std::int64_t job_id, std::int64_t result_id) {
  constexpr std::string_view op = "set_job_winner";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op, "UPDATE jobs SET winner_result = ?2 WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, job_id);
  statement->bind_int(2, result_id);
  auto changed = write_one(db, op, *statement);
  if (!changed) return changed.error();
  if (*changed == 0) return unknown_job(db, op, job_id);
  return {};
}

Result<void> Store::checkpoint() {
  constexpr std::string_view op = "checkpoint";
  if (auto writable = require_writable(op); !writable) return writable;
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op, "PRAGMA wal_checkpoint(TRUNCATE)");
  if (!statement) return statement.error();
  const int rc = statement->step();
  if (rc != SQLITE_ROW) return db.error(op);
  // Columns: busy (1 when a reader or writer kept it from completing), WAL frames, frames copied.
  if (statement->column_int(0) != 0) {
    return db.error(op, "incomplete: another connection is using the WAL (" +
                            std::to_string(statement->column_int(2)) + " of " +
                            std::to_string(statement->column_int(1)) + " frames copied)");
  }
  return {};
}

// ---- reads ----

Result<std::optional<JobRecord>> Store::get_job(std::int64_t job_id) const {
  constexpr std::string_view op = "get_job";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(
      db, op, std::string("SELECT ") + k_job_columns + " FROM jobs WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, job_id);
  const int rc = statement->step();
  if (rc == SQLITE_DONE) return std::optional<JobRecord>{};
  if (rc != SQLITE_ROW) return db.error(op);
  auto job = read_job(db, op, *statement);
  if (!job) return job.error();
  return std::optional<JobRecord>(std::move(job).value());
}

Result<std::vector<JobRecord>> Store::list_jobs(std::int64_t limit) const {
  constexpr std::string_view op = "list_jobs";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(
      db, op, std::string("SELECT ") + k_job_columns + " FROM jobs ORDER BY id DESC LIMIT ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, limit > 0 ? limit : -1);  // SQLite: a negative LIMIT means none
  return collect<JobRecord>(db, op, *statement,
                            [&](const Statement& row) { return read_job(db, op, row); });
}

Result<std::vector<JobRecord>> Store::jobs_in_state(JobState state) const {
  constexpr std::string_view op = "jobs_in_state";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(
      db, op, std::string("SELECT ") + k_job_columns + " FROM jobs WHERE state = ?1 ORDER BY id");
  if (!statement) return statement.error();
  statement->bind_text(1, to_string(state));
  return collect<JobRecord>(db, op, *statement,
                            [&](const Statement& row) { return read_job(db, op, row); });
}

Result<std::vector<JobRecord>> Store::jobs_for_key(const std::string& kernel,
    const std::string& shape, const std::string& dtype, const std::string& fingerprint,
    JobState state) const {
  constexpr std::string_view op = "jobs_for_key";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_job_columns +
          " FROM jobs WHERE kernel = ?1 AND shape = ?2 AND dtype = ?3 AND fingerprint = ?4 "
          "AND state = ?5 ORDER BY finished_at, id");
  if (!statement) return statement.error();
  statement->bind_text(1, kernel);
  statement->bind_text(2, shape);
  statement->bind_text(3, dtype);
  statement->bind_text(4, fingerprint);
  statement->bind_text(5, to_string(state));
  return collect<JobRecord>(db, op, *statement,
                            [&](const Statement& row) { return read_job(db, op, row); });
}

Result<std::vector<ResultRecord>> Store::job_results(std::int64_t job_id) const {
  constexpr std::string_view op = "job_results";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_result_columns +
          " FROM results WHERE job_id = ?1 ORDER BY config_index, id");
  if (!statement) return statement.error();
  statement->bind_int(1, job_id);
  return collect<ResultRecord>(db, op, *statement,
                               [&](const Statement& row) { return read_result(db, op, row); });
}

Result<std::optional<ResultRecord>> Store::get_result(std::int64_t result_id) const {
  constexpr std::string_view op = "get_result";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_result_columns + " FROM results WHERE id = ?1");
  if (!statement) return statement.error();
  statement->bind_int(1, result_id);
  auto rows = collect<ResultRecord>(db, op, *statement,
                                    [&](const Statement& row) { return read_result(db, op, row); });
  if (!rows) return rows.error();
  if (rows->empty()) return std::optional<ResultRecord>();
  return std::optional<ResultRecord>(std::move(rows->front()));
}

Result<std::vector<ResultRecord>> Store::results_for_key(const std::string& kernel,
    const std::string& source_hash, const std::string& shape, const std::string& dtype,
    const std::string& fingerprint) const {
  constexpr std::string_view op = "results_for_key";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_result_columns +
          " FROM results WHERE kernel = ?1 AND source_hash = ?2 AND shape = ?3 AND dtype = ?4 "
          "AND fingerprint = ?5 ORDER BY id");
  if (!statement) return statement.error();
  statement->bind_text(1, kernel);
  statement->bind_text(2, source_hash);
  statement->bind_text(3, shape);
  statement->bind_text(4, dtype);
  statement->bind_text(5, fingerprint);
  return collect<ResultRecord>(db, op, *statement,
                               [&](const Statement& row) { return read_result(db, op, row); });
}

Result<std::vector<ResultRecord>> Store::results_for_kernel(const std::string& kernel,
    const std::string& source_hash, std::int64_t limit) const {
  constexpr std::string_view op = "results_for_kernel";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_result_columns +
          " FROM results WHERE kernel = ?1 AND source_hash = ?2 ORDER BY id DESC LIMIT ?3");
  if (!statement) return statement.error();
  statement->bind_text(1, kernel);
  statement->bind_text(2, source_hash);
  statement->bind_int(3, limit);
  return collect<ResultRecord>(db, op, *statement,
                               [&](const Statement& row) { return read_result(db, op, row); });
}

Result<std::set<std::string>> Store::quarantined_configs(const std::string& kernel,
    const std::string& source_hash, const std::string& fingerprint,
    std::int64_t except_job) const {
  constexpr std::string_view op = "quarantined_configs";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT DISTINCT r.config FROM results r LEFT JOIN jobs j ON j.id = r.job_id "
      "WHERE r.kernel = ?1 AND r.source_hash = ?2 AND r.fingerprint = ?3 AND r.job_id != ?4 AND "
      "(r.status IN ('crash', 'worker_lost') OR "
      "(r.status = 'timeout' AND j.bench_timeout_s IS NULL) OR "
      "(r.status = 'compile_timeout' AND j.compile_timeout_s IS NULL))");
  if (!statement) return statement.error();
  statement->bind_text(1, kernel);
  statement->bind_text(2, source_hash);
  statement->bind_text(3, fingerprint);
  statement->bind_int(4, except_job);
  auto rows = collect<std::string>(db, op, *statement,
                                   [](const Statement& row) { return row.column_text(0); });
  if (!rows) return rows.error();
  return std::set<std::string>(rows->begin(), rows->end());
}

Result<std::optional<WinnerRecord>> Store::find_winner(const std::string& kernel,
    const std::string& source_hash, const std::string& shape, const std::string& dtype,
    const std::string& fingerprint) const {
  constexpr std::string_view op = "find_winner";
  const DbRef db{m_db, m_path};
  auto statement = cached(db, op, m_statements->find_winner, k_find_winner_sql);
  if (!statement) return statement.error();
  Statement& find = **statement;
  ResetOnExit reset(find);
  find.bind_text(1, kernel);
  find.bind_text(2, source_hash);
  find.bind_text(3, shape);
  find.bind_text(4, dtype);
  find.bind_text(5, fingerprint);
  const int rc = find.step();
  if (rc == SQLITE_DONE) return std::optional<WinnerRecord>{};
  if (rc != SQLITE_ROW) return db.error(op);
  return std::optional<WinnerRecord>(read_winner(find));
}

Result<std::vector<WinnerRecord>> Store::all_winners() const {
  constexpr std::string_view op = "all_winners";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      std::string("SELECT ") + k_winner_columns +
          " FROM winners ORDER BY kernel, shape, dtype, fingerprint, source_hash");
  if (!statement) return statement.error();
  return collect<WinnerRecord>(db, op, *statement, read_winner);
}

Result<std::optional<std::string>> Store::kernel_spec(const std::string& name,
                                                      const std::string& source_hash) const {
  constexpr std::string_view op = "kernel_spec";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT spec_text FROM kernels WHERE name = ?1 AND source_hash = ?2");
  if (!statement) return statement.error();
  statement->bind_text(1, name);
  statement->bind_text(2, source_hash);
  const int rc = statement->step();
  if (rc == SQLITE_DONE) return std::optional<std::string>{};
  if (rc != SQLITE_ROW) return db.error(op);
  return std::optional<std::string>(statement->column_text(0));
}

Result<std::int64_t> Store::insert_canary_reading(const CanaryReading& reading) {
  constexpr std::string_view op = "insert_canary_reading";
  if (auto writable = require_writable(op); !writable) return writable.error();
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "INSERT INTO canary_readings (fingerprint, device, taken_at, compute_ms, memory_ms, context) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!statement) return statement.error();
  statement->bind_text(1, reading.fingerprint);
  statement->bind_text(2, reading.device);
  statement->bind_int(3, reading.taken_at != 0 ? reading.taken_at : now_ms());
  statement->bind_double(4, reading.compute_ms);
  statement->bind_double(5, reading.memory_ms);
  statement->bind_text(6, reading.context);
  auto written = write_one(db, op, *statement);
  if (!written) return written.error();
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(m_db));
}

Result<std::vector<CanaryReading>> Store::canary_readings(const std::string& fingerprint,
                                                         std::int64_t from_ms,
                                                         std::int64_t to_ms) const {
  constexpr std::string_view op = "canary_readings";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT id, fingerprint, device, taken_at, compute_ms, memory_ms, context "
      "FROM canary_readings WHERE fingerprint = ?1 AND taken_at BETWEEN ?2 AND ?3 "
      "ORDER BY taken_at, id");
  if (!statement) return statement.error();
  statement->bind_text(1, fingerprint);
  statement->bind_int(2, from_ms);
  statement->bind_int(3, to_ms);
  std::vector<CanaryReading> out;
  for (;;) {
    const int rc = statement->step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db.error(op);
    CanaryReading r;
    r.id = statement->column_int(0);
    r.fingerprint = statement->column_text(1);
    r.device = statement->column_text(2);
    r.taken_at = statement->column_int(3);
    r.compute_ms = statement->column_double(4);
    r.memory_ms = statement->column_double(5);
    r.context = statement->column_text(6);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::optional<DeviceInfo>> Store::get_device(const std::string& fingerprint) const {
  constexpr std::string_view op = "get_device";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT fingerprint, name, details FROM devices WHERE fingerprint = ?1");
  if (!statement) return statement.error();
  statement->bind_text(1, fingerprint);
  const int rc = statement->step();
  if (rc == SQLITE_DONE) return std::optional<DeviceInfo>{};
  if (rc != SQLITE_ROW) return db.error(op);
  DeviceInfo device;
  device.fingerprint = statement->column_text(0);
  device.name = statement->column_text(1);
  device.details = nlohmann::json::parse(statement->column_text(2), nullptr, false);
  if (device.details.is_discarded()) {
    return db.error(op, "devices.details of " + fingerprint + " is not valid JSON");
  }
  return std::optional<DeviceInfo>(std::move(device));
}

Result<std::vector<DeviceInfo>> Store::list_devices() const {
  constexpr std::string_view op = "list_devices";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT fingerprint, name, details FROM devices ORDER BY fingerprint");
  if (!statement) return statement.error();
  std::vector<DeviceInfo> out;
  for (;;) {
    const int rc = statement->step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db.error(op);
    DeviceInfo device;
    device.fingerprint = statement->column_text(0);
    device.name = statement->column_text(1);
    device.details = nlohmann::json::parse(statement->column_text(2), nullptr, false);
    if (device.details.is_discarded()) device.details = nlohmann::json::object();
    out.push_back(std::move(device));
  }
  return out;
}

Result<std::vector<DeviceEnvironment>> Store::same_hardware(const std::string& fingerprint) const {
  constexpr std::string_view op = "same_hardware";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT d.fingerprint, d.name, d.hardware_id, d.environment, d.first_seen FROM devices d "
      "WHERE d.hardware_id <> '' AND d.hardware_id = "
      "(SELECT hardware_id FROM devices WHERE fingerprint = ?1) "
      "ORDER BY d.first_seen DESC, d.fingerprint");
  if (!statement) return statement.error();
  statement->bind_text(1, fingerprint);
  return collect<DeviceEnvironment>(db, op, *statement, [](const Statement& row) {
    DeviceEnvironment device;
    device.fingerprint = row.column_text(0);
    device.name = row.column_text(1);
    device.hardware_id = row.column_text(2);
    device.environment = nlohmann::json::parse(row.column_text(3), nullptr, false);
    if (device.environment.is_discarded()) device.environment = nlohmann::json::object();
    device.first_seen = row.column_int(4);
    return device;
  });
}

Result<std::vector<StaleWinner>> Store::stale_winners(const std::string& kernel,
    const std::string& source_hash, const std::string& shape, const std::string& dtype,
    const std::string& fingerprint) const {
  constexpr std::string_view op = "stale_winners";
  const DbRef db{m_db, m_path};
  auto statement = Statement::prepare(db, op,
      "SELECT w.kernel, w.source_hash, w.shape, w.dtype, w.fingerprint, w.result_id, w.job_id, "
      "w.config, w.median_ms, w.gflops, w.updated_at, d.environment "
      "FROM winners w JOIN devices d ON d.fingerprint = w.fingerprint "
      "WHERE w.kernel = ?1 AND w.shape = ?3 AND w.dtype = ?4 AND d.hardware_id <> '' "
      "AND d.hardware_id = (SELECT hardware_id FROM devices WHERE fingerprint = ?5) "
      "AND NOT (w.fingerprint = ?5 AND w.source_hash = ?2) "
      "ORDER BY w.updated_at DESC, w.fingerprint, w.source_hash");
  if (!statement) return statement.error();
  statement->bind_text(1, kernel);
  statement->bind_text(2, source_hash);
  statement->bind_text(3, shape);
  statement->bind_text(4, dtype);
  statement->bind_text(5, fingerprint);
  return collect<StaleWinner>(db, op, *statement, [](const Statement& row) {
    StaleWinner stale;
    stale.winner = read_winner(row);
    stale.environment = nlohmann::json::parse(row.column_text(11), nullptr, false);
    if (stale.environment.is_discarded()) stale.environment = nlohmann::json::object();
    return stale;
  });
}

} // namespace ktune
