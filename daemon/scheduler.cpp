#include "daemon/scheduler.hpp"

#include "daemon/batch_sizer.hpp"
#include "daemon/devices.hpp"

#include "jobs/compile_job.hpp"
#include "core/stats.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "search/stop_condition.hpp"
#include "search/strategy.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace ktune::daemon {

namespace {

// A result for a candidate that produced no measurement.
ResultRecord failed_result(CandidateStatus status, std::string reason, std::string log = {},
                           double compile_ms = 0) {
  ResultRecord r;
  r.status = status;
  r.reason = std::move(reason);
  r.log = std::move(log);
  r.compile_ms = compile_ms;
  return r;
}

// Maps a failed worker request: the daemon's crash/worker_lost codes keep their status, a
// deadline becomes `timed_out`, any other error the worker replied with becomes `otherwise`.
// `log` is the worker's stderr tail.
ResultRecord worker_failure(const Error& error, CandidateStatus otherwise,
                            CandidateStatus timed_out, std::string log, double compile_ms = 0) {
  if (error.code == ErrorCode::worker_crashed) {
    return failed_result(CandidateStatus::crash, error.message, std::move(log), compile_ms);
  }
  if (error.code == ErrorCode::worker_gone) {
    return failed_result(CandidateStatus::worker_lost, error.message, std::move(log), compile_ms);
  }
  if (error.code == ErrorCode::worker_timeout) {
    return failed_result(timed_out, error.message, std::move(log), compile_ms);
  }
  return failed_result(otherwise, "worker error " + describe(error),
                       std::move(log), compile_ms);
}

// Attempts of a request whose worker was killed from outside before the death counts as the
// candidate's.
constexpr int k_killed_attempts = 2;
// How long a measurement waits before it asks again for a device another ktuned measures on.
constexpr std::chrono::milliseconds k_device_busy_retry{200};
// Compiles of one config that may fail by the host's fault (CompileOutcome::infra).
constexpr int k_infra_attempts = 2;
// The longest a batch of compiles may take (BatchSizer): the bench worker waits for no longer.
constexpr double k_max_batch_ms = 1000;

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

double ms_since(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// A near-tie of `best` by median alone: the rule for a best that was not in the finals (a row
// reused from an earlier job, or a job without finals).
bool near_tie(const ResultRecord& row, const ResultRecord& best, double margin) {
  return !row.pruned && row.stats.median_ms <= best.stats.median_ms * (1.0 + margin);
}

std::string describe_failures(const std::map<CandidateStatus, int>& failures) {
  std::ostringstream text;
  bool first = true;
  for (const auto& [status, count] : failures) {
    text << (first ? "" : ", ") << count << " " << to_string(status);
    first = false;
  }
  return text.str();
}

// What the candidates are checked against, for messages.
std::string reference_name(const LoadedKernel& kernel) {
  if (kernel.spec.check.reference == ReferenceKind::function) {
    return "reference function " + kernel.spec.check.function;
  }
  return "reference config " + config_to_string(kernel.spec.default_config);
}

} // namespace

std::chrono::milliseconds bench_deadline(const SchedulerSettings& settings,
                                         std::optional<double> override_s) {
  // A job's own deadline is kept within the daemon's bounds (a job stored by an older ktuned,
  // which refused neither 1e308 nor 1e-6, must neither hang a lane nor time out every config).
  if (override_s && *override_s > 0) {
    return seconds_to_ms(std::clamp(*override_s, settings.bench_timeout_min_s,
                                    std::max(settings.bench_timeout_max_s, settings.bench_timeout_min_s)));
  }
  if (settings.bench_timeout_s > 0) return seconds_to_ms(settings.bench_timeout_s);
  const double estimate = 2.0 * (settings.measure.warmup_ms / 1000.0 + settings.measure.max_time_s) + 1.0;
  return seconds_to_ms(
      std::clamp(estimate, settings.bench_timeout_min_s, settings.bench_timeout_max_s));
}

struct Scheduler::ActiveJob {
  JobPlan plan;
  std::string lane;                     // the device lane it measures on
  std::int64_t total = 0;               // evaluations the budget allows (progress denominator)
  search::SearchSpace space;
  std::unique_ptr<search::Strategy> strategy;
  std::optional<search::StopCondition> stop;
  std::map<std::string, const ResultRecord*> existing; // config text -> this job's row
  std::map<std::string, const ResultRecord*> reusable; // config text -> another job's row
  ReferenceState reference = ReferenceState::pending;
  std::string reference_path;
  std::string reference_entry;          // the reference compile's entry_symbol
  Phase phase = Phase::search;
  // Batch mode (every strategy but exhaustive): proposals come in batches of search_batch, and a
  // batch's results are told to the strategy together, in proposal order, once all are in; so
  // the proposals depend on the seed and the measured times only, never on which compile
  // finished first.
  bool batched = false;
  std::vector<std::size_t> batch;       // the open batch, in proposal order
  std::map<std::size_t, std::optional<double>> batch_results;
  std::deque<std::size_t> to_compile;   // proposed, waiting for a compile worker
  std::size_t compiling = 0;            // candidates whose compile is in flight
  BatchSizer sizer;                     // configs per compile request
  std::size_t logged_batch_size = 1;    // the size the log last named
  int in_flight = 0;                    // worker requests sent for this job
  std::deque<Compiled> compiled;        // waiting for the bench worker
  bool benchmarking = false;
  std::int64_t retaken = 0;             // samples the bench worker dropped as preempted
  std::int64_t killed_retries = 0;      // requests sent again after a worker was killed from outside
  std::map<std::size_t, int> infra_attempts; // compiles per config that failed by the host's fault
  std::chrono::steady_clock::time_point busy_logged; // last "waits for its device" line
  std::map<std::size_t, Compiled> artifacts; // ok candidates measured in this job
  std::map<std::size_t, ResultRecord> ok_rows; // config index -> its ok row
  // The finals: the finalists in config order, each one's stats round by round, the finalists
  // the current round has yet to measure, and the rounds started. Finalists raced out of the
  // finals (race_finals) keep their rounds so far in `raced_out`.
  std::vector<Compiled> finalists;
  std::vector<Compiled> raced_out;
  std::map<std::size_t, std::vector<SampleStats>> final_stats;
  std::map<std::size_t, std::vector<float>> final_samples; // every round's samples, in order
  std::deque<Compiled> final_queue;
  int rounds_started = 0;
  std::int64_t done = 0;
  std::int64_t failed = 0;
  std::map<CandidateStatus, int> failures;
  std::optional<ResultRecord> best;
  std::int64_t best_at = 0;             // `done` when `best` was found
  std::string error;                    // set once the job has failed (or was cancelled)
  bool cancelled = false;
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point mark; // last account()
  JobTiming timing;
};

// A compile check while it runs: a few requests of its compiles at a time in the pool, which
// hands them out fairly next to the tune jobs' compiles.
struct Scheduler::ActiveCheck {
  CheckPlan plan;
  std::size_t in_flight = 0;  // compiles not answered yet, asked for or not
  std::size_t next = 0;       // the first compile not asked for yet
  std::size_t requests = 0;   // requests in the pool
  BatchSizer sizer;           // configs per request
  bool cancelled = false;
};

Scheduler::Scheduler(asio::io_context& io, const Store& store, StoreWriter& writer,
                     WorkerPool& workers, SchedulerSettings settings)
    : m_io(io), m_store(store), m_writer(writer), m_workers(workers),
      m_settings(std::move(settings)) {}

Scheduler::~Scheduler() = default;

void Scheduler::enqueue(JobPlan plan) {
  KTUNE_LOG(info) << "job " << plan.record.id << " queued: " << plan.record.kernel << " "
                  << plan.record.shape << " " << plan.record.dtype << " on " << plan.record.device
                  << ", " << plan.configs.size() << " configs, strategy " << plan.record.strategy
                  << (plan.record.budget ? ", budget " + std::to_string(*plan.record.budget) : "")
                  << (plan.record.options.priority != 0
                          ? ", priority " + std::to_string(plan.record.options.priority)
                          : "");
  Queued queued;
  queued.tune = std::make_unique<JobPlan>(std::move(plan));
  queued.queued_at = std::chrono::steady_clock::now();
  m_queue.push_back(std::move(queued));
  start_ready();
}

void Scheduler::enqueue(CheckPlan plan) {
  KTUNE_LOG(info) << "job " << plan.record.id << " queued: compile check of "
                  << plan.record.kernel << ", " << plan.compiles.size() << " compiles";
  Queued queued;
  queued.check = std::make_unique<CheckPlan>(std::move(plan));
  queued.queued_at = std::chrono::steady_clock::now();
  m_queue.push_back(std::move(queued));
  start_ready();
}

std::optional<std::int64_t> Scheduler::find_same(const JobRecord& record) const {
  auto same = [&](const JobRecord& other) {
    return other.kernel == record.kernel && other.source_hash == record.source_hash &&
           other.shape == record.shape && other.dtype == record.dtype &&
           other.fingerprint == record.fingerprint && other.strategy == record.strategy &&
           other.budget == record.budget && other.budget_s == record.budget_s &&
           other.seed.value_or(0) == record.seed.value_or(0) &&
           other.options.retry_failed == record.options.retry_failed;
  };
  if (m_stopped) return std::nullopt;
  for (const auto& [id, job] : m_tunes) {
    if (job->error.empty() && same(job->plan.record)) return id;
  }
  for (const auto& queued : m_queue) {
    if (queued.tune && same(queued.tune->record)) return queued.tune->record.id;
  }
  return std::nullopt;
}

bool Scheduler::cancel(std::int64_t job_id) {
  if (m_stopped) return false;
  for (auto it = m_queue.begin(); it != m_queue.end(); ++it) {
    if (it->record().id != job_id) continue;
    auto check = std::move(it->check);
    m_queue.erase(it);
    end_job(job_id, JobState::cancelled, "cancelled by a client before it started");
    if (check && check->on_end) check->on_end(JobState::cancelled);
    return true;
  }
  if (ActiveJob* job = find_tune(job_id)) {
    job->cancelled = true;
    fail(*job, "cancelled by a client");
    const std::size_t withdrawn = m_workers.withdraw(job_id);
    KTUNE_LOG(info) << "job " << job_id << " cancelled; " << withdrawn
                    << " queued request(s) withdrawn, the rest in flight finish first";
    asio::post(m_io, [this, job_id] { advance(job_id); });
    return true;
  }
  if (const auto it = m_checks.find(job_id); it != m_checks.end()) {
    it->second->cancelled = true;
    feed_check(job_id);  // the compiles not asked for yet are answered by nobody
    m_workers.withdraw(job_id);
    KTUNE_LOG(info) << "job " << job_id << " (compile check) cancelled";
    asio::post(m_io, [this, job_id] { advance_check(job_id); });
    return true;
  }
  return false;
}

bool Scheduler::watch(std::int64_t job_id, JobWatcher watcher) {
  bool known = find_tune(job_id) != nullptr;
  for (const auto& queued : m_queue) known = known || (queued.tune && queued.record().id == job_id);
  if (!known || m_stopped) return false;
  m_watchers[job_id].push_back(std::move(watcher));
  return true;
}

Scheduler::ActiveJob* Scheduler::find_tune(std::int64_t job_id) const {
  const auto it = m_tunes.find(job_id);
  return it == m_tunes.end() ? nullptr : it->second.get();
}

std::int64_t Scheduler::running_on(const std::string& lane) const {
  const auto it = m_lanes.find(lane);
  return it == m_lanes.end() ? 0 : it->second;
}

std::map<int, std::size_t> Scheduler::queued_by_priority() const {
  std::map<int, std::size_t> out;
  for (const auto& queued : m_queue) ++out[queued.record().options.priority];
  return out;
}

std::vector<JobView> Scheduler::jobs() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<JobView> out;
  for (const auto& [id, job] : m_tunes) {
    JobView view;
    view.record = job->plan.record;
    view.running = true;
    view.phase = job->reference != ReferenceState::ready ? "reference"
                 : job->phase == Phase::finals           ? "finals"
                                                         : "search";
    view.done = job->done;
    view.total = job->total;
    view.failed = job->failed;
    if (job->best) {
      view.best_median_ms = job->best->stats.median_ms;
      view.best_config = job->best->config;
    }
    view.running_s = std::chrono::duration<double>(now - job->started).count();
    out.push_back(std::move(view));
  }
  for (const auto& [id, check] : m_checks) {
    JobView view;
    view.record = check->plan.record;
    view.running = true;
    view.compile_check = true;
    view.phase = "compiling";
    view.total = static_cast<std::int64_t>(check->plan.compiles.size());
    view.done = view.total - static_cast<std::int64_t>(check->in_flight);
    out.push_back(std::move(view));
  }
  std::sort(out.begin(), out.end(),
            [](const JobView& a, const JobView& b) { return a.record.id < b.record.id; });
  for (const auto& queued : m_queue) {
    JobView view;
    view.record = queued.record();
    view.compile_check = queued.check != nullptr;
    view.phase = "queued";
    view.total = view.record.total;
    out.push_back(std::move(view));
  }
  return out;
}

std::size_t Scheduler::results_last_minute() const {
  const auto now = std::chrono::steady_clock::now();
  while (!m_recent_results.empty() && now - m_recent_results.front() > std::chrono::minutes(1)) {
    m_recent_results.pop_front();
  }
  return m_recent_results.size();
}

void Scheduler::fail(ActiveJob& job, const std::string& error) {
  if (job.error.empty()) job.error = error;
}

// Starts every queued job that can start: compile checks at once, a tune job when its lane is
// free; the highest priority first, in queue order among equals. Never inside enqueue(): posted.
void Scheduler::start_ready() {
  if (m_start_posted) return;
  m_start_posted = true;
  asio::post(m_io, [this] {
    m_start_posted = false;
    if (m_stopped) return;
    std::vector<std::size_t> order(m_queue.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
      return m_queue[a].record().options.priority > m_queue[b].record().options.priority;
    });
    std::set<std::string> claimed;
    std::vector<std::size_t> starting;
    for (const std::size_t i : order) {
      const Queued& queued = m_queue[i];
      if (queued.tune) {
        const std::string& lane = queued.tune->record.device;
        // A lane busy with a running job, or claimed by a job of higher priority in this pass.
        if (m_lanes.count(lane) > 0 || !claimed.insert(lane).second) continue;
      }
      starting.push_back(i);
    }
    std::sort(starting.rbegin(), starting.rend()); // erase from the back
    std::vector<Queued> jobs;
    for (const std::size_t i : starting) {
      jobs.push_back(std::move(m_queue[i]));
      m_queue.erase(m_queue.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
      if (it->tune) {
        start_tune(std::move(*it->tune), it->queued_at);
      } else {
        start_check(std::move(*it->check));
      }
    }
  });
}

void Scheduler::start_check(CheckPlan plan) {
  const std::int64_t id = plan.record.id;
  auto check = std::make_unique<ActiveCheck>();
  check->plan = std::move(plan);
  ActiveCheck& c = *check;
  c.in_flight = c.plan.compiles.size();
  // Nothing waits to measure the configs: a batch may take up to a quarter of the deadline.
  c.sizer = BatchSizer(compile_deadline(c.plan.record).count() / 4.0);
  m_checks[id] = std::move(check);
  m_writer.submit("job " + std::to_string(id) + "'s start",
                  [id](Store& store) { return store.set_job_state(id, JobState::running); },
                  [id](const Result<void>& r) {
                    if (!r) KTUNE_LOG(warn) << "job " << id << ": " << r.error().message;
                  });
  KTUNE_LOG(info) << "job " << id << " running: compile check, " << c.in_flight << " compiles";
  feed_check(id);
  asio::post(m_io, [this, id] { advance_check(id); });
}

void Scheduler::feed_check(std::int64_t job_id) {
  ActiveCheck& c = *m_checks.at(job_id);
  // Two requests per compile worker keep each busy while its last reply travels.
  const std::size_t limit = 2 * std::max<std::size_t>(1, m_settings.compile_workers);
  const std::size_t total = c.plan.compiles.size();
  const bool closing = c.cancelled || m_stopped;
  while (!closing && c.requests < limit && c.next < total) {
    std::vector<std::size_t> indices(std::min(c.sizer.size(), total - c.next));
    for (std::size_t& index : indices) index = c.next++;
    submit_check(job_id, indices);
  }
  if (closing && c.next < total) {  // never asked for: answered by nobody
    c.in_flight -= total - c.next;
    c.next = total;
  }
}

void Scheduler::submit_check(std::int64_t job_id, const std::vector<std::size_t>& indices) {
  ActiveCheck& c = *m_checks.at(job_id);
  Work work;
  work.op = indices.size() == 1 ? "compile" : k_compile_batch;
  if (indices.size() == 1) {
    work.job = c.plan.compiles[indices.front()];
  } else {
    work.job = nlohmann::json::array();
    for (const std::size_t i : indices) work.job.push_back(c.plan.compiles[i]);
  }
  work.deadline = compile_deadline(c.plan.record);
  work.priority = c.plan.record.options.priority;
  work.owner = job_id;
  work.on_reply = [this, job_id, indices](Result<nlohmann::json> reply, const Delivery&) {
    const auto it = m_checks.find(job_id);
    if (it == m_checks.end()) return;
    ActiveCheck& check = *it->second;
    --check.requests;
    const bool withdrawn = !reply && reply.error().code == ErrorCode::withdrawn;
    const auto whole = [&]() -> const nlohmann::json* {
      if (!reply) return nullptr;
      const auto list = reply->find("outcomes");
      if (list == reply->end() || !list->is_array() || list->size() != indices.size()) return nullptr;
      return &*list;
    };
    std::vector<Result<nlohmann::json>> answers;
    if (withdrawn || indices.size() == 1) {
      answers.push_back(std::move(reply));
    } else if (const nlohmann::json* list = whole()) {
      for (const auto& outcome : *list) answers.emplace_back(outcome);
    } else {
      // A batch that failed as a whole (its deadline, a dead worker) says nothing about any one
      // config: each is compiled again alone.
      KTUNE_LOG(warn) << "job " << job_id << ": a batch of " << indices.size()
                      << " compiles failed as a whole ("
                      << (reply ? "unreadable reply" : reply.error().message)
                      << "); compiling each of its configs alone";
      for (const std::size_t i : indices) submit_check(job_id, {i});
      return;
    }
    for (std::size_t k = 0; k < answers.size(); ++k) {
      --check.in_flight;
      if (answers[k] && !withdrawn) {
        const auto outcome = CompileOutcome::from_json(*answers[k]);
        if (outcome && outcome->status == CandidateStatus::ok && !outcome->cached) {
          check.sizer.observe(static_cast<std::size_t>(outcome->batch_size), outcome->compile_ms);
        }
        if (outcome && !outcome->batch_error.empty()) check.sizer.stop();
      }
      if (!withdrawn && check.plan.on_compiled) check.plan.on_compiled(indices[k], std::move(answers[k]));
    }
    const auto done = static_cast<std::int64_t>(check.plan.compiles.size() - check.in_flight);
    m_writer.submit("job " + std::to_string(job_id) + "'s progress",
                    [job_id, done](Store& store) { return store.update_job_progress(job_id, done, 0); },
                    [job_id](const Result<void>& r) {
                      if (!r) KTUNE_LOG(warn) << "job " << job_id << ": " << r.error().message;
                    });
    feed_check(job_id);
    advance_check(job_id);
  };
  ++c.requests;
  m_workers.submit("", std::move(work));
}

void Scheduler::advance_check(std::int64_t job_id) {
  const auto it = m_checks.find(job_id);
  if (it == m_checks.end() || it->second->in_flight > 0) return;
  auto check = std::move(it->second);
  m_checks.erase(it);
  const JobState state = m_stopped            ? JobState::interrupted
                         : check->cancelled   ? JobState::cancelled
                                              : JobState::done;
  end_job(job_id, state,
          state == JobState::cancelled     ? "cancelled by a client"
          : state == JobState::interrupted ? "ktuned stopped while the job was running"
                                           : "");
  if (check->plan.on_end) check->plan.on_end(state);
  if (m_stopped && m_tunes.empty() && m_checks.empty()) finish_stop();
}

void Scheduler::start_tune(JobPlan plan, std::chrono::steady_clock::time_point queued_at) {
  const auto id = plan.record.id;
  auto active = std::make_unique<ActiveJob>();
  ActiveJob& job = *active;
  job.plan = std::move(plan);
  job.lane = job.plan.record.device;
  m_tunes[id] = std::move(active);
  m_lanes[job.lane] = id;
  job.started = job.mark = std::chrono::steady_clock::now();
  job.timing.queue_ms = ms_since(queued_at);
  const JobRecord& rec = job.plan.record;
  // A batch stays well within its deadline: a batch past it is compiled again config by config.
  job.sizer = BatchSizer(std::min(k_max_batch_ms, compile_deadline(rec).count() / 4.0));

  auto space = search::SearchSpace::from_configs(job.plan.kernel.spec.params, job.plan.configs);
  auto strategy = space ? Result<int>(0) : Result<int>(space.error());
  if (space) {
    job.space = std::move(*space);
    auto made = search::make_strategy(rec.strategy, job.space,
                                      static_cast<std::uint64_t>(rec.seed.value_or(0)), job.plan.prior);
    if (made) {
      job.strategy = std::move(*made);
    } else {
      strategy = made.error();
    }
  }
  if (!strategy) {
    fail(job, "cannot search the configs: " + strategy.error().message);
  } else {
    search::Budget budget;
    if (rec.budget) budget.max_evaluations = static_cast<std::size_t>(*rec.budget);
    if (rec.budget_s) budget.wall_time = std::chrono::milliseconds(std::llround(*rec.budget_s * 1000.0));
    job.stop.emplace(budget, job.space.size(), job.started);
    job.total = static_cast<std::int64_t>(job.stop->evaluation_limit());
    job.batched = rec.strategy != "exhaustive";
    for (const auto& row : job.plan.existing) job.existing[row.config] = &row;
    for (const auto& row : job.plan.reusable) job.reusable[row.config] = &row;
    if (!job.plan.existing.empty()) {
      KTUNE_LOG(info) << "job " << id << " resumes: " << job.plan.existing.size()
                      << " candidate(s) already measured";
    }
  }
  if (!m_workers.has_lane(job.lane)) {
    fail(job, "no bench lane for device " + job.lane + " on this ktuned");
  }
  KTUNE_LOG(info) << "job " << id << " running on lane " << job.lane;
  m_writer.submit("job " + std::to_string(id) + "'s start",
                  [id](Store& store) { return store.set_job_state(id, JobState::running); },
                  [this, id](const Result<void>& r) {
                    if (r) return;
                    if (ActiveJob* running = find_tune(id)) fail(*running, "database: " + r.error().message);
                  });
  advance(id);
}

void Scheduler::submit(ActiveJob& job, const std::string& lane, std::string op,
                       nlohmann::json request, std::chrono::milliseconds deadline,
                       std::function<void(ActiveJob&, Result<nlohmann::json>, const Delivery&)> handle) {
  submit_attempt(job, lane, std::move(op), std::move(request), deadline,
                 std::make_shared<Handler>(std::move(handle)), 1);
}

// A worker killed by SIGKILL that ktuned did not send (the OOM killer, an administrator) is the
// host's doing until it happens again: the request goes once more to a fresh worker, and only a
// second such death is the candidate's (a `crash`, which the quarantine then holds against it).
void Scheduler::submit_attempt(ActiveJob& job, const std::string& lane, std::string op,
                               nlohmann::json request, std::chrono::milliseconds deadline,
                               std::shared_ptr<Handler> handle, int attempt) {
  const std::int64_t id = job.plan.record.id;
  Work work;
  work.op = op;
  work.job = request;
  work.deadline = deadline;
  work.priority = job.plan.record.options.priority;
  work.owner = id;
  work.device = job.lane;
  work.on_reply = [this, id, lane, op, request = std::move(request), deadline, handle,
                   attempt](Result<nlohmann::json> reply, const Delivery& delivery) mutable {
    if (ActiveJob* active = find_tune(id)) {
      account(*active);
      --active->in_flight;
      if (!reply && reply.error().code == ErrorCode::device_busy && !m_stopped && active->error.empty()) {
        // Another ktuned measures on this device: nothing was measured; ask again shortly.
        wait_for_device(*active, lane, std::move(op), std::move(request), deadline,
                        std::move(handle), attempt, reply.error().message);
        return;
      }
      if (!reply && reply.error().code == ErrorCode::worker_killed) {
        if (attempt < k_killed_attempts && !m_stopped) {
          KTUNE_LOG(warn) << "job " << id << ": " << reply.error().message
                          << "; the " << op << " goes to a fresh worker once more";
          ++active->killed_retries;
          submit_attempt(*active, lane, std::move(op), std::move(request), deadline,
                         std::move(handle), attempt + 1);
          return;
        }
        reply = make_error(ErrorCode::worker_crashed, reply.error().message +
                                               "; again in a fresh worker: the failure reproduces");
      }
      (*handle)(*active, std::move(reply), delivery);
    }
    advance(id);
  };
  ++job.in_flight;
  m_workers.submit(lane, std::move(work));
}

void Scheduler::wait_for_device(ActiveJob& job, const std::string& lane, std::string op,
                                nlohmann::json request, std::chrono::milliseconds deadline,
                                std::shared_ptr<Handler> handle, int attempt,
                                const std::string& why) {
  const std::int64_t id = job.plan.record.id;
  const auto now = std::chrono::steady_clock::now();
  if (now - job.busy_logged > std::chrono::seconds(10)) {
    job.busy_logged = now;
    KTUNE_LOG(info) << "job " << id << " waits for its device: " << why;
  }
  // Counted as in flight while it waits, so that the job neither ends nor starts its finals.
  ++job.in_flight;
  auto timer = std::make_shared<asio::steady_timer>(m_io, k_device_busy_retry);
  timer->async_wait([this, id, timer, lane, op = std::move(op), request = std::move(request),
                     deadline, handle = std::move(handle),
                     attempt](const boost::system::error_code&) mutable {
    ActiveJob* active = find_tune(id);
    if (active == nullptr) return;
    --active->in_flight;
    if (m_stopped || !active->error.empty()) {
      advance(id);
      return;
    }
    submit_attempt(*active, lane, std::move(op), std::move(request), deadline, std::move(handle),
                   attempt);
  });
}

// Books the time since the last call to what the job was doing meanwhile.
void Scheduler::account(ActiveJob& job) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - job.mark).count();
  job.mark = now;
  if (job.benchmarking) {
    job.timing.bench_ms += ms;
  } else if (job.compiling > 0 || job.reference == ReferenceState::compiling) {
    job.timing.compile_ms += ms;
  } else {
    job.timing.overhead_ms += ms;
  }
}

// Asks the strategy for candidates while fewer than compile_ahead are compiling or compiled
// ahead of the bench worker. Configs this job or an earlier one already measured are answered
// at once.
void Scheduler::propose(ActiveJob& job) {
  while (job.error.empty() && job.phase == Phase::search) {
    const std::size_t ahead = job.to_compile.size() + job.compiling + job.compiled.size();
    if (m_settings.serial && (ahead > 0 || job.benchmarking)) return;
    // Exhaustive search proposes whole compile batches, as many as compile_ahead has room for.
    const std::size_t per_request = batch_size(job);
    const std::size_t limit = compile_ahead(job);
    if (job.batched ? !job.batch.empty() : ahead + per_request > limit) return;
    if (job.stop->reached(std::chrono::steady_clock::now())) return;
    const std::size_t allowed = job.stop->proposals_left(job.strategy->pending_count());
    if (allowed == 0) return;
    const std::size_t room = m_settings.serial ? 1
                             : job.batched     ? m_settings.search_batch
                                               : (limit - ahead) / per_request * per_request;
    const auto batch = job.strategy->propose(std::min(allowed, room));
    if (batch.empty()) return;
    if (job.batched) job.batch = batch;
    for (const std::size_t index : batch) {
      const std::string text = config_json_text(job.plan.configs[index]);
      if (const auto it = job.existing.find(text); it != job.existing.end()) {
        ResultRecord row = *it->second;
        row.config_index = static_cast<std::int64_t>(index);
        ++job.done;
        learn(job, index, row);
      } else if (const auto reuse = job.reusable.find(text); reuse != job.reusable.end()) {
        ResultRecord row = *reuse->second;
        row.reason = "reused from job " + std::to_string(row.job_id) +
                     (row.reason.empty() ? "" : ": " + row.reason);
        row.remeasured = false; // `tied` stays: the winning group of the job that measured it
        row.created_at = 0;
        record(job, index, std::move(row));
      } else {
        job.to_compile.push_back(index);
      }
    }
  }
}

bool Scheduler::search_over(const ActiveJob& job) const {
  if (job.strategy->pending_count() > 0 || !job.to_compile.empty() || job.compiling > 0 ||
      !job.compiled.empty() || job.benchmarking) {
    return false;
  }
  return job.strategy->exhausted() || job.stop->reached(std::chrono::steady_clock::now()) ||
         job.stop->proposals_left(0) == 0;
}

void Scheduler::advance(std::int64_t job_id) {
  ActiveJob* active = find_tune(job_id);
  if (!active) return;
  ActiveJob& job = *active;
  if (m_stopped) {
    if (job.in_flight > 0) return;
    m_lanes.erase(job.lane);
    m_tunes.erase(job_id);
    end_job(job_id, JobState::interrupted, "ktuned stopped while the job was running");
    if (m_tunes.empty() && m_checks.empty()) finish_stop();
    return;
  }
  account(job);

  if (job.error.empty() && job.reference == ReferenceState::pending) start_reference(job);
  if (job.error.empty() && job.reference == ReferenceState::ready) {
    propose(job);
    // A strategy's batch is spread over the compile workers first (nothing more comes until its
    // results are in); exhaustive search keeps compile_ahead filled in whole batches.
    const std::size_t workers = std::max<std::size_t>(1, m_settings.compile_workers);
    const std::size_t spread = (job.to_compile.size() + workers - 1) / workers;
    const std::size_t per_request = job.batched ? std::min(batch_size(job), spread) : batch_size(job);
    while (job.error.empty() && !job.to_compile.empty()) {
      const auto end = job.to_compile.begin() +
                       static_cast<std::ptrdiff_t>(std::min(per_request, job.to_compile.size()));
      const std::vector<std::size_t> indices(job.to_compile.begin(), end);
      job.to_compile.erase(job.to_compile.begin(), end);
      start_compile(job, indices);
    }
    std::deque<Compiled>& waiting = job.phase == Phase::search ? job.compiled : job.final_queue;
    while (job.error.empty() && !job.benchmarking && !waiting.empty()) {
      Compiled candidate = std::move(waiting.front());
      waiting.pop_front();
      start_bench(job, std::move(candidate));
    }
    if (job.error.empty() && job.phase == Phase::search && search_over(job)) {
      start_finals(job);
      if (!job.final_queue.empty()) {
        advance(job_id);
        return;
      }
    }
  }

  if (!job.error.empty()) {
    if (job.in_flight > 0) return; // let the replies land before the lane takes the next job
    end_job(job_id, job.cancelled ? JobState::cancelled : JobState::failed, job.error);
  } else if (job.reference == ReferenceState::ready && job.phase == Phase::finals &&
             job.final_queue.empty() && !job.benchmarking) {
    finish(job);
  } else {
    return; // replies in flight will call advance() again
  }
  m_lanes.erase(job.lane);
  m_tunes.erase(job_id);
  start_ready();
}

// Picks the finalists, switches the job to the finals and queues their first round. Fewer than
// two finalists: no finals.
void Scheduler::start_finals(ActiveJob& job) {
  job.phase = Phase::finals;
  const MeasureSettings& measure = m_settings.measure;
  // A best reused from an earlier job has no artifact here: its time cannot be paired with the
  // others', so there are no finals and the medians decide.
  if (!job.best || job.artifacts.count(static_cast<std::size_t>(job.best->config_index)) == 0) {
    return;
  }
  std::vector<const ResultRecord*> near;
  for (const auto& [index, row] : job.ok_rows) {
    if (row.pruned || job.artifacts.count(index) == 0) continue; // not measured in this job
    if (row.stats.median_ms > job.best->stats.median_ms * (1.0 + measure.final_margin)) continue;
    near.push_back(&row);
  }
  std::sort(near.begin(), near.end(), [](const ResultRecord* a, const ResultRecord* b) {
    return better_result(*a, *b);
  });
  near.resize(std::min(near.size(), static_cast<std::size_t>(std::max(0, measure.finalists))));
  if (near.size() < 2) return;
  for (const ResultRecord* row : near) {
    job.finalists.push_back(job.artifacts.at(static_cast<std::size_t>(row->config_index)));
  }
  std::sort(job.finalists.begin(), job.finalists.end(),
            [](const Compiled& a, const Compiled& b) { return a.index < b.index; });
  KTUNE_LOG(info) << "job " << job.plan.record.id << ": finals of " << job.finalists.size()
                  << " candidates in " << measure.final_rounds << " rounds";
  queue_round(job);
}

// Queues the next round of the finals: every finalist once, starting one later than the last
// round did, so that none is always measured first (after a pause) or last.
void Scheduler::queue_round(ActiveJob& job) {
  const std::size_t n = job.finalists.size();
  const auto first = static_cast<std::size_t>(job.rounds_started) % n;
  for (std::size_t i = 0; i < n; ++i) job.final_queue.push_back(job.finalists[(first + i) % n]);
  ++job.rounds_started;
}

void Scheduler::start_reference(ActiveJob& job) {
  const auto& plan = job.plan;
  const Config& reference = plan.kernel.spec.default_config;
  const ReferenceKind kind = plan.kernel.spec.check.reference;
  if (kind == ReferenceKind::none || kind == ReferenceKind::files) {  // files: read by the runner
    job.reference = ReferenceState::ready;
    return;
  }
  if (kind == ReferenceKind::default_config && reference.empty()) {
    KTUNE_LOG(warn) << "job " << plan.record.id << ": " << plan.record.kernel
                    << " has no [default] config; candidates run without an output check";
    job.reference = ReferenceState::ready;
    return;
  }
  auto compile_job =
      kind == ReferenceKind::function
          ? make_reference_compile_job(plan.kernel, plan.record.dtype, m_settings.cache_dir)
          : make_compile_job(plan.kernel, reference, plan.record.dtype, m_settings.cache_dir);
  if (compile_job) {
    if (auto r = target_cuda_device(m_store, plan.record, *compile_job); !r) compile_job = r.error();
  }
  if (!compile_job) {
    fail(job, reference_name(plan.kernel) + ": " + compile_job.error().message);
    return;
  }
  job.reference = ReferenceState::compiling;
  KTUNE_LOG(debug) << "job " << plan.record.id << ": compiling " << reference_name(plan.kernel);
  submit(job, "", "compile", compile_job->to_json(), compile_deadline(plan.record),
         [this](ActiveJob& j, Result<nlohmann::json> reply, const Delivery&) {
           on_reference_compiled(j, std::move(reply));
         });
}

void Scheduler::on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  const std::string name = reference_name(job.plan.kernel);
  if (!reply) {
    fail(job, name + ": " + reply.error().message);
    return;
  }
  auto outcome = CompileOutcome::from_json(*reply);
  if (!outcome) {
    fail(job, name + ": unreadable compile outcome: " + outcome.error().message);
    return;
  }
  if (!outcome->infra.empty()) {
    fail(job, name + ": the host failed, not the kernel: " + outcome->infra);
    return;
  }
  if (outcome->status != CandidateStatus::ok) {
    fail(job, name + " failed to compile (" + std::string(to_string(outcome->status)) +
                  "): " + first_error_line(outcome->log));
    return;
  }
  if (!outcome->repaired.empty()) {
    KTUNE_LOG(warn) << "job " << job.plan.record.id << ": compiled " << name << " again: "
                    << outcome->repaired;
  }
  KTUNE_LOG(info) << "job " << job.plan.record.id << ": " << name << " compiled in "
                  << outcome->compile_ms << " ms" << (outcome->cached ? " (cached)" : "");
  ++(outcome->cached ? m_counters.compile_cache_hits : m_counters.compile_cache_misses);
  if (!outcome->cached) ++job.timing.compiles;
  learn_batching(job, {*outcome});
  job.reference_path = outcome->artifact_path;
  job.reference_entry = outcome->entry_symbol;
  job.reference = ReferenceState::ready;
}

std::size_t Scheduler::batch_size(const ActiveJob& job) const {
  if (m_settings.serial) return 1;  // one compiler process per config
  const std::size_t size = job.sizer.size();
  return m_settings.compile_ahead > 0 ? std::min(size, m_settings.compile_ahead) : size;
}

std::size_t Scheduler::compile_ahead(const ActiveJob& job) const {
  if (m_settings.compile_ahead > 0) return m_settings.compile_ahead;
  // The bench CPU's borrowed worker (WorkerPool) is one more compile worker at times: a batch
  // it holds, stopped while the lane measures, must not keep the others idle.
  return 2 * (std::max<std::size_t>(1, m_settings.compile_workers) + 1) * batch_size(job);
}

void Scheduler::start_compile(ActiveJob& job, const std::vector<std::size_t>& indices) {
  const auto& plan = job.plan;
  std::vector<std::size_t> sent;
  nlohmann::json jobs = nlohmann::json::array();
  for (const std::size_t index : indices) {
    auto compile_job = make_compile_job(plan.kernel, plan.configs[index], plan.record.dtype,
                                        m_settings.cache_dir);
    if (compile_job) {
      if (auto r = target_cuda_device(m_store, plan.record, *compile_job); !r) compile_job = r.error();
    }
    if (!compile_job) {
      record(job, index, failed_result(CandidateStatus::compile_error, compile_job.error().message));
      continue;
    }
    jobs.push_back(compile_job->to_json());
    sent.push_back(index);
  }
  if (sent.empty()) return;
  job.compiling += sent.size();
  if (sent.size() == 1) {
    submit(job, "", "compile", std::move(jobs.front()), compile_deadline(plan.record),
           [this, index = sent.front()](ActiveJob& j, Result<nlohmann::json> reply,
                                        const Delivery& delivery) {
             --j.compiling;
             on_compiled(j, index, std::move(reply), delivery);
           });
    return;
  }
  // One deadline for the batch, as for one config: a batch that passes it (a config that
  // compiles forever) is compiled again config by config, each with the whole deadline.
  submit(job, "", k_compile_batch, std::move(jobs), compile_deadline(plan.record),
         [this, sent](ActiveJob& j, Result<nlohmann::json> reply, const Delivery& delivery) {
           j.compiling -= sent.size();
           on_batch_compiled(j, sent, std::move(reply), delivery);
         });
}

namespace {

// The outcomes of a compile_batch reply, one per config asked for.
Result<std::vector<CompileOutcome>> batch_outcomes(const nlohmann::json& reply, std::size_t configs) {
  const auto list = reply.find("outcomes");
  if (list == reply.end() || !list->is_array() || list->size() != configs) {
    return make_error(ErrorCode::bad_reply, "expected {\"outcomes\": [..]} with " + std::to_string(configs) +
                                       " outcomes, found " + reply.dump().substr(0, 200));
  }
  std::vector<CompileOutcome> outcomes;
  for (const auto& item : *list) {
    auto outcome = CompileOutcome::from_json(item);
    if (!outcome) return outcome.error();
    outcomes.push_back(std::move(*outcome));
  }
  return outcomes;
}

// Takes the time a compile request was stopped on the bench CPU (WorkerPool: borrowed) out of
// its outcomes' compile times, in proportion to them: the worker measured wall time.
void unpause(std::vector<CompileOutcome>& outcomes, double paused_ms) {
  double total_ms = 0;
  for (const CompileOutcome& outcome : outcomes) total_ms += outcome.compile_ms;
  if (paused_ms <= 0 || total_ms <= 0) return;
  const double kept = std::max(0.0, total_ms - paused_ms) / total_ms;
  for (CompileOutcome& outcome : outcomes) outcome.compile_ms *= kept;
}

} // namespace

void Scheduler::on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply,
                            const Delivery& delivery) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  job.timing.compile_sum_ms += delivery.request_ms - delivery.paused_ms;
  const std::string& stderr_tail = delivery.stderr_tail;
  if (!reply) {
    record(job, index,
           worker_failure(reply.error(), CandidateStatus::compile_error,
                          CandidateStatus::compile_timeout, stderr_tail));
    return;
  }
  auto outcome = CompileOutcome::from_json(*reply);
  if (!outcome) {
    record(job, index,
           failed_result(CandidateStatus::compile_error,
                         "unreadable compile outcome: " + outcome.error().message));
    return;
  }
  std::vector<CompileOutcome> outcomes{std::move(*outcome)};
  unpause(outcomes, delivery.paused_ms);
  on_outcome(job, index, outcomes.front());
  learn_batching(job, outcomes);
}

// A batch that failed as a whole (its deadline, a dead worker, an unreadable reply) says nothing
// about any one config: each is compiled again alone, and only those results count.
void Scheduler::on_batch_compiled(ActiveJob& job, const std::vector<std::size_t>& indices,
                                  Result<nlohmann::json> reply, const Delivery& delivery) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  job.timing.compile_sum_ms += delivery.request_ms - delivery.paused_ms;
  auto outcomes = reply ? batch_outcomes(*reply, indices.size())
                        : Result<std::vector<CompileOutcome>>(reply.error());
  if (!outcomes) {
    if (!job.error.empty()) return;
    KTUNE_LOG(warn) << "job " << job.plan.record.id << ": a batch of " << indices.size()
                    << " compiles failed as a whole (" << outcomes.error().message
                    << "); compiling each of its configs alone";
    for (const std::size_t index : indices) start_compile(job, {index});
    return;
  }
  unpause(*outcomes, delivery.paused_ms);
  for (std::size_t i = 0; i < indices.size(); ++i) on_outcome(job, indices[i], (*outcomes)[i]);
  learn_batching(job, *outcomes);
}

void Scheduler::on_outcome(ActiveJob& job, std::size_t index, const CompileOutcome& outcome) {
  if (!outcome.cached) ++job.timing.compiles;
  if (!outcome.repaired.empty()) {
    KTUNE_LOG(warn) << "job " << job.plan.record.id << ": compiled "
                    << config_to_string(job.plan.configs[index]) << " again: " << outcome.repaired;
  }
  ++(outcome.cached ? m_counters.compile_cache_hits : m_counters.compile_cache_misses);
  if (!outcome.infra.empty()) {
    // The host's failure, not the candidate's: never recorded (a later job compiles it again).
    // Tried once more at once, alone; a kill that happens again is the candidate's (it is what
    // needs the memory); any other host failure that persists ends the job with its cause.
    const std::string name = config_to_string(job.plan.configs[index]);
    if (++job.infra_attempts[index] < k_infra_attempts) {
      KTUNE_LOG(warn) << "job " << job.plan.record.id << ": " << name << ": " << outcome.infra
                      << "; compiling it again";
      start_compile(job, {index});
      return;
    }
    if (outcome.infra.find("SIGKILL") == std::string::npos) {
      fail(job, "the host failed, not the candidates: " + outcome.infra + " (compiling " + name +
                    ", twice); the configs not measured are not recorded and run in a later job");
      return;
    }
  }
  if (outcome.status != CandidateStatus::ok) {
    record(job, index,
           failed_result(outcome.status, first_error_line(outcome.log), outcome.log,
                         outcome.compile_ms));
    return;
  }
  job.compiled.push_back(Compiled{index, outcome.artifact_path, outcome.entry_symbol,
                                  outcome.compile_ms, outcome.registers, outcome.spills,
                                  outcome.shared_bytes});
}

void Scheduler::learn_batching(ActiveJob& job, const std::vector<CompileOutcome>& outcomes) {
  const std::int64_t id = job.plan.record.id;
  bool batched = false;
  for (const CompileOutcome& outcome : outcomes) {
    batched = batched || outcome.batch_size > 1;
    if (outcome.status == CandidateStatus::ok && !outcome.cached) {
      job.sizer.observe(static_cast<std::size_t>(outcome.batch_size), outcome.compile_ms);
    }
    if (!outcome.batch_error.empty() && !job.sizer.stopped()) {
      job.sizer.stop();
      KTUNE_LOG(info) << "job " << id << ": " << job.plan.record.kernel
                      << " compiles one config at a time from now on: " << outcome.batch_error;
    }
  }
  if (batched) ++m_counters.compile_batches;
  const std::size_t size = batch_size(job);
  if (size == job.logged_batch_size || job.sizer.stopped()) return;
  job.logged_batch_size = size;
  std::ostringstream measured;
  for (const auto& [configs, ms] : job.sizer.measured_ms()) {
    measured << (measured.tellp() > 0 ? ", " : "") << std::lround(ms) << " ms "
             << (configs == 1 ? std::string("alone") : "in batches of " + std::to_string(configs));
  }
  KTUNE_LOG(info) << "job " << id << ": compiles up to " << size
                  << " configs per request; measured per config: " << measured.str();
}

void Scheduler::start_bench(ActiveJob& job, Compiled candidate) {
  const auto& plan = job.plan;
  const bool again = job.phase == Phase::finals;
  MeasureSettings measure = m_settings.measure;
  if (again) {
    // A round of the finals takes its share of one candidate's measuring time (the least and the
    // most), and its share of the precision: the rounds are the replicates judge_finals
    // compares, so the median of one round needs to be known to within target_error x
    // sqrt(final_rounds) for their pooled median to be known to within target_error.
    const int rounds = std::max(1, measure.final_rounds);
    measure.min_time_s /= rounds;
    measure.max_time_s = std::max(measure.min_time_s, measure.max_time_s / rounds);
    measure.target_error *= std::sqrt(static_cast<double>(rounds));
  }
  auto bench_job = make_bench_job(plan.kernel.spec, plan.shape, plan.configs[candidate.index],
                                  plan.record.dtype, candidate.artifact_path, job.reference_path,
                                  measure);
  if (bench_job) {
    use_compiled_entries(*bench_job, candidate.entry_symbol, job.reference_entry);
    target_cuda_device(plan.record, *bench_job);
  }
  if (!bench_job) {
    record(job, candidate.index,
           failed_result(CandidateStatus::invalid_config, bench_job.error().message, {},
                         candidate.compile_ms));
    return;
  }
  // A sure finalist needs no precise time before the finals: only while the job will hold them
  // (a best measured in this job, so that its time can be paired with the others').
  const MeasureSettings& rules = m_settings.measure;
  if (!again && job.best && rules.finalists >= 2 &&
      job.artifacts.count(static_cast<std::size_t>(job.best->config_index)) != 0) {
    bench_job->finalist_below_ms = (1.0 + rules.final_margin) * job.best->stats.median_ms;
  }
  if (!again && job.best && rules.prune_factor > 0) {
    bench_job->prune_above_ms = rules.prune_factor * job.best->stats.median_ms;
    if (rules.race_margin > 0) {
      bench_job->race_above_ms = (1.0 + rules.race_margin) * job.best->stats.median_ms;
    }
  }
  job.benchmarking = true;
  submit(job, job.lane, "bench", bench_job->to_json(),
         bench_deadline(m_settings, plan.record.options.bench_timeout_s),
         [this, candidate, again](ActiveJob& j, Result<nlohmann::json> reply,
                                  const Delivery& delivery) {
           j.benchmarking = false;
           if (!reply && reply.error().code == ErrorCode::withdrawn) return; // cancelled
           j.timing.bench_sum_ms += delivery.request_ms;
           if (again) {
             on_final_measured(j, candidate, std::move(reply));
           } else {
             on_benched(j, candidate, std::move(reply), delivery.stderr_tail);
           }
         });
}

void Scheduler::on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply,
                           const std::string& stderr_tail) {
  if (!reply) {
    record(job, candidate.index,
           worker_failure(reply.error(), CandidateStatus::runtime_error, CandidateStatus::timeout,
                          stderr_tail, candidate.compile_ms));
    return;
  }
  auto outcome = BenchOutcome::from_json(*reply);
  if (!outcome) {
    record(job, candidate.index,
           failed_result(CandidateStatus::runtime_error,
                         "unreadable bench outcome: " + outcome.error().message, {},
                         candidate.compile_ms));
    return;
  }
  if (!outcome->infra.empty()) {
    on_bench_infra(job, candidate, outcome->infra, outcome->infra_artifact);
    return;
  }
  ResultRecord r;
  r.status = outcome->status;
  r.reason = outcome->reason;
  r.stats = outcome->stats;
  r.samples_ms = std::move(outcome->samples_ms);
  r.gflops = outcome->gflops;
  r.gbps = outcome->gbps;
  r.compile_ms = candidate.compile_ms;
  r.registers = outcome->registers >= 0 ? outcome->registers : candidate.registers;
  r.spill_bytes = outcome->spills >= 0 ? outcome->spills : candidate.spills;
  r.shared_bytes = outcome->shared_bytes >= 0 ? outcome->shared_bytes : candidate.shared_bytes;
  r.pruned = outcome->pruned;
  if (!outcome->conditions.empty()) r.conditions = outcome->conditions.dump();
  r.unlocked = outcome->unlocked;
  if (!r.unlocked.empty()) m_workers.note_unlocked(job.lane, r.unlocked);
  job.retaken += outcome->retaken;
  if (r.status != CandidateStatus::ok) r.log = stderr_tail;
  if (r.status == CandidateStatus::ok) job.artifacts[candidate.index] = candidate;
  record(job, candidate.index, std::move(r));
}

void Scheduler::on_bench_infra(ActiveJob& job, const Compiled& candidate, const std::string& infra,
                               const std::string& artifact) {
  const std::string name = config_to_string(job.plan.configs[candidate.index]);
  if (++job.infra_attempts[candidate.index] >= k_infra_attempts) {
    fail(job, "the host failed, not the candidates: " + infra + " (measuring " + name +
                  ", twice); the configs not measured are not recorded and run in a later job");
    return;
  }
  KTUNE_LOG(warn) << "job " << job.plan.record.id << ": " << name << ": " << infra
                  << "; compiling it again";
  if (!artifact.empty() && artifact == job.reference_path) job.reference = ReferenceState::pending;
  job.to_compile.push_back(candidate.index);
}

// One finalist measured in one round. A finalist that fails a round leaves the finals (its first
// measurement stands); the others go on. The last reply of a round queues the next.
void Scheduler::on_final_measured(ActiveJob& job, const Compiled& candidate,
                                  Result<nlohmann::json> reply) {
  auto outcome = reply ? BenchOutcome::from_json(*reply) : Result<BenchOutcome>(reply.error());
  if (outcome) job.retaken += outcome->retaken;
  if (outcome && !outcome->unlocked.empty()) {
    m_workers.note_unlocked(job.lane, outcome->unlocked);
    job.ok_rows.at(candidate.index).unlocked = outcome->unlocked;
  }
  if (outcome && outcome->status == CandidateStatus::ok && outcome->stats.median_ms > 0) {
    job.final_stats[candidate.index].push_back(outcome->stats);
    auto& kept = job.final_samples[candidate.index];
    kept.insert(kept.end(), outcome->samples_ms.begin(), outcome->samples_ms.end());
  } else {
    KTUNE_LOG(warn) << "job " << job.plan.record.id << ": "
                    << config_to_string(job.plan.configs[candidate.index])
                    << " failed in the finals and leaves them; its first measurement stands ("
                    << (!outcome ? outcome.error().message
                                 : outcome->reason.empty() ? std::string("no time")
                                                           : outcome->reason)
                    << ")";
    const auto same = [&](const Compiled& c) { return c.index == candidate.index; };
    std::erase_if(job.finalists, same);
    std::erase_if(job.final_queue, same);
    job.final_stats.erase(candidate.index);
    job.final_samples.erase(candidate.index);
  }
  if (job.final_queue.empty() && job.finalists.size() >= 2 &&
      job.rounds_started < m_settings.measure.final_rounds) {
    race_finals(job);
    queue_round(job);
  }
}

// After each round from the k_race_finals_after-th on, the finalists slower than the best at 95%
// confidence by more than tie_margin (judge_finals' ratio_low above 1 + tie_margin: they can no
// longer tie it) leave the finals, slowest first, keeping at least two. Their rounds so far are
// pooled into their rows like the others'. With five rounds this spares the last two rounds of
// every clear loser.
void Scheduler::race_finals(ActiveJob& job) {
  if (job.rounds_started < k_race_finals_after || job.finalists.size() <= 2) return;
  const double tie_margin = m_settings.measure.tie_margin;
  const FinalsVerdict verdict = judge_rounds(job);
  std::vector<std::pair<double, std::size_t>> losers; // (ratio_low, index in finalists)
  for (std::size_t i = 0; i < job.finalists.size(); ++i) {
    if (verdict.ratio_low[i] > 1.0 + tie_margin) losers.emplace_back(verdict.ratio_low[i], i);
  }
  std::sort(losers.rbegin(), losers.rend());
  if (losers.size() > job.finalists.size() - 2) losers.resize(job.finalists.size() - 2);
  std::vector<bool> out(job.finalists.size(), false);
  for (const auto& loser : losers) out[loser.second] = true;
  std::vector<Compiled> kept;
  for (std::size_t i = 0; i < job.finalists.size(); ++i) {
    (out[i] ? job.raced_out : kept).push_back(job.finalists[i]);
  }
  if (!losers.empty()) {
    KTUNE_LOG(debug) << "job " << job.plan.record.id << ": " << losers.size()
                     << " finalist(s) raced out after round " << job.rounds_started << ", "
                     << kept.size() << " left";
  }
  job.finalists = std::move(kept);
}

FinalsVerdict Scheduler::judge_rounds(const ActiveJob& job) const {
  std::vector<std::vector<double>> round_ms;
  for (const Compiled& f : job.finalists) {
    round_ms.emplace_back();
    for (const SampleStats& s : job.final_stats.at(f.index)) round_ms.back().push_back(s.median_ms);
  }
  return judge_finals(round_ms, m_settings.measure.tie_margin);
}

// The winning group as config indices: the best and its ties. After finals: the best of the
// finals and the finalists judge_finals ties with it (a row outside the finals never wins: its
// time was taken at another moment). Without finals: the fastest row and those within
// tie_margin of its median.
std::vector<std::size_t> Scheduler::tie_set(const ActiveJob& job,
                                            const std::vector<ResultRecord>& rows) const {
  std::vector<std::size_t> ties;
  if (job.finalists.size() >= 2) {
    const FinalsVerdict verdict = judge_rounds(job);
    for (std::size_t i = 0; i < job.finalists.size(); ++i) {
      KTUNE_LOG(debug) << "job " << job.plan.record.id << " finals: "
                       << config_to_string(job.plan.configs[job.finalists[i].index]) << " x"
                       << verdict.ratio[i] << " (95% >= x" << verdict.ratio_low[i] << ")"
                       << (verdict.tied[i] ? " tied" : "");
      if (verdict.tied[i]) ties.push_back(job.finalists[i].index);
    }
    return ties;
  }
  // Every row reused from an earlier job that judged its ties: that judgement stands, so a
  // re-run of a finished key names the same winner.
  if (job.artifacts.empty()) {
    for (const auto& row : rows) {
      if (row.status == CandidateStatus::ok && row.tied) {
        ties.push_back(static_cast<std::size_t>(row.config_index));
      }
    }
    if (!ties.empty()) return ties;
  }
  const ResultRecord& best = *fastest_result(rows);
  for (const auto& row : rows) {
    if (row.status == CandidateStatus::ok && near_tie(row, best, m_settings.measure.tie_margin)) {
      ties.push_back(static_cast<std::size_t>(row.config_index));
    }
  }
  return ties;
}

// Tells the strategy and the stop condition about a result, and keeps the job's tallies.
void Scheduler::learn(ActiveJob& job, std::size_t index, const ResultRecord& result) {
  const bool ok = result.status == CandidateStatus::ok;
  const std::optional<double> time =
      ok && result.stats.median_ms > 0 ? std::optional<double>(result.stats.median_ms) : std::nullopt;
  auto observe = [&](std::size_t config, std::optional<double> t) {
    if (auto r = job.strategy->observe(config, t); !r) {
      KTUNE_LOG(error) << "job " << job.plan.record.id << ": strategy refused a result: "
                       << r.error().message;
    }
    job.stop->record(t);
  };
  if (!job.batched) {
    observe(index, time);
  } else {
    job.batch_results[index] = time;
    if (job.batch_results.size() == job.batch.size()) {
      for (const std::size_t config : job.batch) observe(config, job.batch_results.at(config));
      job.batch.clear();
      job.batch_results.clear();
    }
  }
  if (ok) {
    job.ok_rows[index] = result;
    // A pruned median is of a few samples only: it never sets the pace.
    if (!result.pruned && (!job.best || better_result(result, *job.best))) {
      job.best = result;
      job.best_at = job.done;
    }
  } else {
    ++job.failed;
    ++job.failures[result.status];
  }
}

void Scheduler::record(ActiveJob& job, std::size_t index, ResultRecord result) {
  const JobRecord& rec = job.plan.record;
  result.job_id = rec.id;
  result.kernel = rec.kernel;
  result.source_hash = rec.source_hash;
  result.shape = rec.shape;
  result.dtype = rec.dtype;
  result.fingerprint = rec.fingerprint;
  result.config = config_json_text(job.plan.configs[index]);
  result.config_index = static_cast<std::int64_t>(index);

  ++job.done;
  ++m_counters.candidates[std::string(to_string(result.status))];
  const auto now = std::chrono::steady_clock::now();
  m_recent_results.push_back(now);
  while (m_recent_results.size() > 100'000 || now - m_recent_results.front() > std::chrono::minutes(1)) {
    m_recent_results.pop_front();
  }
  if (result.status != CandidateStatus::ok) {
    m_recent_failures.push_back(RecentFailure{rec.id, rec.kernel, rec.shape, rec.device,
                                              result.config, std::string(to_string(result.status)),
                                              result.reason, std::chrono::system_clock::now()});
    if (m_recent_failures.size() > k_recent_failures) m_recent_failures.pop_front();
  }
  learn(job, index, result);
  KTUNE_LOG(debug) << "job " << rec.id << " [" << job.done << "/" << job.total << "] "
                   << config_to_string(job.plan.configs[index]) << ": "
                   << to_string(result.status)
                   << (result.status == CandidateStatus::ok
                           ? " median " + std::to_string(result.stats.median_ms) + " ms" +
                                 (result.pruned ? " (pruned)" : "")
                           : " " + result.reason);
  // The row and the job's progress in one commit: durable (stored, or in the spill journal while
  // the database waits) before anyone hears of it. The event is the job as it is now.
  const std::int64_t job_id = rec.id;
  nlohmann::json event = m_watchers.count(job_id) != 0 ? progress(job, result) : nlohmann::json();
  const std::string name = config_to_string(job.plan.configs[index]);
  m_writer.submit_result(
      std::move(result), job.done, job.failed,
      [this, job_id, name, event = std::move(event)](const Result<void>& stored) {
        if (!stored) {
          if (ActiveJob* running = find_tune(job_id)) {
            fail(*running, "database: cannot store the result of " + name + ": " +
                               stored.error().message);
          }
          return;
        }
        const auto watchers = m_watchers.find(job_id);
        if (watchers == m_watchers.end() || event.is_null()) return;
        for (const auto& watcher : std::vector(watchers->second)) {
          if (watcher.on_progress) watcher.on_progress(event);
        }
      });
}

nlohmann::json Scheduler::progress(const ActiveJob& job, const ResultRecord& last) const {
  nlohmann::json event = {
      {"job", job.plan.record.id},
      {"done", job.done},
      {"total", job.total},
      {"failed", job.failed},
      {"params", param_order(last.config)},
      {"best_config", nullptr},
      {"best_median_ms", nullptr},
      {"best_gflops", nullptr},
      {"best_at", nullptr},
      {"last",
       {{"config", stored_config_to_json(last.config)},
        {"config_index", last.config_index},
        {"status", std::string(to_string(last.status))},
        {"reason", last.reason},
        {"median_ms", last.stats.median_ms}}},
  };
  if (job.best) {
    event["best_config"] = stored_config_to_json(job.best->config);
    event["best_median_ms"] = job.best->stats.median_ms;
    event["best_gflops"] = job.best->gflops;
    event["best_at"] = job.best_at;
  }
  return event;
}

// What the job's search learnt from and how it went (JobSearch): the prior it was given, whether
// the strategy still trusted it at the end, and the rank among the job's successes of the config
// the prior ranked first (1: the prior's favourite won; null: it failed or was not evaluated).
JobSearch Scheduler::search_record(const ActiveJob& job) {
  JobSearch out;
  out.best_at = job.best_at;
  nlohmann::json prior = prior_summary(job.plan.prior_sources);
  if (prior.is_null()) return out;
  const auto use = job.strategy ? job.strategy->prior_use() : std::nullopt;
  prior["trusted"] = use ? nlohmann::json(use->trusted) : nlohmann::json(nullptr);
  prior["favourite_rank"] = nullptr;
  if (use && use->favourite) {
    const auto favourite = job.ok_rows.find(*use->favourite);
    if (favourite != job.ok_rows.end()) {
      std::int64_t rank = 1;
      for (const auto& [index, row] : job.ok_rows) {
        if (row.stats.median_ms < favourite->second.stats.median_ms) ++rank;
      }
      prior["favourite_rank"] = rank;
    }
  }
  out.prior = prior.dump();
  return out;
}

void Scheduler::finish(ActiveJob& job) {
  const JobRecord& rec = job.plan.record;
  account(job);
  if (job.ok_rows.empty()) {
    m_writer.submit("job " + std::to_string(rec.id) + "'s timing",
                    [id = rec.id, timing = job.timing, search = search_record(job)](Store& store) -> Result<void> {
                      if (auto r = store.set_job_timing(id, timing); !r) return r;
                      return store.set_job_search(id, search);
                    },
                    [id = rec.id](const Result<void>& r) {
                      if (!r) KTUNE_LOG(warn) << "job " << id << ": cannot store its timing: " << r.error().message;
                    });
    end_job(rec.id, JobState::failed,
            "no candidate succeeded (" + describe_failures(job.failures) + ")");
    return;
  }
  // The finalists' rounds pooled into their rows (those raced out of the finals too): the row
  // keeps the samples of its rounds and the figures of those samples, one record of the
  // measurement that decided; then the ties of the best, the preferred tie.
  std::vector<Compiled> measured_in_finals = job.finalists;
  measured_in_finals.insert(measured_in_finals.end(), job.raced_out.begin(), job.raced_out.end());
  if (job.finalists.size() >= 2) {
    for (const Compiled& f : measured_in_finals) {
      ResultRecord& row = job.ok_rows.at(f.index);
      std::vector<float>& samples = job.final_samples[f.index];
      // A worker that sends no samples (an older one) leaves the rounds' figures pooled.
      const SampleStats pooled =
          samples.empty() ? pool_rounds(job.final_stats.at(f.index))
                          : summarize(std::vector<double>(samples.begin(), samples.end()));
      const double speedup = row.stats.median_ms / pooled.median_ms;
      row.stats = pooled;
      row.samples_ms = std::move(samples);
      row.gflops *= speedup;
      row.gbps *= speedup;
      row.remeasured = true;
    }
  }
  std::vector<ResultRecord> rows;
  rows.reserve(job.ok_rows.size());
  for (auto& [index, row] : job.ok_rows) rows.push_back(row);
  const std::vector<std::size_t> ties = tie_set(job, rows);
  std::vector<std::int64_t> tie_indices;
  for (auto& row : rows) {
    row.tied = std::find(ties.begin(), ties.end(), static_cast<std::size_t>(row.config_index)) !=
               ties.end();
    if (row.tied) tie_indices.push_back(row.config_index);
  }
  // The incumbent: the key's winner before this job. Kept when it is in the winning group.
  auto incumbent = m_store.find_winner(rec.kernel, rec.source_hash, rec.shape, rec.dtype, rec.fingerprint);
  if (!incumbent) {
    KTUNE_LOG(warn) << "job " << rec.id << ": cannot read the incumbent winner: "
                    << incumbent.error().message;
  }
  const std::string incumbent_config =
      incumbent && incumbent->has_value() ? (*incumbent)->config : std::string();
  const ResultRecord* chosen = pick_winner(rows, incumbent_config);
  WinnerRecord winner;
  winner.kernel = rec.kernel;
  winner.source_hash = rec.source_hash;
  winner.shape = rec.shape;
  winner.dtype = rec.dtype;
  winner.fingerprint = rec.fingerprint;
  winner.job_id = chosen->job_id;
  winner.config = chosen->config;
  winner.median_ms = chosen->stats.median_ms;
  winner.gflops = chosen->gflops;
  // The job's end in one commit: timing, the finals' measurements, the ties, the winner, done.
  // Rows are named by config index (their ids are the store's: a row may still wait in the writer).
  std::vector<std::pair<std::int64_t, Remeasurement>> remeasured;  // by config index
  for (const Compiled& f : job.finalists.size() >= 2 ? measured_in_finals : std::vector<Compiled>{}) {
    const ResultRecord& row = job.ok_rows.at(f.index);
    remeasured.emplace_back(row.config_index,
                            Remeasurement{row.stats, row.samples_ms, row.gflops, row.gbps, row.unlocked});
  }
  std::ostringstream summary;
  summary << "job " << rec.id << " done in " << log::elapsed_ms(job.started)
          << " ms: winner " << winner.config << " median " << winner.median_ms << " ms"
          << (tie_indices.size() > 1 ? " (" + std::to_string(tie_indices.size()) + "-way tie" +
                                           (chosen->config == incumbent_config
                                                ? ", the incumbent kept)" : ")")
                                     : "")
          << ", " << job.failed << " of " << job.done << " candidates failed"
          << "; best found at candidate " << job.best_at
          << (job.plan.prior.empty() ? std::string(", no prior")
                                     : ", prior of " + std::to_string(job.plan.prior.size()) +
                                           " earlier key(s)")
          << (job.failures.empty() ? "" : " (" + describe_failures(job.failures) + ")")
          << "; " << job.retaken << " preempted samples retaken"
          << (job.killed_retries > 0 ? "; " + std::to_string(job.killed_retries) +
                                           " request(s) sent again after a worker was killed from outside"
                                     : std::string())
          << "; compile " << static_cast<std::int64_t>(job.timing.compile_ms)
          << " ms, bench " << static_cast<std::int64_t>(job.timing.bench_ms)
          << " ms, overhead " << static_cast<std::int64_t>(job.timing.overhead_ms) << " ms";
  const std::int64_t job_id = rec.id;
  const std::int64_t winner_index = chosen->config_index;
  auto step = std::make_shared<std::string>();
  m_writer.submit(
      "job " + std::to_string(job_id) + "'s end",
      [job_id, timing = job.timing, search = search_record(job), remeasured = std::move(remeasured),
       tie_indices = std::move(tie_indices), winner, winner_index, step](Store& store) mutable
      -> Result<void> {
        *step = "its rows";
        auto stored_rows = store.job_results(job_id);
        if (!stored_rows) return stored_rows.error();
        std::map<std::int64_t, std::int64_t> ids; // config index -> result id
        for (const auto& row : *stored_rows) ids[row.config_index] = row.id;
        const auto id_of = [&](std::int64_t index) -> Result<std::int64_t> {
          const auto it = ids.find(index);
          if (it == ids.end()) {
            return make_error(ErrorCode::unknown_result, "job " + std::to_string(job_id) +
                                                    " has no stored row for config index " +
                                                    std::to_string(index));
          }
          return it->second;
        };
        *step = "timing";
        if (auto r = store.set_job_timing(job_id, timing); !r) return r.error();
        *step = "the search record";
        if (auto r = store.set_job_search(job_id, search); !r) return r.error();
        *step = "a measurement of the finals";
        for (const auto& [index, m] : remeasured) {
          auto id = id_of(index);
          if (!id) return id.error();
          if (auto r = store.update_measurement(*id, m); !r) return r.error();
        }
        *step = "the ties";
        std::vector<std::int64_t> tie_ids;
        for (const auto index : tie_indices) {
          auto id = id_of(index);
          if (!id) return id.error();
          tie_ids.push_back(*id);
        }
        if (auto r = store.mark_ties(job_id, tie_ids); !r) return r.error();
        *step = "the winner";
        auto id = id_of(winner_index);
        if (!id) return id.error();
        winner.result_id = *id;
        if (auto r = store.upsert_winner(winner); !r) return r.error();
        if (auto r = store.set_job_winner(job_id, *id); !r) return r.error();
        *step = "the state";
        return store.set_job_state(job_id, JobState::done);
      },
      [this, job_id, step, summary = summary.str()](const Result<void>& stored) {
        if (!stored) {
          end_job(job_id, JobState::failed,
                  "database: cannot store " + *step + ": " + stored.error().message);
          return;
        }
        KTUNE_LOG(info) << summary;
        announce_end(job_id, JobState::done);
      });
}

void Scheduler::end_job(std::int64_t job_id, JobState state, const std::string& error) {
  if (state != JobState::done) {
    KTUNE_LOG(warn) << "job " << job_id << " " << to_string(state) << ": " << error;
  }
  m_writer.submit(
      "job " + std::to_string(job_id) + "'s state",
      [job_id, state, error](Store& store) { return store.set_job_state(job_id, state, error); },
      [this, job_id, state](const Result<void>& r) {
        if (!r) {
          KTUNE_LOG(error) << "job " << job_id << ": cannot record state " << to_string(state)
                           << ": " << r.error().message;
        }
        announce_end(job_id, state);
      });
}

void Scheduler::announce_end(std::int64_t job_id, JobState state) {
  ++m_counters.jobs_ended[std::string(to_string(state))];  // every end passes here, done included
  if (m_job_end_hook) m_job_end_hook(job_id, state);
  auto watchers = m_watchers.extract(job_id);
  if (watchers.empty()) return;
  for (const auto& watcher : watchers.mapped()) {
    if (watcher.on_finished) watcher.on_finished(job_id);
  }
}

std::chrono::milliseconds Scheduler::compile_deadline(const JobRecord& record) const {
  const std::optional<double>& compile_timeout_s = record.options.compile_timeout_s;
  const double seconds = compile_timeout_s && *compile_timeout_s > 0
                             ? std::clamp(*compile_timeout_s,
                                          compile_timeout_floor_s(m_settings.compile_timeout_s),
                                          compile_timeout_limit_s(m_settings.compile_timeout_s))
                             : m_settings.compile_timeout_s;
  return seconds_to_ms(seconds);
}

void Scheduler::stop(std::chrono::milliseconds grace, std::function<void()> on_stopped) {
  if (m_stopped) {
    if (on_stopped) asio::post(m_io, std::move(on_stopped));
    return;
  }
  m_stopped = true;
  m_on_stopped = std::move(on_stopped);
  while (!m_queue.empty()) {
    Queued queued = std::move(m_queue.front());
    m_queue.pop_front();
    end_job(queued.record().id, JobState::interrupted, "ktuned stopped before the job started");
    if (queued.check && queued.check->on_end) queued.check->on_end(JobState::interrupted);
  }
  std::size_t in_flight = 0;
  std::vector<std::int64_t> idle_jobs;
  for (const auto& [id, job] : m_tunes) {
    m_workers.withdraw(id);
    in_flight += static_cast<std::size_t>(job->in_flight);
    if (job->in_flight == 0) idle_jobs.push_back(id);
  }
  for (const auto& [id, check] : m_checks) {
    feed_check(id);  // drops the compiles not asked for yet
    m_workers.withdraw(id);
    in_flight += check->in_flight;
  }
  for (const auto id : idle_jobs) advance(id); // ends it interrupted
  if (m_tunes.empty() && m_checks.empty()) {
    if (m_on_stopped) finish_stop();
    return;
  }
  KTUNE_LOG(info) << "letting " << in_flight << " request(s) in flight finish (at most "
                  << grace.count() << " ms)";
  m_stop_timer = std::make_unique<asio::steady_timer>(m_io, grace);
  m_stop_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    KTUNE_LOG(warn) << running() << " job(s) still had requests in flight after the stop grace period";
    finish_stop();
  });
}

void Scheduler::finish_stop() {
  if (m_stop_timer) m_stop_timer->cancel();
  auto tunes = std::move(m_tunes);
  auto checks = std::move(m_checks);
  m_tunes.clear();
  m_checks.clear();
  m_lanes.clear();
  for (const auto& [id, job] : tunes) {
    end_job(id, JobState::interrupted, "ktuned stopped while the job was running");
  }
  for (const auto& [id, check] : checks) {
    end_job(id, JobState::interrupted, "ktuned stopped while the job was running");
    if (check->plan.on_end) check->plan.on_end(JobState::interrupted);
  }
  if (auto on_stopped = std::move(m_on_stopped)) {
    m_on_stopped = nullptr;
    on_stopped();
  }
}

} // namespace ktune::daemon
