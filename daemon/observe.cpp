#include "daemon/observe.hpp"

#include "core/status.hpp"
#include "daemon/process_metrics.hpp"
#include "daemon/replies.hpp"

#include <chrono>
#include <string_view>

#include <unistd.h>

namespace ktune::daemon {

namespace {

constexpr CandidateStatus k_statuses[] = {
    CandidateStatus::ok,          CandidateStatus::invalid_config, CandidateStatus::compile_error,
    CandidateStatus::compile_timeout, CandidateStatus::launch_error, CandidateStatus::runtime_error,
    CandidateStatus::mismatch,    CandidateStatus::crash,          CandidateStatus::timeout,
    CandidateStatus::worker_lost};
constexpr JobState k_end_states[] = {JobState::done, JobState::failed, JobState::cancelled,
                                     JobState::interrupted};

// The compile pool is lane "" inside ktuned; metrics and `top` call it "compile".
std::string lane_label(const std::string& lane) { return lane.empty() ? "compile" : lane; }

std::uint64_t count_of(const std::map<std::string, std::uint64_t>& counts, std::string_view key) {
  const auto it = counts.find(std::string(key));
  return it == counts.end() ? 0 : it->second;
}

nlohmann::json seconds_json(const WorkerSeconds& s) {
  return {{"compile", s.compile_s}, {"bench", s.bench_s}, {"other", s.other_s},
          {"idle", s.idle_s}};
}

void seconds_samples(Exposition& out, std::string_view name, Exposition::Labels labels,
                     const WorkerSeconds& s) {
  const std::pair<const char*, double> activities[] = {
      {"compile", s.compile_s}, {"bench", s.bench_s}, {"other", s.other_s}, {"idle", s.idle_s}};
  labels.emplace_back("activity", "");
  for (const auto& [activity, value] : activities) {
    labels.back().second = activity;
    out.sample(name, labels, value);
  }
}

#if defined(__clang__)
constexpr const char* k_compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
constexpr const char* k_compiler = "gcc " __VERSION__;
#else
constexpr const char* k_compiler = "unknown";
#endif

// The process collector's families, named as every Prometheus client library names them.
void process_samples(Exposition& out, const ProcessFigures& p) {
  const auto one = [&](std::string_view name, std::string_view type, std::string_view help,
                       const std::optional<double>& value) {
    if (!value) return;
    out.family(name, type, help);
    out.sample(name, {}, *value);
  };
  one("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
      p.cpu_seconds);
  one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.resident_bytes);
  one("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", p.virtual_bytes);
  one("process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds);
  one("process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds);
  one("process_start_time_seconds", "gauge",
      "Start time of the process since unix epoch in seconds.", p.start_time_seconds);
}

} // namespace

void LookupCounters::add(std::optional<Rung> rung, double seconds_taken) {
  if (!rung) {
    ++miss;
  } else if (*rung == Rung::exact) {
    ++exact;
  } else if (*rung == Rung::stale) {
    ++stale;
  } else if (*rung == Rung::nearest) {
    ++nearest;
  } else {
    ++fallback_default;
  }
  seconds.observe(seconds_taken);
}

namespace {

// The queue and the jobs' counters: queued by priority, queued/running, ended, candidates, the
// compile cache.
void job_samples(Exposition& out, const Scheduler& scheduler) {
  const SchedulerCounters& counters = scheduler.counters();
  out.family("ktune_queued_jobs", "gauge",
             "Jobs waiting in the queue, by priority (tune-on-miss jobs are -1000).");
  for (const auto& [priority, count] : scheduler.queued_by_priority()) {
    out.sample("ktune_queued_jobs", {{"priority", std::to_string(priority)}},
               static_cast<double>(count));
  }
  out.family("ktune_jobs", "gauge", "Jobs queued or running now (tunes and compile checks).");
  out.sample("ktune_jobs", {{"state", "queued"}}, static_cast<double>(scheduler.queued()));
  out.sample("ktune_jobs", {{"state", "running"}}, static_cast<double>(scheduler.running()));
  out.family("ktune_jobs_ended_total", "counter", "Jobs that ended since ktuned started, by state.");
  for (const JobState state : k_end_states) {
    const auto name = to_string(state);
    out.sample("ktune_jobs_ended_total", {{"state", std::string(name)}},
               static_cast<double>(count_of(counters.jobs_ended, name)));
  }
  out.family("ktune_candidates_total", "counter",
             "Candidate results recorded since ktuned started (reused rows included), by status.");
  for (const CandidateStatus status : k_statuses) {
    const auto name = to_string(status);
    out.sample("ktune_candidates_total", {{"status", std::string(name)}},
               static_cast<double>(count_of(counters.candidates, name)));
  }
  out.family("ktune_compile_cache_hits_total", "counter",
             "Compiles of tune jobs answered from the compile cache.");
  out.sample("ktune_compile_cache_hits_total", {}, static_cast<double>(counters.compile_cache_hits));
  out.family("ktune_compile_cache_misses_total", "counter",
             "Compiles of tune jobs that ran the compiler.");
  out.sample("ktune_compile_cache_misses_total", {},
             static_cast<double>(counters.compile_cache_misses));
  out.family("ktune_compile_batches_total", "counter",
             "Compile requests of tune jobs that built several configs in one compiler run.");
  out.sample("ktune_compile_batches_total", {}, static_cast<double>(counters.compile_batches));

}

// The worker slots and lanes: seconds per activity, liveness, restarts.
void worker_samples(Exposition& out, const WorkerPool& workers) {
  const auto slots = workers.slots();
  out.family("ktune_worker_seconds_total", "counter",
             "Seconds each worker slot spent per activity: compile and bench requests, other "
             "requests (the device probe), idle while alive.");
  for (const auto& slot : slots) {
    seconds_samples(out, "ktune_worker_seconds_total",
                    {{"lane", lane_label(slot.lane)}, {"worker", std::to_string(slot.slot)}},
                    slot.seconds);
  }
  out.family("ktune_worker_up", "gauge", "1 while the worker slot has a live worker process.");
  for (const auto& slot : slots) {
    out.sample("ktune_worker_up",
               {{"lane", lane_label(slot.lane)}, {"worker", std::to_string(slot.slot)}},
               slot.alive ? 1 : 0);
  }
  const auto lanes = workers.lane_states();
  out.family("ktune_lane_seconds_total", "counter",
             "Seconds per device lane: compiles made for its jobs, its bench worker's requests, "
             "and idle (the device measured nothing).");
  for (const auto& lane : lanes) {
    seconds_samples(out, "ktune_lane_seconds_total", {{"lane", lane.device}}, lane.seconds);
  }
  out.family("ktune_worker_restarts_total", "counter",
             "Workers started to replace one that exited (crash, deadline kill, idle exit, lost "
             "device), by lane.");
  for (const auto& [lane, count] : workers.restarts()) {
    out.sample("ktune_worker_restarts_total", {{"lane", lane_label(lane)}},
               static_cast<double>(count));
  }

}

// Lookups by rung and their latency.
void lookup_samples(Exposition& out, const LookupCounters& lookups) {
  out.family("ktune_lookups_total", "counter",
             "Lookups answered, by rung of the ladder; miss = answered with an error.");
  out.sample("ktune_lookups_total", {{"rung", "exact"}}, static_cast<double>(lookups.exact));
  out.sample("ktune_lookups_total", {{"rung", "stale"}}, static_cast<double>(lookups.stale));
  out.sample("ktune_lookups_total", {{"rung", "nearest"}}, static_cast<double>(lookups.nearest));
  out.sample("ktune_lookups_total", {{"rung", "default"}},
             static_cast<double>(lookups.fallback_default));
  out.sample("ktune_lookups_total", {{"rung", "miss"}}, static_cast<double>(lookups.miss));
  out.family("ktune_lookup_duration_seconds", "histogram",
             "Time ktuned took to answer a lookup, from the decoded request to the reply text.");
  out.histogram("ktune_lookup_duration_seconds", {}, lookups.seconds);

}

// The store writer: write latency, failures, whether it is stalled.
void store_samples(Exposition& out, const StoreWriter& writer) {
  out.family("ktune_store_write_duration_seconds", "histogram",
             "Time of each attempt at a store write (one SQLite transaction), committed or not.");
  out.histogram("ktune_store_write_duration_seconds", {}, writer.write_seconds());
  out.family("ktune_store_write_failures_total", "counter",
             "Store write attempts that failed (a busy, full or failing database; retried).");
  out.sample("ktune_store_write_failures_total", {}, static_cast<double>(writer.failed_writes()));
  const auto stall = writer.stall();
  out.family("ktune_store_stalled", "gauge", "1 while store writes wait for the database.");
  out.sample("ktune_store_stalled", {}, stall ? 1 : 0);
  out.family("ktune_store_writes_waiting", "gauge", "Store writes queued behind a stalled one.");
  out.sample("ktune_store_writes_waiting", {}, stall ? static_cast<double>(stall->waiting) : 0);
}

} // namespace

std::string render_metrics(const DaemonView& view) {
  Exposition out;

  out.family("ktune_build_info", "gauge",
             "1, labelled with the version of ktuned and the compiler that built it.");
  out.sample("ktune_build_info", {{"version", KTUNE_VERSION}, {"compiler", k_compiler}}, 1);
  process_samples(out, read_process_figures());
  out.family("ktune_uptime_seconds", "gauge", "Seconds since ktuned started.");
  out.sample("ktune_uptime_seconds", {}, view.uptime_s);
  out.family("ktune_connections", "gauge", "Open client connections on the protocol socket.");
  out.sample("ktune_connections", {}, static_cast<double>(view.connections));

  job_samples(out, view.scheduler);
  worker_samples(out, view.workers);
  lookup_samples(out, view.lookups);
  store_samples(out, view.writer);
  return out.text();
}

nlohmann::json top_view(const DaemonView& view) {
  const Scheduler& scheduler = view.scheduler;
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobView& job : scheduler.jobs()) {
    const JobRecord& r = job.record;
    jobs.push_back({{"job", r.id},
                    {"kind", job.compile_check ? "compile_check" : "tune"},
                    {"state", job.running ? "running" : "queued"},
                    {"phase", job.phase},
                    {"kernel", r.kernel},
                    {"shape", r.shape},
                    {"dtype", r.dtype},
                    {"device", r.device},
                    {"strategy", r.strategy},
                    {"priority", r.options.priority},
                    {"done", job.done},
                    {"total", job.total},
                    {"failed", job.failed},
                    {"best_median_ms", job.best_median_ms ? nlohmann::json(*job.best_median_ms)
                                                          : nlohmann::json()},
                    {"best_config", job.best_config.empty()
                                        ? nlohmann::json()
                                        : stored_config_to_json(job.best_config)},
                    {"params", param_order(job.best_config)},
                    {"running_s", job.running_s}});
  }
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& lane : view.workers.lane_states()) {
    const std::int64_t job = scheduler.running_on(lane.device);
    lanes.push_back({{"device", lane.device},
                     {"job", job != 0 ? nlohmann::json(job) : nlohmann::json()},
                     {"busy", view.workers.busy(lane.device) > 0},
                     {"waiting", view.workers.waiting(lane.device)},
                     {"restarts", lane.restarts},
                     {"seconds", seconds_json(lane.seconds)}});
  }
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& slot : view.workers.slots()) {
    workers.push_back({{"lane", lane_label(slot.lane)},
                       {"worker", slot.slot},
                       {"role", std::string(to_string(slot.role))},
                       {"alive", slot.alive},
                       {"busy", slot.busy.empty() ? nlohmann::json() : nlohmann::json(slot.busy)},
                       {"seconds", seconds_json(slot.seconds)}});
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const RecentFailure& f : scheduler.recent_failures()) {
    failures.push_back(
        {{"job", f.job},
         {"kernel", f.kernel},
         {"shape", f.shape},
         {"device", f.device},
         {"config", stored_config_to_json(f.config)},
         {"params", param_order(f.config)},
         {"status", f.status},
         {"reason", f.reason},
         {"at_ms", std::chrono::duration_cast<std::chrono::milliseconds>(f.at.time_since_epoch())
                       .count()}});
  }
  const SchedulerCounters& counters = scheduler.counters();
  std::uint64_t candidates = 0;
  for (const auto& [status, count] : counters.candidates) candidates += count;
  const LookupCounters& lookups = view.lookups;
  return {{"uptime_s", view.uptime_s},
          {"connections", view.connections},
          {"jobs", std::move(jobs)},
          {"lanes", std::move(lanes)},
          {"workers", std::move(workers)},
          {"throughput",
           {{"results_last_minute", scheduler.results_last_minute()},
            {"results", candidates},
            {"lookups", lookups.exact + lookups.stale + lookups.nearest + lookups.fallback_default + lookups.miss}}},
          {"candidates", counters.candidates},
          {"compile_cache", {{"hits", counters.compile_cache_hits},
                             {"misses", counters.compile_cache_misses}}},
          {"compile_batches", counters.compile_batches},
          {"store", {{"stalled", view.writer.stall().has_value()}}},
          {"failures", std::move(failures)}};
}

} // namespace ktune::daemon

namespace ktune::daemon {

namespace {

// A lane's machine-wide measurement lock in `stats`: its file, and whether measurements ran
// without it (how many, and the latest reason).
nlohmann::json measure_lock_json(const WorkerPool& workers, const std::string& lane) {
  const std::string path = workers.measure_lock_path(lane);
  const WorkerPool::Unlocked unlocked = workers.unlocked(lane);
  return {{"path", path.empty() ? nlohmann::json() : nlohmann::json(path)},
          {"unlocked_measurements", unlocked.measurements},
          {"unlocked", unlocked.why.empty() ? nlohmann::json() : nlohmann::json(unlocked.why)}};
}

// Each device lane: its running job, whether its worker is busy, requests waiting, its lock.
nlohmann::json lanes_json(const DaemonView& view) {
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& lane : view.workers.lanes()) {
    const std::int64_t job = view.scheduler.running_on(lane);
    nlohmann::json entry = {{"device", lane},
                            {"job", job != 0 ? nlohmann::json(job) : nlohmann::json()},
                            {"busy", view.workers.busy(lane) > 0},
                            {"waiting", view.workers.waiting(lane)}};
    if (lane == "cpu") {
      const auto cpu = view.workers.bench_cpu();
      entry["bench_cpu"] = cpu ? nlohmann::json(*cpu) : nlohmann::json();
      entry["bench_cpu_claimed"] = view.workers.bench_cpu_claimed();
      const std::string& problem = view.workers.claim_problem();
      entry["bench_cpu_claim_problem"] = problem.empty() ? nlohmann::json() : nlohmann::json(problem);
    }
    entry["measure_lock"] = measure_lock_json(view.workers, lane);
    lanes.push_back(std::move(entry));
  }
  return lanes;
}

// {"stalled": false} or the store writer's stall: reason, writes waiting, whether rows spill.
nlohmann::json store_json(const StoreWriter& writer) {
  const auto stall = writer.stall();
  if (!stall) return {{"stalled", false}};
  return {{"stalled", true},
          {"reason", stall->reason},
          {"waiting", stall->waiting},
          {"spilling", stall->spilling},
          {"description", writer.describe_stall()}};
}

} // namespace

nlohmann::json stats_view(const DaemonView& view, const StatsSources& sources) {
  const DaemonConfig& config = sources.config;
  const WorkerPool& workers = view.workers;
  return nlohmann::json{
      {"pid", ::getpid()},
      {"version", KTUNE_VERSION},
      {"uptime_s", view.uptime_s},
      {"connections", view.connections},
      {"jobs_queued", view.scheduler.queued()},
      {"jobs_running", view.scheduler.running()},
      {"workers",
       {{"compile", workers.alive(WorkerRole::compile)},
        {"bench", workers.alive(WorkerRole::bench)},
        {"compile_limit", workers.compile_limit()},
        {"compile_waiting", workers.waiting("")}}},
      {"lanes", lanes_json(view)},
      {"store", store_json(view.writer)},
      {"device", {{"name", sources.devices.cpu().name},
                  {"fingerprint", sources.devices.cpu().fingerprint}}},
      {"max_message_bytes", config.max_message_bytes},
      {"db", config.db},
      {"socket", config.socket},
      {"kernel_dirs", sources.kernel_dirs},
      {"measure", config.measure.to_json()},
      {"limits", {{"compile_timeout_s", config.compile_timeout_s},
                  {"bench_timeout_s", config.bench_timeout_s},
                  {"bench_timeout_min_s", config.bench_timeout_min_s},
                  {"bench_timeout_max_s", config.bench_timeout_max_s},
                  {"worker_memory_mb", config.worker_memory_mb},
                  {"compile_memory_mb", config.compile_memory_mb}}},
      {"metrics", sources.metrics_address.empty() ? nlohmann::json()
                                                  : nlohmann::json(sources.metrics_address)},
      {"table", sources.table},
  };
}

} // namespace ktune::daemon
