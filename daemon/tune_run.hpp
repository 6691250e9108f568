#pragma once
// TuneRun: one running tune job -- its search, compiles, measurements, finals and end -- driven
// by worker replies on the io thread. The Scheduler (daemon/scheduler.hpp) creates it when the
// job's lane is free, steps it (advance) after every reply, and drops it once it is over. The
// run reaches the scheduler only through RunHost, and no callback holds the run: every reply,
// timer and store completion finds it again by job id (RunHost::find_run), so one that comes
// after the job ended finds nothing. The finals' rules are daemon/finals.hpp's.
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
#include "search/search_space.hpp"
#include "daemon/batch_sizer.hpp"
#include "daemon/finals.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler_types.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"
#include "jobs/compile_job.hpp"
#include "search/stop_condition.hpp"
#include "search/strategy.hpp"

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

class TuneRun;

// What a run asks of the scheduler that owns it. Every call on the io thread.
class RunHost {
public:
  virtual ~RunHost() = default;
  // The running job `job_id`, nullptr once it ended (a reply may come after).
  [[nodiscard]] virtual TuneRun* find_run(std::int64_t job_id) = 0;
  // Something changed for `job_id` (a reply, a timer): take its next steps, end it when over.
  virtual void advance(std::int64_t job_id) = 0;
  // ktuned is stopping: nothing new is sent.
  [[nodiscard]] virtual bool stopping() const = 0;
  // A result was recorded (the counters, the recent failures).
  virtual void count_result(const JobRecord& job, const ResultRecord& result) = 0;
  // Whether anyone watches `job_id`; tells them its progress (the result is durable).
  [[nodiscard]] virtual bool watched(std::int64_t job_id) const = 0;
  virtual void tell_progress(std::int64_t job_id, const nlohmann::json& event) = 0;
  // Stores the job's final state, then announce_end.
  virtual void end_job(std::int64_t job_id, JobState state, const std::string& error) = 0;
  // The job's final state is stored: count it, tell the end hook and the watchers.
  virtual void announce_end(std::int64_t job_id, JobState state) = 0;
};

// What a run works with; all outlive it.
struct RunServices {
  asio::io_context& io;
  const Store& store;              // reads: the incumbent winner, device rows
  StoreWriter& writer;             // every write
  WorkerPool& workers;
  const SchedulerSettings& settings;
  SchedulerCounters& counters;     // compile cache and batch counters
  RunHost& host;
};

class TuneRun {
public:
  // Sets up the job's search (a job whose configs cannot be searched, or whose lane this ktuned
  // lacks, starts failed and ends at its first advance). Nothing is sent yet: start() does.
  TuneRun(RunServices services, JobPlan plan, std::chrono::steady_clock::time_point queued_at);
  TuneRun(const TuneRun&) = delete;
  TuneRun& operator=(const TuneRun&) = delete;

  // Stores the job's start (running); a failure to do so fails the job.
  void start();
  // Takes the job's next steps: the reference, proposals, compiles, the bench worker, the finals.
  // True when the job is over (its end is stored or on its way to the store, through finish or
  // RunHost::end_job); false while replies are awaited.
  [[nodiscard]] bool advance();
  // Cancelled by a client: nothing new is sent, the requests in flight are answered first.
  void cancel();

  [[nodiscard]] std::int64_t id() const { return m_plan.record.id; }
  [[nodiscard]] const JobRecord& record() const { return m_plan.record; }
  [[nodiscard]] const std::string& lane() const { return m_lane; }
  [[nodiscard]] bool failed() const { return !m_error.empty(); }
  [[nodiscard]] int in_flight() const { return m_in_flight; }
  [[nodiscard]] JobView view(std::chrono::steady_clock::time_point now) const;

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
  using Handler = std::function<void(TuneRun&, Result<nlohmann::json>, const Delivery&)>;
  // One request to a worker, as sent again after a kill from outside or a busy device.
  struct Request {
    std::string lane;               // "" = the compile pool
    std::string op;
    nlohmann::json job;
    std::chrono::milliseconds deadline{0};
    std::shared_ptr<Handler> handle;
    int attempt = 1;
  };

  // The search (tune_run.cpp).
  void fail(const std::string& error);
  // Books the time since the last call to what the job was doing meanwhile.
  void account();
  void propose();
  [[nodiscard]] bool search_over() const;
  // Compiles what waits for a compile worker, measures what waits for the bench worker.
  void dispatch_work();
  void start_finals();
  void queue_round();
  void race_finals();
  // One finalist measured in one round. A finalist that fails a round leaves the finals (its
  // first measurement stands); the last reply of a round queues the next.
  void on_final_measured(const Compiled& candidate, Result<nlohmann::json> reply);
  // The rounds of `finalists` so far, in their order.
  [[nodiscard]] std::vector<FinalistRounds> rounds_of(const std::vector<Compiled>& finalists) const;
  // Tells the strategy and the stop condition about a result, and keeps the job's tallies.
  void learn(std::size_t index, const ResultRecord& result);
  // A candidate's result: counted, learnt, and stored with the job's progress in one commit
  // before its watchers hear of it.
  void record(std::size_t index, ResultRecord result);
  [[nodiscard]] nlohmann::json progress(const ResultRecord& last) const;
  [[nodiscard]] JobSearch search_record() const;

  // The end (tune_run.cpp).
  void finish();
  void fail_without_winner();
  // The winning group and winner (daemon/finals.hpp) with the incumbent read from the store; the
  // job's rows take the finals' pooled figures.
  [[nodiscard]] WinnerChoice choose();
  // The log line of a job that ends done.
  [[nodiscard]] std::string end_summary(const WinnerChoice& choice) const;

  // Worker requests (tune_requests.cpp).
  // Submits one request and calls `handle` with its reply while the job is running.
  void submit(const std::string& lane, std::string op, nlohmann::json request,
              std::chrono::milliseconds deadline, Handler handle);
  void send(Request request);
  void on_reply(Request request, Result<nlohmann::json> reply, const Delivery& delivery);
  // Another ktuned measures on the device: the request is sent again shortly.
  void wait_for_device(Request request, const std::string& why);
  // Points a CUDA compile job at the job's device: the arch of the plan's device, or of the
  // stored device where the plan carries none (a resumed job), read once per job. Errors:
  // target_cuda_device's. A CPU compile job is left as it is.
  [[nodiscard]] Result<void> target_device(CompileJob& job);
  void start_reference();
  void on_reference_compiled(Result<nlohmann::json> reply);
  // Configs a job compiles per request (its BatchSizer's, within compile_ahead; 1 for CUDA).
  [[nodiscard]] std::size_t batch_size() const;
  [[nodiscard]] std::size_t compile_ahead() const;
  // Compiles the configs `indices` in one request: "compile" for one, "compile_batch" for more.
  void start_compile(const std::vector<std::size_t>& indices);
  void on_compiled(std::size_t index, Result<nlohmann::json> reply, const Delivery& delivery);
  void on_batch_compiled(const std::vector<std::size_t>& indices, Result<nlohmann::json> reply,
                         const Delivery& delivery);
  // One config's compile outcome: its result when it failed, else it waits for the bench worker.
  void on_outcome(std::size_t index, const CompileOutcome& outcome);
  // What a batch's outcomes teach the job's BatchSizer; logs a change of size.
  void learn_batching(const std::vector<CompileOutcome>& outcomes);
  void start_bench(Compiled candidate);
  void on_benched(const Compiled& candidate, Result<nlohmann::json> reply,
                  const std::string& stderr_tail);
  // A bench outcome the host caused (an artifact that failed its check before it was loaded):
  // never recorded; the artifact's compile is asked for again (the reference's, when it was the
  // reference), and a second time for one config ends the job with the cause.
  void on_bench_infra(const Compiled& candidate, const std::string& infra,
                      const std::string& artifact);

  asio::io_context& m_io;
  const Store& m_store;
  StoreWriter& m_writer;
  WorkerPool& m_workers;
  const SchedulerSettings& m_settings;
  SchedulerCounters& m_counters;
  RunHost& m_host;

  JobPlan m_plan;
  std::string m_lane;                     // the device lane it measures on
  std::int64_t m_total = 0;               // evaluations the budget allows (progress denominator)
  search::SearchSpace m_space;
  std::unique_ptr<search::Strategy> m_strategy;
  std::optional<search::StopCondition> m_stop;
  std::map<std::string, const ResultRecord*> m_existing; // config text -> this job's row
  std::map<std::string, const ResultRecord*> m_reusable; // config text -> another job's row
  ReferenceState m_reference = ReferenceState::pending;
  std::string m_reference_path;
  std::string m_reference_entry;          // the reference compile's entry_symbol
  std::optional<std::string> m_arch;      // a CUDA job's arch, once known (target_device)
  Phase m_phase = Phase::search;
  // Batch mode (every strategy but exhaustive): proposals come in batches of search_batch, and a
  // batch's results are told to the strategy together, in proposal order, once all are in; so
  // the proposals depend on the seed and the measured times only, never on which compile
  // finished first.
  bool m_batched = false;
  std::vector<std::size_t> m_batch;       // the open batch, in proposal order
  std::map<std::size_t, std::optional<double>> m_batch_results;
  std::deque<std::size_t> m_to_compile;   // proposed, waiting for a compile worker
  std::size_t m_compiling = 0;            // candidates whose compile is in flight
  BatchSizer m_sizer;                     // configs per compile request
  std::size_t m_logged_batch_size = 1;    // the size the log last named
  int m_in_flight = 0;                    // worker requests sent for this job
  std::deque<Compiled> m_compiled;        // waiting for the bench worker
  bool m_benchmarking = false;
  std::int64_t m_retaken = 0;             // samples the bench worker dropped as preempted
  std::int64_t m_killed_retries = 0;      // requests sent again after a worker was killed from outside
  std::map<std::size_t, int> m_infra_attempts; // compiles per config that failed by the host's fault
  std::chrono::steady_clock::time_point m_busy_logged; // last "waits for its device" line
  std::map<std::size_t, Compiled> m_artifacts; // ok candidates measured in this job
  std::map<std::size_t, ResultRecord> m_ok_rows; // config index -> its ok row
  // The finals: the finalists in config order, each one's rounds (by config index), the
  // finalists the current round has yet to measure, and the rounds started. Finalists raced out
  // of the finals (race_finals) keep their rounds so far in `m_raced_out`.
  std::vector<Compiled> m_finalists;
  std::vector<Compiled> m_raced_out;
  std::map<std::size_t, FinalistRounds> m_final_rounds;
  std::deque<Compiled> m_final_queue;
  int m_rounds_started = 0;
  std::int64_t m_done = 0;
  std::int64_t m_failed = 0;
  std::map<CandidateStatus, int> m_failures;
  std::optional<ResultRecord> m_best;
  std::int64_t m_best_at = 0;             // `m_done` when `m_best` was found
  std::string m_error;                    // set once the job has failed (or was cancelled)
  bool m_cancelled = false;
  std::chrono::steady_clock::time_point m_started;
  std::chrono::steady_clock::time_point m_mark; // last account()
  JobTiming m_timing;
};

} // namespace ktune::daemon
