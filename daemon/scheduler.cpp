#include "daemon/scheduler.hpp"

#include "compiler/compiler.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"

#include <boost/asio/post.hpp>

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

// Maps a failed worker request: the daemon's crash/worker_lost codes keep their status, any other
// error the worker replied with becomes `otherwise`.
ResultRecord worker_failure(const Error& error, CandidateStatus otherwise, double compile_ms = 0) {
  if (error.code == k_worker_crash) {
    return failed_result(CandidateStatus::crash, error.message, {}, compile_ms);
  }
  if (error.code == k_worker_lost) {
    return failed_result(CandidateStatus::worker_lost, error.message, {}, compile_ms);
  }
  return failed_result(otherwise, "worker error " + error.code + ": " + error.message, {},
                       compile_ms);
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
  if (auto r = m_store.set_job_state(id, JobState::running); !r) {
    fail(*m_active, "database: " + r.error().message);
  } else {
    KTUNE_LOG(info) << "job " << id << " running";
  }
  advance();
}

void Scheduler::advance() {
  if (m_stopped || !m_active) return;
  ActiveJob& job = *m_active;
  const auto total = job.plan.configs.size();

  if (job.error.empty() && job.reference == ReferenceState::pending) start_reference(job);
  if (job.error.empty() && job.reference == ReferenceState::ready) {
    while (job.error.empty() && job.next_compile < total) {
      auto worker = m_workers.idle_worker(WorkerRole::compile);
      if (!worker) {
        fail(job, "cannot start a compile worker: " + worker.error().message);
        break;
      }
      if (!*worker) break; // all busy: the next reply calls advance() again
      start_compile(job, job.next_compile++, std::move(*worker));
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
  if (!compile_job) {
    fail(job, "reference config " + config_to_string(reference) + ": " +
                  compile_job.error().message);
    return;
  }
  job.reference = ReferenceState::compiling;
  KTUNE_LOG(debug) << "job " << plan.record.id << ": compiling reference "
                   << config_to_string(reference);
  (*worker)->request("compile", compile_job->to_json(),
                     [this, id = plan.record.id](Result<nlohmann::json> reply) {
                       if (is_current(id)) on_reference_compiled(*m_active, std::move(reply));
                       advance();
                     });
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
  if (!compile_job) {
    record(job, index, failed_result(CandidateStatus::compile_error, compile_job.error().message));
    return;
  }
  worker->request("compile", compile_job->to_json(),
                  [this, id = plan.record.id, index](Result<nlohmann::json> reply) {
                    if (is_current(id)) on_compiled(*m_active, index, std::move(reply));
                    advance();
                  });
}

void Scheduler::on_compiled(ActiveJob& job, std::size_t index, Result<nlohmann::json> reply) {
  if (!reply) {
    record(job, index, worker_failure(reply.error(), CandidateStatus::compile_error));
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
  if (!bench_job) {
    record(job, candidate.index,
           failed_result(CandidateStatus::invalid_config, bench_job.error().message, {},
                         candidate.compile_ms));
    return;
  }
  job.benchmarking = true;
  worker->request("bench", bench_job->to_json(),
                  [this, id = plan.record.id, candidate](Result<nlohmann::json> reply) {
                    if (is_current(id)) {
                      m_active->benchmarking = false;
                      on_benched(*m_active, candidate, std::move(reply));
                    }
                    advance();
                  });
}

void Scheduler::on_benched(ActiveJob& job, const Compiled& candidate, Result<nlohmann::json> reply) {
  if (!reply) {
    record(job, candidate.index,
           worker_failure(reply.error(), CandidateStatus::runtime_error, candidate.compile_ms));
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
  auto watchers = m_watchers.extract(job_id);
  if (watchers.empty()) return;
  for (const auto& watcher : watchers.mapped()) {
    if (watcher.on_finished) watcher.on_finished(job_id);
  }
}

void Scheduler::stop() {
  if (m_stopped) return;
  m_stopped = true;
  if (m_active) {
    const auto id = m_active->plan.record.id;
    m_active.reset();
    end_job(id, JobState::interrupted, "ktuned stopped while the job was running");
  }
  while (!m_queue.empty()) {
    const auto id = m_queue.front().record.id;
    m_queue.pop_front();
    end_job(id, JobState::interrupted, "ktuned stopped before the job started");
  }
}

} // namespace ktune::daemon
