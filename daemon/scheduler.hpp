#pragma once
// Scheduler: the one queue of ktuned's work -- tune jobs (a client's, a sweep's, tune-on-miss at
// the lowest priority) and compile checks -- and the pipeline that runs them, driven by worker
// replies (no thread of its own; everything on the io thread). Workers are reached only through
// WorkerPool::submit.
//
// Several jobs are active at once: at most one tune job per device lane (so at most one
// candidate is measured on a device at a time), any number of compile checks. A queued job
// starts when its lane is free, the queued job of highest priority first, in the order they were
// queued among equals. Compiles of all active jobs share the compile pool, handed out by
// priority and then fairly across jobs (WorkerPool); each tune job compiles at most
// `compile_ahead` candidates ahead of its lane.
//
// Each running tune job is a TuneRun (daemon/tune_run.hpp): the per-job pipeline, the finals
// and the winner choice (daemon/finals.hpp). The Scheduler owns the runs, the lanes and the
// compile checks, and takes every job's end (stored, counted, told to the end hook and watchers).
//
// The store: the Scheduler and its runs read it (const Store&); every write goes through the
// StoreWriter they are handed, in order and never waiting on the database on the loop.
#include "daemon/planner.hpp"
#include "daemon/scheduler_types.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/tune_run.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ktune::daemon {

// A batch of compiles that is not a tune: a compile check (daemon/compile_check.hpp). The
// scheduler submits the compiles as the job's work, several configs per request as its
// BatchSizer finds worth it (consecutive compiles that agree on all but their defines share a
// compiler run, so order them to agree), and reports each compile's reply; the job ends when all
// are answered (done) or once cancelled and drained (cancelled).
struct CheckPlan {
  JobRecord record;               // stored (id set); options.priority orders its compiles
  std::vector<nlohmann::json> compiles; // compile jobs (worker op "compile")
  // Each compile's reply, in any order. io thread.
  std::function<void(std::size_t index, Result<nlohmann::json> reply)> on_compiled;
  // Once, when the job ended.
  std::function<void(JobState state)> on_end;
};

// Told about one job. Both callbacks run on the io thread.
struct JobWatcher {
  // {"job","done","total","failed","best_config","best_median_ms","best_gflops","last"}
  std::function<void(const nlohmann::json& progress)> on_progress;
  // The job reached done, failed, cancelled or interrupted; its row in the store is final.
  std::function<void(std::int64_t job_id)> on_finished;
};

// A failed candidate, as `ktune top` lists the latest ones.
struct RecentFailure {
  std::int64_t job = 0;
  std::string kernel, shape, device, config, status, reason;
  std::chrono::system_clock::time_point at;
};

class Scheduler : private RunHost {
public:
  // `store` is read (the incumbent winner, device rows); every write goes through `writer`. All
  // three outlive the Scheduler.
  Scheduler(asio::io_context& io, const Store& store, StoreWriter& writer, WorkerPool& workers,
            SchedulerSettings settings);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the job; it starts from the io loop (never inside this call). A tune job runs on the
  // lane of its record's device.
  void enqueue(JobPlan plan);
  void enqueue(CheckPlan plan);

  // A queued or running tune job doing exactly what `record` asks (same kernel, source, shape,
  // dtype, device fingerprint, strategy, budget, seed and retry_failed): an identical request
  // joins it, tune-on-miss included.
  [[nodiscard]] std::optional<std::int64_t> find_same(const JobRecord& record) const;

  // Cancels any job: a queued one at once; a running one stops handing out work, its work not
  // yet taken by a worker is withdrawn, and it ends `cancelled` once the requests in flight are
  // answered (their results are kept). False when the job is neither queued nor running.
  bool cancel(std::int64_t job_id);

  // Adds a watcher to a queued or running tune job. False when the job is neither.
  bool watch(std::int64_t job_id, JobWatcher watcher);

  [[nodiscard]] std::size_t queued() const { return m_queue.size(); }
  [[nodiscard]] std::size_t running() const { return m_tunes.size() + m_checks.size(); }
  // The running tune job on `lane`, 0 when none.
  [[nodiscard]] std::int64_t running_on(const std::string& lane) const;
  // Queued jobs by priority: {priority: count}.
  [[nodiscard]] std::map<int, std::size_t> queued_by_priority() const;
  // Running jobs first (by id), then the queue in order.
  [[nodiscard]] std::vector<JobView> jobs() const;
  [[nodiscard]] const SchedulerCounters& counters() const { return m_counters; }
  // The latest failed candidates, newest last (at most k_recent_failures).
  static constexpr std::size_t k_recent_failures = 20;
  [[nodiscard]] const std::deque<RecentFailure>& recent_failures() const { return m_recent_failures; }
  // Results recorded in the last minute.
  [[nodiscard]] std::size_t results_last_minute() const;

  // Called once for every job that ends (done, failed, cancelled, interrupted), after its final
  // state is stored (a write that waits for the database delays it) and before its watchers are told. The lookup path uses it to refresh its
  // winner index.
  void set_job_end_hook(std::function<void(std::int64_t job_id, JobState state)> hook) {
    m_job_end_hook = std::move(hook);
  }

  // The writer it was handed: the store's writes (in order, never waiting on the database on
  // the loop) and their stall.
  [[nodiscard]] StoreWriter& writer() { return m_writer; }
  [[nodiscard]] const StoreWriter& writer() const { return m_writer; }

  // Graceful stop: nothing starts afterwards and queued jobs become `interrupted` at once. The
  // running jobs' requests in flight may finish (their results are recorded) for up to `grace`;
  // then they become `interrupted` and later replies are ignored. `on_stopped` runs once, from
  // the io loop or inside this call, when no job is left running.
  void stop(std::chrono::milliseconds grace, std::function<void()> on_stopped);

private:
  struct ActiveCheck;
  struct Queued {
    std::unique_ptr<JobPlan> tune;
    std::unique_ptr<CheckPlan> check;
    std::chrono::steady_clock::time_point queued_at;
    [[nodiscard]] const JobRecord& record() const { return tune ? tune->record : check->record; }
  };

  void start_ready();
  void start_tune(JobPlan plan, std::chrono::steady_clock::time_point queued_at);
  void start_check(CheckPlan plan);
  // Asks the pool for a check's next compiles, in requests its BatchSizer sizes (§ Batched
  // compiles in daemon/tune_run.hpp); `indices` are sent as one request.
  void feed_check(std::int64_t job_id);
  void submit_check(std::int64_t job_id, const std::vector<std::size_t>& indices);
  void finish_stop();
  void advance_check(std::int64_t job_id);

  // RunHost: what the runs ask of their scheduler.
  [[nodiscard]] TuneRun* find_run(std::int64_t job_id) override;
  // Steps the run; once it is over (or ktuned stops and nothing is in flight), frees its lane.
  void advance(std::int64_t job_id) override;
  [[nodiscard]] bool stopping() const override;
  void count_result(const JobRecord& job, const ResultRecord& result) override;
  [[nodiscard]] bool watched(std::int64_t job_id) const override;
  void tell_progress(std::int64_t job_id, const nlohmann::json& event) override;
  // Stores the job's final state, then announce_end().
  void end_job(std::int64_t job_id, JobState state, const std::string& error) override;
  // Counts the end (jobs_ended), tells the end hook and the watchers; the state is stored
  // already. Every job's end, whatever its path, passes here once.
  void announce_end(std::int64_t job_id, JobState state) override;

  asio::io_context& m_io;
  const Store& m_store;         // reads; every write goes through m_writer
  StoreWriter& m_writer;
  WorkerPool& m_workers;
  SchedulerSettings m_settings;
  std::deque<Queued> m_queue;
  std::map<std::int64_t, std::unique_ptr<TuneRun>> m_tunes;     // running tune jobs
  std::map<std::int64_t, std::unique_ptr<ActiveCheck>> m_checks; // running compile checks
  std::map<std::string, std::int64_t> m_lanes;                  // lane -> its running tune job
  std::map<std::int64_t, std::vector<JobWatcher>> m_watchers;
  bool m_stopped = false;
  bool m_start_posted = false;
  std::function<void()> m_on_stopped;
  std::unique_ptr<asio::steady_timer> m_stop_timer;
  std::function<void(std::int64_t job_id, JobState state)> m_job_end_hook;
  SchedulerCounters m_counters;
  std::deque<RecentFailure> m_recent_failures;
  mutable std::deque<std::chrono::steady_clock::time_point> m_recent_results; // last minute
};

} // namespace ktune::daemon
