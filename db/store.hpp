#pragma once
// Store: ktune's SQLite database (DESIGN.md § Store), schema v1.
//
// Exactly one read-write connection exists per database: the daemon's. Every other process opens
// read-only (SQLite 3.40's WAL-reset bug). A read-write open sets WAL (and checks that it took),
// synchronous=FULL, foreign_keys=ON, busy_timeout, the application id, and runs the migrations in
// one transaction. Every write is its own BEGIN IMMEDIATE transaction, so each candidate result
// is durable when insert_result returns.
//
// Thread safety: a Store may be used from one thread at a time. Move-only.
#include "core/device.hpp"
#include "core/result.hpp"
#include "core/stats.hpp"
#include "core/status.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;

namespace ktune {

enum class OpenMode { read_write, read_only };
enum class JobState { queued, running, done, failed, cancelled, interrupted };

[[nodiscard]] std::string_view to_string(JobState state);
[[nodiscard]] std::optional<JobState> parse_job_state(std::string_view text);

inline constexpr int k_schema_version = 11;
inline constexpr std::int32_t k_application_id = 0x6b74756e; // "ktun"

// Where a job's wall time went (ms). While it ran, every moment counts once: bench (the bench
// worker measured), else compile (a compile was in flight, the bench worker waited), else
// overhead (neither). queue is the wait before it started. The sums are the total compile and
// bench request times (compiles overlap each other; the pipeline bound is
// max(compile_sum / compile workers, bench_sum)); compiles counts candidates actually compiled
// (not cache hits).
struct JobTiming {
  double queue_ms = 0, compile_ms = 0, bench_ms = 0, overhead_ms = 0;
  double compile_sum_ms = 0, bench_sum_ms = 0;
  std::int64_t compiles = 0;
};

// What the tune request asked beyond the search itself; stored with the job so that a resumed job
// runs as it was asked to.
struct JobOptions {
  bool remeasure = false;    // measure configs that already have a result instead of copying rows
  bool retry_failed = false; // run configs quarantined by earlier jobs again
  int priority = 0;          // a queued job of higher priority starts first (sweeps: < 0)
  std::optional<double> compile_timeout_s; // per-job overrides of the daemon's [limits]
  std::optional<double> bench_timeout_s;
};

// What the job's search learnt from and how it went: `best_at` is the `done` count at which its
// best result came (0: none yet); `prior` is the JSON object of the prior it was given (the
// `tune` reply's, plus `trusted` and `favourite_rank`), empty without one. Set when the job ends.
struct JobSearch {
  std::int64_t best_at = 0;
  std::string prior;
};

struct JobRecord {
  std::int64_t id = 0;             // assigned by create_job
  std::string kernel, source_hash, shape, dtype, device, fingerprint;
  std::string strategy = "exhaustive";
  std::optional<std::int64_t> budget;
  std::optional<double> budget_s;  // a time budget: no new candidate once the job ran this long
  JobState state = JobState::queued;
  std::int64_t total = 0, done = 0, failed = 0;
  std::string error;               // why the job failed, if it did
  std::int64_t created_at = 0, started_at = 0, finished_at = 0; // unix ms, 0 = not yet
  std::optional<std::int64_t> seed;// the strategy's seed
  JobTiming timing;                // set by set_job_timing
  JobOptions options;              // set by create_job
  JobSearch search;                // set by set_job_search
  // The result the job named its winner when it ended done (set_job_winner; schema v10): what
  // db/job_winner.hpp's job_winner() returns. nullopt before then, and for older jobs.
  std::optional<std::int64_t> winner_result;
};

struct ResultRecord {
  std::int64_t id = 0;             // assigned by insert_result
  std::int64_t job_id = 0;
  std::string kernel, source_hash, shape, dtype, fingerprint;
  std::string config;              // canonical JSON object {"BM":64,...} in params order
  std::int64_t config_index = 0;   // position in the job's candidate list
  CandidateStatus status = CandidateStatus::ok;
  std::string reason;              // one line
  std::string log;                 // compiler/worker log excerpt
  SampleStats stats;
  // The raw samples of the measurement, in the order taken (results.samples: little-endian
  // float32, NULL when none were kept: failed candidates, rows from before schema v6, imports).
  std::vector<float> samples_ms;
  double gflops = 0, gbps = 0, compile_ms = 0;
  std::int64_t created_at = 0;     // unix ms; set by insert_result when 0
  int registers = -1;              // per thread (CUDA), -1 = unknown
  int spill_bytes = -1;            // spill stores + loads (CUDA), -1 = unknown
  int shared_bytes = -1;           // static shared memory per block (CUDA), -1 = unknown
  bool pruned = false;             // ok, but sampling stopped early: clearly slower than the best
  bool remeasured = false;         // measured a second time as a near-tie of the best
  bool tied = false;               // a declared tie of its job's winner (the winner included)
  // The conditions of the measurement (BenchOutcome::conditions) as a JSON object's text; empty
  // when none were recorded (CPU results, rows from before schema v9, imports).
  std::string conditions;
  // Why the measurement ran without its device's machine-wide lock (BenchOutcome::unlocked;
  // results.unlocked, schema v10); "" when it held it, or the row was not measured.
  std::string unlocked;
};

// A result measured again: the statistics and the samples they are computed from, the rates,
// and why it ran without its device lock ("" when it held it).
struct Remeasurement {
  SampleStats stats;
  std::vector<float> samples_ms;
  double gflops = 0, gbps = 0;
  std::string unlocked;
};

struct WinnerRecord {
  std::string kernel, source_hash, shape, dtype, fingerprint;
  std::int64_t result_id = 0, job_id = 0;
  std::string config;              // canonical JSON object
  double median_ms = 0, gflops = 0;
  std::int64_t updated_at = 0;     // unix ms; set by upsert_winner when 0
};

// One reading of the speed canary on a device (daemon/canary.hpp; schema v11): the medians of its
// compute-bound and memory-bound reference kernels, and why it was taken ("sweep start",
// "periodic", ...).
struct CanaryReading {
  std::int64_t id = 0;             // assigned by insert_canary_reading
  std::string fingerprint, device;
  std::int64_t taken_at = 0;       // unix ms; set by insert_canary_reading when 0
  double compute_ms = 0, memory_ms = 0;
  std::string context;
};

// Whether a store error passes by itself: the database is locked by another process ("db_busy"),
// the disk is full ("db_full") or failing ("db_io"), or its file is no longer at its path
// ("db_gone": deleted or replaced; writes wait until it is back). A writer waits these out; other
// errors are final.
[[nodiscard]] bool is_transient(const Error& error);

class Store {
public:
  // Errors: code "db_error" naming the path and SQLite's message; a file that is not a ktune DB
  // (other application id) or has a newer schema is refused.
  // read_write creates the file if missing and migrates it to k_schema_version. read_only needs an
  // existing ktune DB at exactly k_schema_version (it cannot migrate) and never writes.
  [[nodiscard]] static Result<Store> open(const std::string& path, OpenMode mode);

  Store(Store&& other) noexcept;
  Store& operator=(Store&& other) noexcept;
  ~Store();

  [[nodiscard]] int schema_version() const;
  // How long a statement waits for another connection's lock before failing with "db_busy"
  // (5 s from open; ktuned sets 0 once started: its event loop never waits on a lock).
  void set_busy_timeout(std::chrono::milliseconds timeout);
  [[nodiscard]] OpenMode mode() const { return m_mode; }
  [[nodiscard]] const std::string& path() const { return m_path; }
  // Called before every write (read_write only): an error stops the write and is returned in its
  // place (ktuned checks that the path still names the file it opened: daemon/database_file.hpp).
  void set_write_check(std::function<Result<void>()> check) { m_write_check = std::move(check); }

  // Whether the file is sound: quick: PRAGMA quick_check (every page read once); full: PRAGMA
  // integrity_check (also every index against its table). Ok, else "db_corrupt" naming the
  // file and SQLite's first findings (at most 5).
  enum class Verify { quick, full };
  [[nodiscard]] Result<void> verify(Verify depth) const;

  // Writes (read_write only; on a read-only store they return "db_error").
  // upsert_kernel/upsert_device keep the first created_at/first_seen and replace the rest.
  // update_job_progress/set_job_state on a job id that does not exist return "unknown_job".
  // set_job_state records any state the caller decides (it does not police transitions), replaces
  // `error` with the given text (clipped to 4 KiB), sets started_at on the first move to running, sets finished_at
  // on a move to done, failed or cancelled and clears it on a move to queued or running.
  [[nodiscard]] Result<void> upsert_kernel(const std::string& name, const std::string& source_hash,
                                           const std::string& spec_text);
  [[nodiscard]] Result<void> upsert_device(const DeviceInfo& device);
  // Runs `body` in one transaction (BEGIN IMMEDIATE; the writes of the Store calls inside it
  // become durable together, with one commit): committed when `body` succeeds, rolled back when
  // it fails or the commit fails. Returns body's error, or db_error.
  [[nodiscard]] Result<void> in_transaction(const std::function<Result<void>()>& body);

  [[nodiscard]] Result<std::int64_t> create_job(const JobRecord& job);
  [[nodiscard]] Result<void> update_job_progress(std::int64_t job_id, std::int64_t done,
                                                 std::int64_t failed);
  [[nodiscard]] Result<void> set_job_state(std::int64_t job_id, JobState state,
                                           const std::string& error = {});
  // (job_id, config) is unique: inserting the same config twice for a job is an error
  // ("duplicate_result"); a job_id that does not exist is "unknown_job".
  [[nodiscard]] Result<std::int64_t> insert_result(const ResultRecord& result);
  [[nodiscard]] Result<void> upsert_winner(const WinnerRecord& winner);
  // Replaces a result's measurement with a second one (the finals') and sets remeasured.
  // Errors: "unknown_result" for an id that does not exist.
  [[nodiscard]] Result<void> update_measurement(std::int64_t result_id, const Remeasurement& m);
  // Sets tied on exactly the given results of the job (clearing it on the others).
  [[nodiscard]] Result<void> mark_ties(std::int64_t job_id, const std::vector<std::int64_t>& result_ids);
  [[nodiscard]] Result<void> set_job_timing(std::int64_t job_id, const JobTiming& timing);
  [[nodiscard]] Result<void> set_job_search(std::int64_t job_id, const JobSearch& search);
  // Stores a canary reading; returns its id.
  [[nodiscard]] Result<std::int64_t> insert_canary_reading(const CanaryReading& reading);
  // Records the result the job named its winner (one of its own rows). Errors: "unknown_job".
  [[nodiscard]] Result<void> set_job_winner(std::int64_t job_id, std::int64_t result_id);

  // Reads. A miss is an empty optional, not an error.
  [[nodiscard]] Result<std::optional<JobRecord>> get_job(std::int64_t job_id) const;
  [[nodiscard]] Result<std::vector<JobRecord>> list_jobs(std::int64_t limit) const; // newest first
  [[nodiscard]] Result<std::vector<JobRecord>> jobs_in_state(JobState state) const;
  // The jobs of (kernel, shape, dtype, device fingerprint), every source hash, in `state`, oldest
  // first (by finished_at, then id): a key's history run by run.
  [[nodiscard]] Result<std::vector<JobRecord>> jobs_for_key(const std::string& kernel,
      const std::string& shape, const std::string& dtype, const std::string& fingerprint,
      JobState state) const;
  [[nodiscard]] Result<std::vector<ResultRecord>> job_results(std::int64_t job_id) const; // by config_index
  [[nodiscard]] Result<std::optional<ResultRecord>> get_result(std::int64_t result_id) const;
  [[nodiscard]] Result<std::optional<WinnerRecord>> find_winner(const std::string& kernel,
      const std::string& source_hash, const std::string& shape, const std::string& dtype,
      const std::string& fingerprint) const;
  [[nodiscard]] Result<std::vector<WinnerRecord>> all_winners() const; // by kernel, shape, dtype, fingerprint

  // The spec text stored for (name, source_hash); a miss is an empty optional.
  [[nodiscard]] Result<std::optional<std::string>> kernel_spec(const std::string& name,
                                                               const std::string& source_hash) const;
  // The canary readings of a device taken in [from_ms, to_ms], oldest first.
  [[nodiscard]] Result<std::vector<CanaryReading>> canary_readings(const std::string& fingerprint,
                                                                   std::int64_t from_ms,
                                                                   std::int64_t to_ms) const;
  // The device stored under `fingerprint`; a miss is an empty optional.
  [[nodiscard]] Result<std::optional<DeviceInfo>> get_device(const std::string& fingerprint) const;
  // Every stored device (tuned here or imported), in fingerprint order.
  [[nodiscard]] Result<std::vector<DeviceInfo>> list_devices() const;
  // Every result measured for a winner key, across jobs, oldest first (e.g. to skip configs that
  // already crashed a worker for this key).
  [[nodiscard]] Result<std::vector<ResultRecord>> results_for_key(const std::string& kernel,
      const std::string& source_hash, const std::string& shape, const std::string& dtype,
      const std::string& fingerprint) const;

  // The newest `limit` results of a kernel source, every shape, dtype and device (imported rows
  // included), newest first: what a new search of the kernel may learn from.
  [[nodiscard]] Result<std::vector<ResultRecord>> results_for_kernel(const std::string& kernel,
      const std::string& source_hash, std::int64_t limit) const;

  // Configs (canonical JSON text) whose result for this kernel source and device fingerprint has
  // status crash, timeout, compile_timeout or worker_lost in any job but `except_job` (0 = none):
  // the quarantine a new job skips unless it asks to retry them. A timeout (compile_timeout) of a
  // job that set its own bench (compile) deadline is that job's alone and quarantines nothing:
  // no client's deadline decides for the others.
  [[nodiscard]] Result<std::set<std::string>> quarantined_configs(const std::string& kernel,
      const std::string& source_hash, const std::string& fingerprint,
      std::int64_t except_job = 0) const;

  // Copies the database as this connection sees it (SQLite's online backup: the file and its
  // WAL) to a new file `path`, also when the file itself was deleted meanwhile (ktuned's rescue).
  // Errors: io_error (the path exists), db_error naming both files.
  [[nodiscard]] Result<void> backup_to(const std::string& path) const;

  // Checkpoints the WAL into the main file and truncates it (used at shutdown). A reader that
  // keeps the checkpoint from completing makes it a "db_error"; nothing is lost then.
  [[nodiscard]] Result<void> checkpoint();

private:
  Store(sqlite3* db, OpenMode mode) : m_db(db), m_mode(mode) {}

  // Prepared statements kept for the hot paths (defined in store.cpp).
  struct Statements;
  struct StatementsDeleter {
    void operator()(Statements* statements) const noexcept;
  };

  // "db_error" for operation `op` when the store is read-only.
  [[nodiscard]] Result<void> require_writable(std::string_view op) const;
  void close() noexcept;

  sqlite3* m_db = nullptr;
  OpenMode m_mode = OpenMode::read_only;
  std::string m_path;
  int m_schema_version = 0;
  std::unique_ptr<Statements, StatementsDeleter> m_statements;
  std::function<Result<void>()> m_write_check;
};

} // namespace ktune
