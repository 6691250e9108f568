// TuneRun's worker requests: sending (and sending again after a kill from outside or a busy
// device), the reference compile, the candidates' compiles and batches, and their measurements.
#include "daemon/tune_run.hpp"

#include "core/stats.hpp"
#include "daemon/devices.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/compile_job.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cmath>
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

// What the candidates are checked against, for messages.
std::string reference_name(const LoadedKernel& kernel) {
  if (kernel.spec.check.reference == ReferenceKind::function) {
    return "reference function " + kernel.spec.check.function;
  }
  return "reference config " + config_to_string(kernel.spec.default_config);
}

} // namespace

void TuneRun::submit(const std::string& lane, std::string op, nlohmann::json request,
                     std::chrono::milliseconds deadline, Handler handle) {
  send(Request{lane, std::move(op), std::move(request), deadline,
               std::make_shared<Handler>(std::move(handle)), 1});
}

void TuneRun::send(Request request) {
  const std::int64_t job_id = id();
  Work work;
  work.op = request.op;
  work.job = request.job;
  work.deadline = request.deadline;
  work.priority = m_plan.record.options.priority;
  work.owner = job_id;
  work.device = m_lane;
  const std::string lane = request.lane;
  work.on_reply = [host = &m_host, job_id, request = std::move(request)](
                      Result<nlohmann::json> reply, const Delivery& delivery) mutable {
    if (TuneRun* run = host->find_run(job_id)) {
      run->on_reply(std::move(request), std::move(reply), delivery);
    }
    host->advance(job_id);
  };
  ++m_in_flight;
  m_workers.submit(lane, std::move(work));
}

// A worker killed by SIGKILL that ktuned did not send (the OOM killer, an administrator) is the
// host's doing until it happens again: the request goes once more to a fresh worker, and only a
// second such death is the candidate's (a `crash`, which the quarantine then holds against it).
void TuneRun::on_reply(Request request, Result<nlohmann::json> reply, const Delivery& delivery) {
  account();
  --m_in_flight;
  if (!reply && reply.error().code == ErrorCode::device_busy && !m_host.stopping() && m_error.empty()) {
    // Another ktuned measures on this device: nothing was measured; ask again shortly.
    const std::string why = reply.error().message;
    wait_for_device(std::move(request), why);
    return;
  }
  if (!reply && reply.error().code == ErrorCode::worker_killed) {
    if (request.attempt < k_killed_attempts && !m_host.stopping()) {
      KTUNE_LOG(warn) << "job " << id() << ": " << reply.error().message
                      << "; the " << request.op << " goes to a fresh worker once more";
      ++m_killed_retries;
      ++request.attempt;
      send(std::move(request));
      return;
    }
    reply = make_error(ErrorCode::worker_crashed, reply.error().message +
                                                      "; again in a fresh worker: the failure reproduces");
  }
  (*request.handle)(*this, std::move(reply), delivery);
}

void TuneRun::wait_for_device(Request request, const std::string& why) {
  const std::int64_t job_id = id();
  const auto now = std::chrono::steady_clock::now();
  if (now - m_busy_logged > std::chrono::seconds(10)) {
    m_busy_logged = now;
    KTUNE_LOG(info) << "job " << job_id << " waits for its device: " << why;
  }
  // Counted as in flight while it waits, so that the job neither ends nor starts its finals.
  ++m_in_flight;
  auto timer = std::make_shared<asio::steady_timer>(m_io, k_device_busy_retry);
  timer->async_wait([host = &m_host, job_id, timer, request = std::move(request)](
                        const boost::system::error_code&) mutable {
    TuneRun* run = host->find_run(job_id);
    if (run == nullptr) return;
    --run->m_in_flight;
    if (host->stopping() || !run->m_error.empty()) {
      host->advance(job_id);
      return;
    }
    run->send(std::move(request));
  });
}

Result<void> TuneRun::target_device(CompileJob& job) {
  if (job.language != "cuda") return {};
  if (!m_arch) {
    const auto arch = m_plan.device.details.find("arch");
    if (m_plan.device.fingerprint == m_plan.record.fingerprint &&
        arch != m_plan.device.details.end() && arch->is_string()) {
      m_arch = arch->get<std::string>();
    } else {
      if (auto r = target_cuda_device(m_store, m_plan.record, job); !r) return r;
      m_arch = job.arch;
    }
  }
  job.arch = *m_arch;
  return {};
}

void TuneRun::start_reference() {
  const auto& plan = m_plan;
  const Config& reference = plan.kernel.spec.default_config;
  const ReferenceKind kind = plan.kernel.spec.check.reference;
  if (kind == ReferenceKind::none || kind == ReferenceKind::files) {  // files: read by the runner
    m_reference = ReferenceState::ready;
    return;
  }
  if (kind == ReferenceKind::default_config && reference.empty()) {
    KTUNE_LOG(warn) << "job " << plan.record.id << ": " << plan.record.kernel
                    << " has no [default] config; candidates run without an output check";
    m_reference = ReferenceState::ready;
    return;
  }
  auto compile_job =
      kind == ReferenceKind::function
          ? make_reference_compile_job(plan.kernel, plan.record.dtype, m_settings.cache_dir)
          : make_compile_job(plan.kernel, reference, plan.record.dtype, m_settings.cache_dir);
  if (compile_job) {
    if (auto r = target_device(*compile_job); !r) compile_job = r.error();
  }
  if (!compile_job) {
    fail(reference_name(plan.kernel) + ": " + compile_job.error().message);
    return;
  }
  m_reference = ReferenceState::compiling;
  KTUNE_LOG(debug) << "job " << plan.record.id << ": compiling " << reference_name(plan.kernel);
  submit("", "compile", compile_job->to_json(), compile_deadline(m_settings, plan.record),
         [](TuneRun& j, Result<nlohmann::json> reply, const Delivery&) {
           j.on_reference_compiled(std::move(reply));
         });
}

void TuneRun::on_reference_compiled(Result<nlohmann::json> reply) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  const std::string name = reference_name(m_plan.kernel);
  if (!reply) {
    fail(name + ": " + reply.error().message);
    return;
  }
  auto outcome = CompileOutcome::from_json(*reply);
  if (!outcome) {
    fail(name + ": unreadable compile outcome: " + outcome.error().message);
    return;
  }
  if (!outcome->infra.empty()) {
    fail(name + ": the host failed, not the kernel: " + outcome->infra);
    return;
  }
  if (outcome->status != CandidateStatus::ok) {
    fail(name + " failed to compile (" + std::string(to_string(outcome->status)) + "): " +
         first_error_line(outcome->log));
    return;
  }
  if (!outcome->repaired.empty()) {
    KTUNE_LOG(warn) << "job " << m_plan.record.id << ": compiled " << name << " again: "
                    << outcome->repaired;
  }
  KTUNE_LOG(info) << "job " << m_plan.record.id << ": " << name << " compiled in "
                  << outcome->compile_ms << " ms" << (outcome->cached ? " (cached)" : "");
  ++(outcome->cached ? m_counters.compile_cache_hits : m_counters.compile_cache_misses);
  if (!outcome->cached) ++m_timing.compiles;
  learn_batching({*outcome});
  m_reference_path = outcome->artifact_path;
  m_reference_entry = outcome->entry_symbol;
  m_reference = ReferenceState::ready;
}

std::size_t TuneRun::batch_size() const {
  if (m_settings.serial) return 1;  // one compiler process per config
  const std::size_t size = m_sizer.size();
  return m_settings.compile_ahead > 0 ? std::min(size, m_settings.compile_ahead) : size;
}

std::size_t TuneRun::compile_ahead() const {
  if (m_settings.compile_ahead > 0) return m_settings.compile_ahead;
  // The bench CPU's borrowed worker (WorkerPool) is one more compile worker at times: a batch
  // it holds, stopped while the lane measures, must not keep the others idle.
  return 2 * (std::max<std::size_t>(1, m_settings.compile_workers) + 1) * batch_size();
}

void TuneRun::start_compile(const std::vector<std::size_t>& indices) {
  const auto& plan = m_plan;
  std::vector<std::size_t> sent;
  nlohmann::json jobs = nlohmann::json::array();
  for (const std::size_t index : indices) {
    auto compile_job = make_compile_job(plan.kernel, plan.configs[index], plan.record.dtype,
                                        m_settings.cache_dir);
    if (compile_job) {
      if (auto r = target_device(*compile_job); !r) compile_job = r.error();
    }
    if (!compile_job) {
      record(index, failed_result(CandidateStatus::compile_error, compile_job.error().message));
      continue;
    }
    jobs.push_back(compile_job->to_json());
    sent.push_back(index);
  }
  if (sent.empty()) return;
  m_compiling += sent.size();
  if (sent.size() == 1) {
    submit("", "compile", std::move(jobs.front()), compile_deadline(m_settings, plan.record),
           [index = sent.front()](TuneRun& j, Result<nlohmann::json> reply,
                                  const Delivery& delivery) {
             --j.m_compiling;
             j.on_compiled(index, std::move(reply), delivery);
           });
    return;
  }
  // One deadline for the batch, as for one config: a batch that passes it (a config that
  // compiles forever) is compiled again config by config, each with the whole deadline.
  submit("", k_compile_batch, std::move(jobs), compile_deadline(m_settings, plan.record),
         [sent](TuneRun& j, Result<nlohmann::json> reply, const Delivery& delivery) {
           j.m_compiling -= sent.size();
           j.on_batch_compiled(sent, std::move(reply), delivery);
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

void TuneRun::on_compiled(std::size_t index, Result<nlohmann::json> reply,
                          const Delivery& delivery) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  m_timing.compile_sum_ms += delivery.request_ms - delivery.paused_ms;
  const std::string& stderr_tail = delivery.stderr_tail;
  if (!reply) {
    record(index,
           worker_failure(reply.error(), CandidateStatus::compile_error,
                          CandidateStatus::compile_timeout, stderr_tail));
    return;
  }
  auto outcome = CompileOutcome::from_json(*reply);
  if (!outcome) {
    record(index,
           failed_result(CandidateStatus::compile_error,
                         "unreadable compile outcome: " + outcome.error().message));
    return;
  }
  std::vector<CompileOutcome> outcomes{std::move(*outcome)};
  unpause(outcomes, delivery.paused_ms);
  on_outcome(index, outcomes.front());
  learn_batching(outcomes);
}

// A batch that failed as a whole (its deadline, a dead worker, an unreadable reply) says nothing
// about any one config: each is compiled again alone, and only those results count.
void TuneRun::on_batch_compiled(const std::vector<std::size_t>& indices,
                                Result<nlohmann::json> reply, const Delivery& delivery) {
  if (!reply && reply.error().code == ErrorCode::withdrawn) return; // the job was cancelled
  m_timing.compile_sum_ms += delivery.request_ms - delivery.paused_ms;
  auto outcomes = reply ? batch_outcomes(*reply, indices.size())
                        : Result<std::vector<CompileOutcome>>(reply.error());
  if (!outcomes) {
    if (!m_error.empty()) return;
    KTUNE_LOG(warn) << "job " << m_plan.record.id << ": a batch of " << indices.size()
                    << " compiles failed as a whole (" << outcomes.error().message
                    << "); compiling each of its configs alone";
    for (const std::size_t index : indices) start_compile({index});
    return;
  }
  unpause(*outcomes, delivery.paused_ms);
  for (std::size_t i = 0; i < indices.size(); ++i) on_outcome(indices[i], (*outcomes)[i]);
  learn_batching(*outcomes);
}

void TuneRun::on_outcome(std::size_t index, const CompileOutcome& outcome) {
  if (!outcome.cached) ++m_timing.compiles;
  if (!outcome.repaired.empty()) {
    KTUNE_LOG(warn) << "job " << m_plan.record.id << ": compiled "
                    << config_to_string(m_plan.configs[index]) << " again: " << outcome.repaired;
  }
  ++(outcome.cached ? m_counters.compile_cache_hits : m_counters.compile_cache_misses);
  if (!outcome.infra.empty()) {
    // The host's failure, not the candidate's: never recorded (a later job compiles it again).
    // Tried once more at once, alone; a kill that happens again is the candidate's (it is what
    // needs the memory); any other host failure that persists ends the job with its cause.
    const std::string name = config_to_string(m_plan.configs[index]);
    if (++m_infra_attempts[index] < k_infra_attempts) {
      KTUNE_LOG(warn) << "job " << m_plan.record.id << ": " << name << ": " << outcome.infra
                      << "; compiling it again";
      start_compile({index});
      return;
    }
    if (outcome.infra.find("SIGKILL") == std::string::npos) {
      fail("the host failed, not the candidates: " + outcome.infra + " (compiling " + name +
           ", twice); the configs not measured are not recorded and run in a later job");
      return;
    }
  }
  if (outcome.status != CandidateStatus::ok) {
    record(index,
           failed_result(outcome.status, first_error_line(outcome.log), outcome.log,
                         outcome.compile_ms));
    return;
  }
  m_compiled.push_back(Compiled{index, outcome.artifact_path, outcome.entry_symbol,
                                outcome.compile_ms, outcome.registers, outcome.spills,
                                outcome.shared_bytes});
}

void TuneRun::learn_batching(const std::vector<CompileOutcome>& outcomes) {
  const std::int64_t id = m_plan.record.id;
  bool batched = false;
  for (const CompileOutcome& outcome : outcomes) {
    batched = batched || outcome.batch_size > 1;
    if (outcome.status == CandidateStatus::ok && !outcome.cached) {
      m_sizer.observe(static_cast<std::size_t>(outcome.batch_size), outcome.compile_ms);
    }
    if (!outcome.batch_error.empty() && !m_sizer.stopped()) {
      m_sizer.stop();
      KTUNE_LOG(info) << "job " << id << ": " << m_plan.record.kernel
                      << " compiles one config at a time from now on: " << outcome.batch_error;
    }
  }
  if (batched) ++m_counters.compile_batches;
  const std::size_t size = batch_size();
  if (size == m_logged_batch_size || m_sizer.stopped()) return;
  m_logged_batch_size = size;
  std::ostringstream measured;
  for (const auto& [configs, ms] : m_sizer.measured_ms()) {
    measured << (measured.tellp() > 0 ? ", " : "") << std::lround(ms) << " ms "
             << (configs == 1 ? std::string("alone") : "in batches of " + std::to_string(configs));
  }
  KTUNE_LOG(info) << "job " << id << ": compiles up to " << size
                  << " configs per request; measured per config: " << measured.str();
}

void TuneRun::start_bench(Compiled candidate) {
  const auto& plan = m_plan;
  const bool again = m_phase == Phase::finals;
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
                                  plan.record.dtype, candidate.artifact_path, m_reference_path,
                                  measure);
  if (bench_job) {
    use_compiled_entries(*bench_job, candidate.entry_symbol, m_reference_entry);
    target_cuda_device(plan.record, *bench_job);
  }
  if (!bench_job) {
    record(candidate.index,
           failed_result(CandidateStatus::invalid_config, bench_job.error().message, {},
                         candidate.compile_ms));
    return;
  }
  // A sure finalist needs no precise time before the finals: only while the job will hold them
  // (a best measured in this job, so that its time can be paired with the others').
  const MeasureSettings& rules = m_settings.measure;
  if (!again && m_best && rules.finalists >= 2 &&
      m_artifacts.count(static_cast<std::size_t>(m_best->config_index)) != 0) {
    bench_job->finalist_below_ms = (1.0 + rules.final_margin) * m_best->stats.median_ms;
  }
  if (!again && m_best && rules.prune_factor > 0) {
    bench_job->prune_above_ms = rules.prune_factor * m_best->stats.median_ms;
    if (rules.race_margin > 0) {
      bench_job->race_above_ms = (1.0 + rules.race_margin) * m_best->stats.median_ms;
    }
  }
  // The last finalist of a round retires its worker: every round after the first is measured in
  // a fresh process, so no one process's code and buffer placement names the winner.
  if (again && m_final_queue.empty()) bench_job->retire = true;
  m_benchmarking = true;
  submit(m_lane, "bench", bench_job->to_json(),
         bench_deadline(m_settings, plan.record.options.bench_timeout_s),
         [candidate, again](TuneRun& j, Result<nlohmann::json> reply,
                            const Delivery& delivery) {
           j.m_benchmarking = false;
           if (!reply && reply.error().code == ErrorCode::withdrawn) return; // cancelled
           j.m_timing.bench_sum_ms += delivery.request_ms;
           if (again) {
             j.on_final_measured(candidate, std::move(reply));
           } else {
             j.on_benched(candidate, std::move(reply), delivery.stderr_tail);
           }
         });
}

void TuneRun::on_benched(const Compiled& candidate, Result<nlohmann::json> reply,
                         const std::string& stderr_tail) {
  if (!reply) {
    record(candidate.index,
           worker_failure(reply.error(), CandidateStatus::runtime_error, CandidateStatus::timeout,
                          stderr_tail, candidate.compile_ms));
    return;
  }
  auto outcome = BenchOutcome::from_json(*reply);
  if (!outcome) {
    record(candidate.index,
           failed_result(CandidateStatus::runtime_error,
                         "unreadable bench outcome: " + outcome.error().message, {},
                         candidate.compile_ms));
    return;
  }
  if (!outcome->infra.empty()) {
    on_bench_infra(candidate, outcome->infra, outcome->infra_artifact);
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
  if (!r.unlocked.empty()) m_workers.note_unlocked(m_lane, r.unlocked);
  m_retaken += outcome->retaken;
  if (r.status != CandidateStatus::ok) r.log = stderr_tail;
  if (r.status == CandidateStatus::ok) m_artifacts[candidate.index] = candidate;
  record(candidate.index, std::move(r));
}

void TuneRun::on_bench_infra(const Compiled& candidate, const std::string& infra,
                             const std::string& artifact) {
  const std::string name = config_to_string(m_plan.configs[candidate.index]);
  if (++m_infra_attempts[candidate.index] >= k_infra_attempts) {
    fail("the host failed, not the candidates: " + infra + " (measuring " + name +
         ", twice); the configs not measured are not recorded and run in a later job");
    return;
  }
  KTUNE_LOG(warn) << "job " << m_plan.record.id << ": " << name << ": " << infra
                  << "; compiling it again";
  if (!artifact.empty() && artifact == m_reference_path) m_reference = ReferenceState::pending;
  m_to_compile.push_back(candidate.index);
}

} // namespace ktune::daemon
