#include "daemon/scheduler.hpp"

#include "daemon/batch_sizer.hpp"
#include "daemon/log.hpp"
#include "daemon/tune_run.hpp"
#include "jobs/compile_job.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <set>

namespace ktune::daemon {

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
  for (const auto& [id, run] : m_tunes) {
    if (!run->failed() && same(run->record())) return id;
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
  if (TuneRun* run = find_run(job_id)) {
    run->cancel();
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
  bool known = find_run(job_id) != nullptr;
  for (const auto& queued : m_queue) known = known || (queued.tune && queued.record().id == job_id);
  if (!known || m_stopped) return false;
  m_watchers[job_id].push_back(std::move(watcher));
  return true;
}

TuneRun* Scheduler::find_run(std::int64_t job_id) {
  const auto it = m_tunes.find(job_id);
  return it == m_tunes.end() ? nullptr : it->second.get();
}

bool Scheduler::stopping() const { return m_stopped; }

void Scheduler::count_result(const JobRecord& job, const ResultRecord& result) {
  ++m_counters.candidates[std::string(to_string(result.status))];
  const auto now = std::chrono::steady_clock::now();
  m_recent_results.push_back(now);
  while (m_recent_results.size() > 100'000 || now - m_recent_results.front() > std::chrono::minutes(1)) {
    m_recent_results.pop_front();
  }
  if (result.status != CandidateStatus::ok) {
    m_recent_failures.push_back(RecentFailure{job.id, job.kernel, job.shape, job.device,
                                              result.config, std::string(to_string(result.status)),
                                              result.reason, std::chrono::system_clock::now()});
    if (m_recent_failures.size() > k_recent_failures) m_recent_failures.pop_front();
  }
}

bool Scheduler::watched(std::int64_t job_id) const { return m_watchers.count(job_id) != 0; }

void Scheduler::tell_progress(std::int64_t job_id, const nlohmann::json& event) {
  const auto watchers = m_watchers.find(job_id);
  if (watchers == m_watchers.end()) return;
  for (const auto& watcher : std::vector(watchers->second)) {
    if (watcher.on_progress) watcher.on_progress(event);
  }
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
  for (const auto& [id, run] : m_tunes) out.push_back(run->view(now));
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
  c.sizer = BatchSizer(compile_deadline(m_settings, c.plan.record).count() / 4.0);
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
  work.deadline = compile_deadline(m_settings, c.plan.record);
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
  auto run = std::make_unique<TuneRun>(
      RunServices{m_io, m_store, m_writer, m_workers, m_settings, m_counters, *this},
      std::move(plan), queued_at);
  m_lanes[run->lane()] = id;
  TuneRun& started = *run;
  m_tunes[id] = std::move(run);
  started.start();
  advance(id);
}

void Scheduler::advance(std::int64_t job_id) {
  TuneRun* run = find_run(job_id);
  if (!run) return;
  if (m_stopped) {
    if (run->in_flight() > 0) return;
    m_lanes.erase(run->lane());
    m_tunes.erase(job_id);
    end_job(job_id, JobState::interrupted, "ktuned stopped while the job was running");
    if (m_tunes.empty() && m_checks.empty()) finish_stop();
    return;
  }
  if (!run->advance()) return;
  m_lanes.erase(run->lane());
  m_tunes.erase(job_id);
  start_ready();
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
  for (const auto& [id, run] : m_tunes) {
    m_workers.withdraw(id);
    in_flight += static_cast<std::size_t>(run->in_flight());
    if (run->in_flight() == 0) idle_jobs.push_back(id);
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
  for (const auto& [id, run] : tunes) {
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
