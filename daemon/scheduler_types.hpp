#pragma once
// What the Scheduler (daemon/scheduler.hpp) and its runs (daemon/tune_run.hpp) share: the
// settings, the deadlines derived from them, the counters and the view of a job.
#include "db/store.hpp"
#include "jobs/bench_job.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

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

// The compile deadline of `record`'s compiles: its own compile_timeout_s when > 0, kept within
// [compile_timeout_floor_s, compile_timeout_limit_s] of settings.compile_timeout_s; else
// settings.compile_timeout_s.
[[nodiscard]] std::chrono::milliseconds compile_deadline(const SchedulerSettings& settings,
                                                         const JobRecord& record);

// What the scheduler has counted since ktuned started (/metrics, `ktune top`).
struct SchedulerCounters {
  std::map<std::string, std::uint64_t> candidates; // results recorded (reused rows included), by status
  std::map<std::string, std::uint64_t> jobs_ended; // tune jobs and compile checks, by final state
  std::uint64_t compile_cache_hits = 0;            // candidate and reference compiles of tune jobs
  std::uint64_t compile_cache_misses = 0;
  std::uint64_t compile_batches = 0;               // compile requests that built several configs in one run
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

} // namespace ktune::daemon
