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
// on the next request. The job fails when the reference does not compile, a worker cannot be
// started, the store refuses a write, or no candidate succeeds.
#include "bench/runner.hpp"
#include "compiler/kernel_registry.hpp"
#include "db/store.hpp"
#include "daemon/worker_pool.hpp"

#include <boost/asio/io_context.hpp>
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
};

// A validated tune request, ready to run.
struct JobPlan {
  JobRecord record;               // as stored by create_job: id set, state queued
  LoadedKernel kernel;
  Shape shape;                    // conformed to the kernel's dims
  std::vector<Config> configs;    // the candidates; a candidate's config_index is its position
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

  // Marks the running job and every queued one `interrupted`, tells their watchers, and ignores
  // every later worker reply. Nothing starts afterwards.
  void stop();

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
    std::size_t next_compile = 0;
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
  void advance();
  void start_reference(ActiveJob& job);
  void start_compile(ActiveJob& job, std::size_t index, std::shared_ptr<WorkerProcess> worker);
  void start_bench(ActiveJob& job, Compiled candidate, std::shared_ptr<WorkerProcess> worker);
  void on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply);
  void on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply);
  void on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply);
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
};

} // namespace ktune::daemon
