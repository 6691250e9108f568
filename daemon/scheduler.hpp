#pragma once
// Scheduler: runs tune jobs one at a time -- the queued job of highest priority first, in the
// order they were queued among equals -- as a pipeline of
// worker requests driven by their replies (no thread of its own; everything on the io thread).
//
// For one job: the reference config (the spec's [default]) is compiled first; its artifact is
// what every candidate's output is checked against. Then the job's search strategy
// (search/strategy.hpp; `exhaustive` proposes every config in index order) proposes candidates,
// as many as keep `compile_ahead` candidates compiling or compiled ahead of the single bench
// worker, within the job's evaluation budget (StopCondition). Every other strategy proposes in
// batches of `search_batch` and learns a batch's results together, in proposal order, once all
// are in: its proposals are a function of the seed, search_batch and the measured times only
// (not of which compile finished first), so the same seed with the same times proposes the same
// configs. Up to `compile_workers` compile at
// once; compiled candidates wait for the bench worker, which measures one at a time. Every
// result is reported back to the strategy, which decides what to propose next.
//
// No wasted work: a proposed config that already has a row in this job (resume) is answered from
// it; one measured for the same winner key by an earlier job (`reusable`, unless the request
// asked to remeasure) gets a copy of that row (reason "reused from job N") and is not run.
// Early stop: once a best exists, a candidate is measured with prune_above_ms = prune_factor x
// the best median; one slower than that after its first samples is recorded ok with pruned.
//
// Sound winners, the finals: when the search is over, the best and the candidates measured in
// this job within measure.final_margin (30%) of its median -- at most measure.finalists (32),
// nearest first -- are measured again in measure.final_rounds (5) rounds, each round measuring
// every finalist once (max_time_s / final_rounds each), one finalist later each round. A
// finalist's row then holds the rounds pooled (pool_rounds: median = median of the round
// medians; remeasured). Comparing finalists round by round cancels what the machine did between
// rounds; judge_finals (core/stats.hpp) declares ties: within tie_margin (3%) of the best at 95%
// confidence, and never measured more than 2 x tie_margin slower. The winner among the ties
// (results.tied, the best included) is the one with fewer registers, then less shared memory,
// then the lower config index, so re-tuning picks the same config.
//
// A worker that dies mid-request yields a `crash` (signal) or `worker_lost` row and is replaced
// on the next request; one that passes its deadline (compile: `compile_timeout`; bench: derived
// from the measurement settings, clamped; a job may override both) is killed with its process
// group and yields `compile_timeout` or `timeout`. A failed row carries the worker's stderr tail
// as its log. The job fails when the reference does not compile, a worker cannot be started, the
// store refuses a write, or no candidate succeeds.
//
// Every job records where its wall time went (JobTiming in db/store.hpp).
//
// Quarantine: configs that crashed, hung or lost their worker in earlier jobs of the same kernel
// source and device are dropped from the candidates (drop_quarantined) by whoever builds a plan.
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
  MeasureSettings measure;        // prune_factor too
  std::size_t compile_workers = 1;
  std::size_t compile_ahead = 0;  // candidates compiling or compiled ahead of the bench worker; 0 = 2 x compile_workers
  std::size_t search_batch = 4;   // proposals per batch of a strategy other than exhaustive
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

// The rows measured for the job's winner key by other jobs, newest per config: what a new job
// reuses instead of measuring again (quarantining statuses excluded; drop_quarantined removes
// those configs); none for a job that remeasures. Errors: db_error.
[[nodiscard]] Result<std::vector<ResultRecord>> reusable_results(const Store& store,
                                                                 const JobRecord& record);

// A validated tune request, ready to run.
struct JobPlan {
  JobRecord record;               // as stored by create_job: id set, state queued; strategy,
                                  // budget (evaluations) and seed drive the search; options:
                                  // priority and per-job deadlines
  LoadedKernel kernel;
  Shape shape;                    // conformed to the kernel's dims
  std::vector<Config> configs;    // the search space; a candidate's config_index is its position
  std::vector<ResultRecord> existing; // rows the job already has (resume): not run again
  std::vector<ResultRecord> reusable; // rows of other jobs for the same key: copied, not run
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
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the job; it starts from the io loop (never inside this call).
  void enqueue(JobPlan plan);

  // A queued or running job doing exactly what `record` asks (same kernel, source, shape, dtype,
  // device fingerprint, strategy, budget and seed): a second client's identical request joins it.
  [[nodiscard]] std::optional<std::int64_t> find_same(const JobRecord& record) const;

  // Cancels a queued job at once, or the running job once its requests in flight are answered
  // (their results are kept); it ends `cancelled`. False when the job is neither queued nor
  // running.
  bool cancel(std::int64_t job_id);

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
    int registers = -1, spills = -1, shared_bytes = -1;
  };
  enum class ReferenceState { pending, compiling, ready };
  enum class Phase { search, finals };
  struct ActiveJob;

  void start_next();
  void finish_stop();
  void advance();
  void account(ActiveJob& job);
  void propose(ActiveJob& job);
  [[nodiscard]] bool search_over(const ActiveJob& job) const;
  void start_finals(ActiveJob& job);
  void queue_round(ActiveJob& job);
  void start_reference(ActiveJob& job);
  void start_compile(ActiveJob& job, std::size_t index, std::shared_ptr<WorkerProcess> worker);
  void start_bench(ActiveJob& job, Compiled candidate, std::shared_ptr<WorkerProcess> worker);
  void on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply);
  void on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply,
                   const std::string& stderr_tail, double request_ms);
  void on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply,
                  const std::string& stderr_tail);
  void on_final_measured(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply);
  [[nodiscard]] std::vector<std::size_t> tie_set(const ActiveJob& job,
                                                 const std::vector<ResultRecord>& rows) const;
  [[nodiscard]] std::chrono::milliseconds compile_deadline(const ActiveJob& job) const;
  void record(ActiveJob& job, std::size_t index, ResultRecord result);
  void learn(ActiveJob& job, std::size_t index, const ResultRecord& result);
  void finish(ActiveJob& job);
  static void fail(ActiveJob& job, const std::string& error);
  void end_job(std::int64_t job_id, JobState state, const std::string& error);
  [[nodiscard]] bool is_current(std::int64_t job_id) const;
  [[nodiscard]] nlohmann::json progress(const ActiveJob& job, const ResultRecord& last) const;

  asio::io_context& m_io;
  Store& m_store;
  WorkerPool& m_workers;
  SchedulerSettings m_settings;
  std::deque<std::pair<JobPlan, std::chrono::steady_clock::time_point>> m_queue; // plan, queued at
  std::unique_ptr<ActiveJob> m_active;
  std::map<std::int64_t, std::vector<JobWatcher>> m_watchers;
  bool m_stopped = false;
  std::function<void()> m_on_stopped;
  std::unique_ptr<asio::steady_timer> m_stop_timer;
  std::function<void(std::int64_t job_id, JobState state)> m_job_end_hook;
};

} // namespace ktune::daemon
