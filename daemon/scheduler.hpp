#pragma once
// Scheduler: runs tune jobs one at a time, in the order they were queued, as a pipeline of
// worker requests driven by their replies (no thread of its own; everything on the io thread).
//
// For one job: the reference config (the spec's [default]) is compiled first; its artifact is
// what every candidate's output is checked against. Then up to `compile_workers` candidates
// compile at once, and compiled candidates wait for the single bench worker, which measures one
// at a time. Every candidate ends with exactly one results row, inserted the moment its outcome
// is known; the job's progress is updated with it and watchers are told. At the end the `ok`
// result with the lowest median (ties: lower config index) becomes the winner.
//
// A worker that dies mid-request yields a `crash` (signal) or `worker_lost` row and is replaced
// on the next request; one that passes its deadline (compile: `compile_timeout`; bench: derived
// from the measurement settings, clamped; a job may override both) is killed with its process
// group and yields `compile_timeout` or `timeout`. A failed row carries the worker's stderr tail
// as its log. The job fails when the reference does not compile, a worker cannot be started, the
// store refuses a write, or no candidate succeeds.
//
// Resume: a plan may carry the rows its job already has (`existing`); those configs are not run
// again and count towards progress and the winner. Quarantine: configs that crashed, hung or lost
// their worker in earlier jobs of the same kernel source and device (drop_quarantined).
#include "bench/runner.hpp"
#include "compiler/kernel_registry.hpp"
#include "db/store.hpp"
#include "daemon/worker_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ktune::daemon {

struct SchedulerSettings {
  std::string cache_dir;          // compile cache shared by every job
  MeasureSettings measure;
  double compile_timeout_s = 120;
  double bench_timeout_s = 0;     // 0 = derived from `measure` (bench_deadline)
  double bench_timeout_min_s = 10;
  double bench_timeout_max_s = 600;
};

// The bench deadline of one candidate: `override_s` when > 0, else settings.bench_timeout_s when
// > 0, else the estimate 2 * (warmup + max_time_s) + 1 s (the timed samples, the untimed check
// run and the cache flushes all fit in it), clamped to [bench_timeout_min_s, bench_timeout_max_s].
[[nodiscard]] std::chrono::milliseconds bench_deadline(const SchedulerSettings& settings,
                                                       std::optional<double> override_s = {});

// Statuses that quarantine a config: it crashed, hung or lost its worker.
[[nodiscard]] bool quarantines(CandidateStatus status);

// Removes from `configs` those that quarantine (see quarantines()) in an earlier job of the same
// kernel, source hash and device fingerprint, other than job `except_job`. Returns how many were
// removed. Errors: db_error.
[[nodiscard]] Result<std::size_t> drop_quarantined(const Store& store, const std::string& kernel,
                                                   const std::string& source_hash,
                                                   const std::string& fingerprint,
                                                   std::vector<Config>& configs,
                                                   std::int64_t except_job = 0);

// A validated tune request, ready to run.
struct JobPlan {
  JobRecord record;               // as stored by create_job: id set, state queued
  LoadedKernel kernel;
  Shape shape;                    // conformed to the kernel's dims
  std::vector<Config> configs;    // the candidates; a candidate's config_index is its position
  std::vector<ResultRecord> existing; // rows the job already has (resume): not run again
  std::optional<double> compile_timeout_s; // per-job overrides of the settings
  std::optional<double> bench_timeout_s;
};

// Told about one job. Both callbacks run on the io thread.
struct JobWatcher {
  // {"job","done","total","failed","best_config","best_median_ms","best_gflops","last"}
  std::function<void(const nlohmann::json& progress)> on_progress;
  // The job reached done, failed or interrupted; its row in the store is final.
  std::function<void(std::int64_t job_id)> on_finished;
};

class Scheduler {
public:
  Scheduler(asio::io_context& io, Store& store, WorkerPool& workers, SchedulerSettings settings);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the job; it starts from the io loop (never inside this call).
  void enqueue(JobPlan plan);

  // Adds a watcher to a queued or running job. False when the job is neither.
  bool watch(std::int64_t job_id, JobWatcher watcher);

  [[nodiscard]] std::size_t queued() const { return m_queue.size(); }
  [[nodiscard]] std::size_t running() const { return m_active ? 1 : 0; }

  // Called once for every job that ends (done, failed, interrupted), after its final state is
  // stored and before its watchers are told. The lookup path uses it to refresh its winner index.
  void set_job_end_hook(std::function<void(std::int64_t job_id, JobState state)> hook) {
    m_job_end_hook = std::move(hook);
  }

  // Graceful stop: nothing starts afterwards and queued jobs become `interrupted` at once. The
  // running job's requests in flight may finish (their results are recorded) for up to `grace`;
  // then it becomes `interrupted` and later replies are ignored. `on_stopped` runs once, from
  // the io loop or inside this call, when no job is left running.
  void stop(std::chrono::milliseconds grace, std::function<void()> on_stopped);

private:
  struct Compiled {
    std::size_t index = 0;
    std::string artifact_path;
    double compile_ms = 0;
  };
  enum class ReferenceState { pending, compiling, ready };

  struct ActiveJob {
    JobPlan plan;
    ReferenceState reference = ReferenceState::pending;
    std::string reference_path;
    std::vector<std::size_t> pending;     // config indices without a row, in order
    std::size_t next_compile = 0;         // position in `pending`
    int in_flight = 0;                    // worker requests sent for this job
    std::deque<Compiled> compiled;        // waiting for the bench worker
    bool benchmarking = false;
    std::int64_t done = 0;
    std::int64_t failed = 0;
    std::map<CandidateStatus, int> failures;
    std::optional<ResultRecord> best;
    std::string error;                    // set once the job has failed
    std::chrono::steady_clock::time_point started;
  };

  void start_next();
  void finish_stop();
  void advance();
  void start_reference(ActiveJob& job);
  void start_compile(ActiveJob& job, std::size_t index, std::shared_ptr<WorkerProcess> worker);
  void start_bench(ActiveJob& job, Compiled candidate, std::shared_ptr<WorkerProcess> worker);
  void on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply);
  void on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply,
                   const std::string& stderr_tail);
  void on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply,
                  const std::string& stderr_tail);
  [[nodiscard]] std::chrono::milliseconds compile_deadline(const ActiveJob& job) const;
  void record(ActiveJob& job, std::size_t index, ResultRecord result);
  void finish(ActiveJob& job);
  static void fail(ActiveJob& job, const std::string& error);
  void end_job(std::int64_t job_id, JobState state, const std::string& error);
  [[nodiscard]] bool is_current(std::int64_t job_id) const;
  [[nodiscard]] nlohmann::json progress(const ActiveJob& job, const ResultRecord& last) const;

  asio::io_context& m_io;
  Store& m_store;
  WorkerPool& m_workers;
  SchedulerSettings m_settings;
  std::deque<JobPlan> m_queue;
  std::unique_ptr<ActiveJob> m_active;
  std::map<std::int64_t, std::vector<JobWatcher>> m_watchers;
  bool m_stopped = false;
  std::function<void()> m_on_stopped;
  std::unique_ptr<asio::steady_timer> m_stop_timer;
  std::function<void(std::int64_t job_id, JobState state)> m_job_end_hook;
};

} // namespace ktune::daemon
