#include "daemon/scheduler.hpp"

#include "daemon/devices.hpp"

#include "compiler/compiler.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"

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
  if (error.code == k_worker_crash) {
    return failed_result(CandidateStatus::crash, error.message, std::move(log), compile_ms);
  }
  if (error.code == k_worker_lost) {
    return failed_result(CandidateStatus::worker_lost, error.message, std::move(log), compile_ms);
  }
  if (error.code == k_worker_timeout) {
    return failed_result(timed_out, error.message, std::move(log), compile_ms);
  }
  return failed_result(otherwise, "worker error " + error.code + ": " + error.message,
                       std::move(log), compile_ms);
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
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

} // namespace

std::chrono::milliseconds bench_deadline(const SchedulerSettings& settings,
                                         std::optional<double> override_s) {
  if (override_s && *override_s > 0) return seconds_to_ms(*override_s);
  if (settings.bench_timeout_s > 0) return seconds_to_ms(settings.bench_timeout_s);
  const double estimate = 2.0 * (settings.measure.warmup_ms / 1000.0 + settings.measure.max_time_s) + 1.0;
  return seconds_to_ms(
      std::clamp(estimate, settings.bench_timeout_min_s, settings.bench_timeout_max_s));
}

bool quarantines(CandidateStatus status) {
  return status == CandidateStatus::crash || status == CandidateStatus::timeout ||
         status == CandidateStatus::compile_timeout || status == CandidateStatus::worker_lost;
}

Result<std::size_t> drop_quarantined(const Store& store, const std::string& kernel,
                                     const std::string& source_hash,
                                     const std::string& fingerprint, std::vector<Config>& configs,
                                     std::int64_t except_job) {
  auto bad = store.quarantined_configs(kernel, source_hash, fingerprint, except_job);
  if (!bad) return bad.error();
  if (bad->empty()) return std::size_t{0};
  const std::size_t before = configs.size();
  std::erase_if(configs, [&](const Config& c) { return bad->count(config_json_text(c)) > 0; });
  return before - configs.size();
}

Scheduler::Scheduler(asio::io_context& io, Store& store, WorkerPool& workers,
                     SchedulerSettings settings)
    : m_io(io), m_store(store), m_workers(workers), m_settings(std::move(settings)) {}

void Scheduler::enqueue(JobPlan plan) {
  KTUNE_LOG(info) << "job " << plan.record.id << " queued: " << plan.record.kernel << " "
                  << plan.record.shape << " " << plan.record.dtype << " on " << plan.record.device
                  << ", " << plan.configs.size() << " candidates";
  m_queue.push_back(std::move(plan));
  asio::post(m_io, [this] { start_next(); });
}

bool Scheduler::watch(std::int64_t job_id, JobWatcher watcher) {
  bool known = is_current(job_id);
  for (const auto& plan : m_queue) known = known || plan.record.id == job_id;
  if (!known || m_stopped) return false;
  m_watchers[job_id].push_back(std::move(watcher));
  return true;
}

bool Scheduler::is_current(std::int64_t job_id) const {
  return m_active && m_active->plan.record.id == job_id;
}

void Scheduler::fail(ActiveJob& job, const std::string& error) {
  if (job.error.empty()) job.error = error;
}

void Scheduler::start_next() {
  if (m_stopped || m_active || m_queue.empty()) return;
  m_active = std::make_unique<ActiveJob>();
  m_active->plan = std::move(m_queue.front());
  m_queue.pop_front();
  m_active->started = std::chrono::steady_clock::now();
  const auto id = m_active->plan.record.id;
  {
    ActiveJob& job = *m_active;
    std::set<std::string> have;
    for (const auto& row : job.plan.existing) {
      have.insert(row.config);
      ++job.done;
      if (row.status == CandidateStatus::ok) {
        if (!job.best || better_result(row, *job.best)) job.best = row;
      } else {
        ++job.failed;
        ++job.failures[row.status];
      }
    }
    for (std::size_t i = 0; i < job.plan.configs.size(); ++i) {
      if (have.count(config_json_text(job.plan.configs[i])) == 0) job.pending.push_back(i);
    }
    // Rows of configs no longer in the list (a changed budget) count, but never block the end.
    job.done = static_cast<std::int64_t>(job.plan.configs.size() - job.pending.size());
    if (!job.plan.existing.empty()) {
      KTUNE_LOG(info) << "job " << id << " resumes: " << job.done << " of "
                      << job.plan.configs.size() << " candidates already measured";
    }
  }
  if (auto r = m_store.set_job_state(id, JobState::running); !r) {
    fail(*m_active, "database: " + r.error().message);
  } else {
    KTUNE_LOG(info) << "job " << id << " running";
  }
  advance();
}

void Scheduler::advance() {
  if (!m_active) return;
  ActiveJob& job = *m_active;
  const auto total = job.plan.configs.size();
  if (m_stopped) {
    if (job.in_flight == 0) finish_stop();
    return;
  }

  if (job.error.empty() && job.reference == ReferenceState::pending) start_reference(job);
  if (job.error.empty() && job.reference == ReferenceState::ready) {
    while (job.error.empty() && job.next_compile < job.pending.size()) {
      auto worker = m_workers.idle_worker(WorkerRole::compile);
      if (!worker) {
        fail(job, "cannot start a compile worker: " + worker.error().message);
        break;
      }
      if (!*worker) break; // all busy: the next reply calls advance() again
      start_compile(job, job.pending[job.next_compile++], std::move(*worker));
    }
    while (job.error.empty() && !job.benchmarking && !job.compiled.empty()) {
      auto worker = m_workers.idle_worker(WorkerRole::bench);
      if (!worker) {
        fail(job, "cannot start the bench worker: " + worker.error().message);
        break;
      }
      if (!*worker) break;
      Compiled candidate = std::move(job.compiled.front());
      job.compiled.pop_front();
      start_bench(job, std::move(candidate), std::move(*worker));
    }
  }

  if (!job.error.empty()) {
    end_job(job.plan.record.id, JobState::failed, job.error);
  } else if (job.reference == ReferenceState::ready &&
             static_cast<std::size_t>(job.done) == total) {
    finish(job);
  } else {
    return; // replies in flight will call advance() again
  }
  m_active.reset();
  asio::post(m_io, [this] { start_next(); });
}

void Scheduler::start_reference(ActiveJob& job) {
  const auto& plan = job.plan;
  const Config& reference = plan.kernel.spec.default_config;
  if (reference.empty()) {
    KTUNE_LOG(warn) << "job " << plan.record.id << ": " << plan.record.kernel
                    << " has no [default] config; candidates run without an output check";
    job.reference = ReferenceState::ready;
    return;
  }
  auto worker = m_workers.idle_worker(WorkerRole::compile);
  if (!worker) {
    fail(job, "cannot start a compile worker: " + worker.error().message);
    return;
  }
  if (!*worker) return; // busy with a previous job's leftovers; its reply calls advance()
  auto compile_job =
      make_compile_job(plan.kernel, reference, plan.record.dtype, m_settings.cache_dir);
  if (compile_job) {
    if (auto r = target_cuda_device(m_store, plan.record, *compile_job); !r) compile_job = r.error();
  }
  if (!compile_job) {
    fail(job, "reference config " + config_to_string(reference) + ": " +
                  compile_job.error().message);
    return;
  }
  job.reference = ReferenceState::compiling;
  KTUNE_LOG(debug) << "job " << plan.record.id << ": compiling reference "
                   << config_to_string(reference);
  ++job.in_flight;
  (*worker)->request("compile", compile_job->to_json(),
                     [this, id = plan.record.id](Result<nlohmann::json> reply) {
                       if (is_current(id)) {
                         --m_active->in_flight;
                         on_reference_compiled(*m_active, std::move(reply));
                       }
                       advance();
                     },
                     compile_deadline(job));
}

void Scheduler::on_reference_compiled(ActiveJob& job, Result<nlohmann::json> reply) {
  const std::string name =
      "reference config " + config_to_string(job.plan.kernel.spec.default_config);
  if (!reply) {
    fail(job, name + ": " + reply.error().message);
    return;
  }
  auto outcome = CompileOutcome::from_json(*reply);
  if (!outcome) {
    fail(job, name + ": unreadable compile outcome: " + outcome.error().message);
    return;
  }
  if (outcome->status != CandidateStatus::ok) {
    fail(job, name + " failed to compile (" + std::string(to_string(outcome->status)) +
                  "): " + first_error_line(outcome->log));
    return;
  }
  KTUNE_LOG(info) << "job " << job.plan.record.id << ": " << name << " compiled in "
                  << outcome->compile_ms << " ms" << (outcome->cached ? " (cached)" : "");
  job.reference_path = outcome->artifact_path;
  job.reference = ReferenceState::ready;
}

void Scheduler::start_compile(ActiveJob& job, std::size_t index,
                              std::shared_ptr<WorkerProcess> worker) {
  const auto& plan = job.plan;
  auto compile_job = make_compile_job(plan.kernel, plan.configs[index], plan.record.dtype,
                                      m_settings.cache_dir);
  if (compile_job) {
    if (auto r = target_cuda_device(m_store, plan.record, *compile_job); !r) compile_job = r.error();
  }
  if (!compile_job) {
    record(job, index, failed_result(CandidateStatus::compile_error, compile_job.error().message));
    return;
  }
  ++job.in_flight;
  worker->request("compile", compile_job->to_json(),
                  [this, id = plan.record.id, index, worker](Result<nlohmann::json> reply) {
                    if (is_current(id)) {
                      --m_active->in_flight;
                      on_compiled(*m_active, index, std::move(reply), worker->stderr_tail());
                    }
                    advance();
                  },
                  compile_deadline(job));
}

void Scheduler::on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply,
                            const std::string& stderr_tail) {
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
  if (outcome->status != CandidateStatus::ok) {
    record(job, index,
           failed_result(outcome->status, first_error_line(outcome->log), outcome->log,
                         outcome->compile_ms));
    return;
  }
  job.compiled.push_back(Compiled{index, outcome->artifact_path, outcome->compile_ms});
}

void Scheduler::start_bench(ActiveJob& job, Compiled candidate,
                            std::shared_ptr<WorkerProcess> worker) {
  const auto& plan = job.plan;
  auto bench_job = make_bench_job(plan.kernel.spec, plan.shape, plan.configs[candidate.index],
                                  plan.record.dtype, candidate.artifact_path, job.reference_path,
                                  m_settings.measure);
  if (bench_job) target_cuda_device(plan.record, *bench_job);
  if (!bench_job) {
    record(job, candidate.index,
           failed_result(CandidateStatus::invalid_config, bench_job.error().message, {},
                         candidate.compile_ms));
    return;
  }
  job.benchmarking = true;
  ++job.in_flight;
  worker->request("bench", bench_job->to_json(),
                  [this, id = plan.record.id, candidate, worker](Result<nlohmann::json> reply) {
                    if (is_current(id)) {
                      m_active->benchmarking = false;
                      --m_active->in_flight;
                      on_benched(*m_active, candidate, std::move(reply), worker->stderr_tail());
                    }
                    advance();
                  },
                  bench_deadline(m_settings, plan.bench_timeout_s));
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
  ResultRecord r;
  r.status = outcome->status;
  r.reason = outcome->reason;
  r.stats = outcome->stats;
  r.gflops = outcome->gflops;
  r.gbps = outcome->gbps;
  r.compile_ms = candidate.compile_ms;
  r.registers = outcome->registers;
  r.spill_bytes = outcome->spills;
  if (r.status != CandidateStatus::ok) r.log = stderr_tail;
  record(job, candidate.index, std::move(r));
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

  auto id = m_store.insert_result(result);
  if (!id) {
    fail(job, "database: cannot store the result of " + config_to_string(job.plan.configs[index]) +
                  ": " + id.error().message);
    return;
  }
  result.id = *id;
  ++job.done;
  if (result.status == CandidateStatus::ok) {
    if (!job.best || better_result(result, *job.best)) job.best = result;
  } else {
    ++job.failed;
    ++job.failures[result.status];
  }
  KTUNE_LOG(debug) << "job " << rec.id << " [" << job.done << "/" << job.plan.configs.size()
                   << "] " << config_to_string(job.plan.configs[index]) << ": "
                   << to_string(result.status)
                   << (result.status == CandidateStatus::ok
                           ? " median " + std::to_string(result.stats.median_ms) + " ms"
                           : " " + result.reason);
  if (auto r = m_store.update_job_progress(rec.id, job.done, job.failed); !r) {
    fail(job, "database: cannot update progress: " + r.error().message);
    return;
  }
  const auto watchers = m_watchers.find(rec.id);
  if (watchers == m_watchers.end()) return;
  const nlohmann::json event = progress(job, result);
  for (const auto& watcher : std::vector(watchers->second)) {
    if (watcher.on_progress) watcher.on_progress(event);
  }
}

nlohmann::json Scheduler::progress(const ActiveJob& job, const ResultRecord& last) const {
  nlohmann::json event = {
      {"job", job.plan.record.id},
      {"done", job.done},
      {"total", static_cast<std::int64_t>(job.plan.configs.size())},
      {"failed", job.failed},
      {"best_config", nullptr},
      {"best_median_ms", nullptr},
      {"best_gflops", nullptr},
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
  }
  return event;
}

void Scheduler::finish(ActiveJob& job) {
  const JobRecord& rec = job.plan.record;
  if (!job.best) {
    end_job(rec.id, JobState::failed,
            "no candidate succeeded (" + describe_failures(job.failures) + ")");
    return;
  }
  WinnerRecord winner;
  winner.kernel = rec.kernel;
  winner.source_hash = rec.source_hash;
  winner.shape = rec.shape;
  winner.dtype = rec.dtype;
  winner.fingerprint = rec.fingerprint;
  winner.result_id = job.best->id;
  winner.job_id = rec.id;
  winner.config = job.best->config;
  winner.median_ms = job.best->stats.median_ms;
  winner.gflops = job.best->gflops;
  if (auto r = m_store.upsert_winner(winner); !r) {
    end_job(rec.id, JobState::failed, "database: cannot store the winner: " + r.error().message);
    return;
  }
  KTUNE_LOG(info) << "job " << rec.id << " done in " << log::elapsed_ms(job.started)
                  << " ms: winner " << winner.config << " median " << winner.median_ms << " ms, "
                  << job.failed << " of " << job.done << " candidates failed"
                  << (job.failures.empty() ? "" : " (" + describe_failures(job.failures) + ")");
  end_job(rec.id, JobState::done, {});
}

void Scheduler::end_job(std::int64_t job_id, JobState state, const std::string& error) {
  if (state != JobState::done) {
    KTUNE_LOG(warn) << "job " << job_id << " " << to_string(state) << ": " << error;
  }
  if (auto r = m_store.set_job_state(job_id, state, error); !r) {
    KTUNE_LOG(error) << "job " << job_id << ": cannot record state " << to_string(state) << ": "
                     << r.error().message;
  }
  if (m_job_end_hook) m_job_end_hook(job_id, state);
  auto watchers = m_watchers.extract(job_id);
  if (watchers.empty()) return;
  for (const auto& watcher : watchers.mapped()) {
    if (watcher.on_finished) watcher.on_finished(job_id);
  }
}

std::chrono::milliseconds Scheduler::compile_deadline(const ActiveJob& job) const {
  const double seconds = job.plan.compile_timeout_s && *job.plan.compile_timeout_s > 0
                             ? *job.plan.compile_timeout_s
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
    const auto id = m_queue.front().record.id;
    m_queue.pop_front();
    end_job(id, JobState::interrupted, "ktuned stopped before the job started");
  }
  if (!m_active || m_active->in_flight == 0) {
    finish_stop();
    return;
  }
  KTUNE_LOG(info) << "job " << m_active->plan.record.id << ": letting " << m_active->in_flight
                  << " request(s) in flight finish (at most " << grace.count() << " ms)";
  m_stop_timer = std::make_unique<asio::steady_timer>(m_io, grace);
  m_stop_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (m_active) {
      KTUNE_LOG(warn) << "job " << m_active->plan.record.id << ": " << m_active->in_flight
                      << " request(s) still in flight after the stop grace period";
    }
    finish_stop();
  });
}

void Scheduler::finish_stop() {
  if (m_stop_timer) m_stop_timer->cancel();
  if (m_active) {
    const auto id = m_active->plan.record.id;
    m_active.reset();
    end_job(id, JobState::interrupted, "ktuned stopped while the job was running");
  }
  if (auto on_stopped = std::move(m_on_stopped)) {
    m_on_stopped = nullptr;
    on_stopped();
  }
}

} // namespace ktune::daemon
