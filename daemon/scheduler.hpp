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
// For one job: the reference config (the spec's [default]) is compiled first; its artifact is
// what every candidate's output is checked against. Then the job's search strategy
// (search/strategy.hpp; `exhaustive` proposes every config in index order) proposes candidates,
// as many as keep `compile_ahead` candidates compiling or compiled ahead of the single bench
// worker, within the job's evaluation budget (StopCondition). Every other strategy proposes in
// batches of `search_batch` and learns a batch's results together, in proposal order, once all
// are in: its proposals are a function of the seed, search_batch and the measured times only
// (not of which compile finished first), so the same seed with the same times proposes the same
// configs. Up to `compile_workers` compile requests run at once; compiled candidates wait for
// the bench worker, which measures one at a time. Every result is reported back to the
// strategy, which decides what to propose next.
//
// Batched compiles (CPU jobs): a compile request carries up to the job's batch size of configs
// (op compile_batch; BatchSizer picks the size from the compile times measured: 1 until a single
// compile is timed, then a probe of 2, then the fitted rule). The reference compiles alone.
// Exhaustive search proposes whole batches; a strategy's batch is spread over the compile
// workers first. Each config's outcome is then handled as a single compile's (cache counters,
// a host failure retried alone, failures recorded). A batch that fails as a whole (its deadline,
// a dead worker) is compiled again config by config; a source whose batches fail though each
// config compiles (the outcome's batch_error) is compiled one config at a time for the rest of
// the job, said once in the log.
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
// every finalist once (min_time_s and max_time_s / final_rounds each), one finalist later each round. A
// finalist's row then holds the rounds pooled (the samples of all its rounds and their figures,
// summarize; remeasured). Comparing finalists round by round cancels what the machine did between
// rounds; judge_finals (core/stats.hpp) declares ties: within tie_margin (3%) of the best at 95%
// confidence, and never measured more than 2 x tie_margin slower. From the third round on, a
// finalist that can no longer tie the best (slower by more than tie_margin at 95%) leaves the
// finals (race_finals), its rounds so far pooled into its row. The winner among the ties
// (results.tied, the best included) is the incumbent -- the key's winner before this job -- when
// it is in the group, else the tie with the lowest median (pick_winner), so a re-tune that learns
// nothing new keeps the config it named before; the job stores the result it named
// (Store::set_job_winner), which every reader names (db/job_winner.hpp's job_winner).
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
#include "jobs/bench_job.hpp"
#include "jobs/compile_job.hpp"
#include "daemon/planner.hpp"
#include "daemon/store_writer.hpp"
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

// The longest compile deadline a job may ask for: [limits] compile_timeout_s, or an hour where
// that is shorter (a big CUDA kernel under nvrtc may need more than the default). A request over
// it is refused (RequestHandler); a stored job's deadline is capped to it (compile_deadline).
[[nodiscard]] inline double compile_timeout_limit_s(double configured_s) {
  return std::max(configured_s, 3600.0);
}

// The shortest compile deadline a job may ask for: 1 s, or [limits] compile_timeout_s where that
// is shorter. A request under it is refused (RequestHandler); a stored job's deadline is raised to
// it (compile_deadline).
[[nodiscard]] inline double compile_timeout_floor_s(double configured_s) {
  return std::min(configured_s, 1.0);
}

struct SchedulerSettings {
  std::string cache_dir;          // compile cache shared by every job
  MeasureSettings measure;        // prune_factor too
  std::size_t compile_workers = 1;
  // Candidates compiling or compiled ahead of a lane; 0 = 2 x (compile_workers + 1, the bench
  // CPU's borrowed worker) x the job's batch size (BatchSizer), so that batches fit.
  std::size_t compile_ahead = 0;
  std::size_t search_batch = 4;   // proposals per batch of a strategy other than exhaustive
  double compile_timeout_s = 120;
  double bench_timeout_s = 0;     // 0 = derived from `measure` (bench_deadline)
  double bench_timeout_min_s = 10;
  double bench_timeout_max_s = 600;
  // Each job compiles and measures one candidate at a time, nothing overlapped: the loop of
  // tuners that compile in the measuring process (benchmarks/peer's Kernel Tuner loop), and a
  // way to keep compilers off a machine whose measurements they disturb.
  bool serial = false;
};

// The bench deadline of one candidate: `override_s` when > 0, else settings.bench_timeout_s when
// > 0, else the estimate 2 * (warmup + max_time_s) + 1 s (the timed samples, the untimed check
// run and the cache flushes all fit in it), clamped to [bench_timeout_min_s, bench_timeout_max_s].
[[nodiscard]] std::chrono::milliseconds bench_deadline(const SchedulerSettings& settings,
                                                       std::optional<double> override_s = {});

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

// What the scheduler has counted since ktuned started (/metrics, `ktune top`).
struct SchedulerCounters {
  std::map<std::string, std::uint64_t> candidates; // results recorded (reused rows included), by status
  std::map<std::string, std::uint64_t> jobs_ended; // tune jobs and compile checks, by final state
  std::uint64_t compile_cache_hits = 0;            // candidate and reference compiles of tune jobs
  std::uint64_t compile_cache_misses = 0;
  std::uint64_t compile_batches = 0;               // compile requests that built several configs in one run
};

// A failed candidate, as `ktune top` lists the latest ones.
struct RecentFailure {
  std::int64_t job = 0;
  std::string kernel, shape, device, config, status, reason;
  std::chrono::system_clock::time_point at;
};

// A queued or running job as the scheduler sees it now (no database read).
struct JobView {
  JobRecord record;                // as it was queued
  bool running = false;
  bool compile_check = false;
  std::string phase;               // queued, reference, search, finals, compiling (a check)
  std::int64_t done = 0, total = 0, failed = 0;
  std::optional<double> best_median_ms;
  std::string best_config;         // canonical JSON object text, "" when none
  double running_s = 0;            // since it started
};

class Scheduler {
public:
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

  // The store's writes (in order, never waiting on the database on the loop) and their stall.
  [[nodiscard]] StoreWriter& writer() { return m_writer; }
  [[nodiscard]] const StoreWriter& writer() const { return m_writer; }

  // Graceful stop: nothing starts afterwards and queued jobs become `interrupted` at once. The
  // running jobs' requests in flight may finish (their results are recorded) for up to `grace`;
  // then they become `interrupted` and later replies are ignored. `on_stopped` runs once, from
  // the io loop or inside this call, when no job is left running.
  void stop(std::chrono::milliseconds grace, std::function<void()> on_stopped);

private:
  struct Compiled {
    std::size_t index = 0;
    std::string artifact_path;
    std::string entry_symbol;     // CompileOutcome::entry_symbol: what the bench job calls
    double compile_ms = 0;
    int registers = -1, spills = -1, shared_bytes = -1;
  };
  enum class ReferenceState { pending, compiling, ready };
  enum class Phase { search, finals };
  struct ActiveJob;
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
  // compiles); `indices` are sent as one request.
  void feed_check(std::int64_t job_id);
  void submit_check(std::int64_t job_id, const std::vector<std::size_t>& indices);
  void finish_stop();
  void advance(std::int64_t job_id);
  void advance_check(std::int64_t job_id);
  void account(ActiveJob& job);
  void propose(ActiveJob& job);
  [[nodiscard]] bool search_over(const ActiveJob& job) const;
  void start_finals(ActiveJob& job);
  void queue_round(ActiveJob& job);
  static constexpr int k_race_finals_after = 3; // rounds
  void race_finals(ActiveJob& job);
  // judge_finals on the current finalists' round medians.
  [[nodiscard]] FinalsVerdict judge_rounds(const ActiveJob& job) const;
  void start_reference(ActiveJob& job);
  // Configs a job compiles per request (its BatchSizer's, within compile_ahead; 1 for CUDA).
  [[nodiscard]] std::size_t batch_size(const ActiveJob& job) const;
  [[nodiscard]] std::size_t compile_ahead(const ActiveJob& job) const;
  // Compiles the configs `indices` in one request: "compile" for one, "compile_batch" for more.
  void start_compile(ActiveJob& job, const std::vector<std::size_t>& indices);
  void start_bench(ActiveJob& job, Compiled candidate);
  void on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply);
  void on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply,
                   const Delivery& delivery);
  void on_batch_compiled(ActiveJob& job, const std::vector<std::size_t>& indices,
                         Result<nlohmann::json> reply, const Delivery& delivery);
  // One config's compile outcome: its result when it failed, else it waits for the bench worker.
  void on_outcome(ActiveJob& job, std::size_t index, const CompileOutcome& outcome);
  // What a batch's outcomes teach the job's BatchSizer; logs a change of size.
  void learn_batching(ActiveJob& job, const std::vector<CompileOutcome>& outcomes);
  void on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply,
                  const std::string& stderr_tail);
  void on_final_measured(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply);
  // A bench outcome the host caused (an artifact that failed its check before it was loaded):
  // never recorded; the artifact's compile is asked for again (the reference's, when it was the
  // reference), and a second time for one config ends the job with the cause.
  void on_bench_infra(ActiveJob& job, const Compiled& candidate, const std::string& infra,
                      const std::string& artifact);
  [[nodiscard]] std::vector<std::size_t> tie_set(const ActiveJob& job,
                                                 const std::vector<ResultRecord>& rows) const;
  [[nodiscard]] std::chrono::milliseconds compile_deadline(const JobRecord& record) const;
  // Submits one request for `job` and calls `handle` with its reply while the job is running.
  using Handler = std::function<void(ActiveJob&, Result<nlohmann::json>, const Delivery&)>;
  void submit(ActiveJob& job, const std::string& lane, std::string op, nlohmann::json request,
              std::chrono::milliseconds deadline, Handler handle);
  void submit_attempt(ActiveJob& job, const std::string& lane, std::string op,
                      nlohmann::json request, std::chrono::milliseconds deadline,
                      std::shared_ptr<Handler> handle, int attempt);
  void wait_for_device(ActiveJob& job, const std::string& lane, std::string op,
                       nlohmann::json request, std::chrono::milliseconds deadline,
                       std::shared_ptr<Handler> handle, int attempt, const std::string& why);
  void record(ActiveJob& job, std::size_t index, ResultRecord result);
  void learn(ActiveJob& job, std::size_t index, const ResultRecord& result);
  void finish(ActiveJob& job);
  [[nodiscard]] static JobSearch search_record(const ActiveJob& job);
  static void fail(ActiveJob& job, const std::string& error);
  // Stores the job's final state, then announce_end().
  void end_job(std::int64_t job_id, JobState state, const std::string& error);
  // Counts the end (jobs_ended), tells the end hook and the watchers; the state is stored
  // already. Every job's end, whatever its path, passes here once.
  void announce_end(std::int64_t job_id, JobState state);
  [[nodiscard]] ActiveJob* find_tune(std::int64_t job_id) const;
  [[nodiscard]] nlohmann::json progress(const ActiveJob& job, const ResultRecord& last) const;

  asio::io_context& m_io;
  const Store& m_store;         // reads; every write goes through m_writer
  StoreWriter& m_writer;        // the Server's (the one store writer)
  WorkerPool& m_workers;
  SchedulerSettings m_settings;
  std::deque<Queued> m_queue;
  std::map<std::int64_t, std::unique_ptr<ActiveJob>> m_tunes;   // running tune jobs
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
