#pragma once
// Sampler: when to stop taking timed samples of one candidate (DESIGN.md § Measurement). The
// host and CUDA runners feed it one sample at a time and stop when add() says so.
//
// Sampling stops, checked after every sample, at the first of:
//   pruned     prune_above_ms > 0, prune_after samples taken and their median (of a preempted
//              sample: its CPU time, see below) is above it: the candidate is clearly slower
//              than the best so far (prune_factor x its median), so measuring it precisely is
//              wasted time. A candidate whose checked run was already above it (screen()) is
//              tested after its first sample: two runs above twice the best are evidence enough;
//   raced      race_above_ms > 0, n >= k_race_min_samples and the lower end of the median's 99%
//              confidence interval (an order statistic) is above it: the candidate is slower
//              than the bound with 99% confidence. The scheduler's bound is (1 + final_margin) x
//              the best median so far, above which a candidate is never a finalist, so racing
//              only stops measuring candidates whose precise time decides nothing;
//   finalist   finalist_below_ms > 0, n >= min_samples, measured >= min_time_s or every sample
//              >= k_decisive_sample_ms, and the upper end of the median's 95% confidence interval
//              (median_interval; under 6 samples the samples' range) is below it: the candidate
//              is a finalist whatever more samples say, and the finals measure it again in
//              rounds, so its precise time here decides nothing (the scheduler passes
//              (1 + final_margin) x the best median while the job will hold finals). With the
//              same minimums and the interval's lower end above it (under 6 samples: even the
//              fastest sample is above it), the candidate will never be a finalist and its
//              precise time decides nothing either: raced. min_time_s is there for the median's
//              precision (a microsecond kernel needs many launches); samples of a millisecond
//              or more decide a 30% margin at min_samples. Disturbances only add time, so a
//              fastest sample above the bound is not noise (docs/ARCHITECTURE.md § Measurement).
//              The checked run (screen()) counts as one of the min_samples runs here and joins
//              the range under 6 samples;
//   converged  n >= min_samples, measured >= min_time_s, and rsd < target_rsd or the median is
//              known to within target_error: its distribution-free 95% confidence interval
//              (median_interval, order statistics) is at most 2 x 1.96 x target_error x the
//              median wide. The median is as precise as asked whatever the spread of single
//              samples, and a burst of disturbed samples (another process thrashing the shared
//              cache) widens it far less than it inflates the rsd;
//   settled    n >= min_samples, measured >= min_time_s, and the rsd estimate has stopped moving:
//              over the last k_settle_window samples it stayed within k_settle_band of its
//              current value (relative). A candidate whose noise is real, not a warm-up transient,
//              never converges under target_rsd; more samples then only cost time;
//   capped     measured >= max_time_s, n >= max_samples, or (with n >= min_samples) the wall time
//              since the first sample >= max_time_s (flushes and restores count there).
// "measured" is the sum of the samples. rsd is the sample standard deviation over the mean.
//
// Preempted samples (runners that know the thread's CPU time: the host runner reads
// CLOCK_THREAD_CPUTIME_ID around each launch): a sample whose wall time exceeds its CPU time by
// more than k_preempt_ratio of it plus k_preempt_slack_ms spent part of its time off the CPU (the
// thread was preempted, or waited for a page) and is not counted: add() returns `more` and the
// runner takes it again -- at most k_max_retakes times in a row, and at most one retake per
// counted sample beyond the first k_max_retakes, so a saturated machine (where a long sample is
// nearly always preempted) slows sampling by about 2x at most. A preempted sample that counts
// enters the prune and race tests with its CPU time (the candidate's own time), never its wall
// time: a candidate is never pruned on preempted wall times.
#include "jobs/bench_job.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace ktune {

enum class SampleStop { more, pruned, raced, finalist, converged, settled, capped };

[[nodiscard]] std::string_view to_string(SampleStop stop);

class Sampler {
public:
  using Clock = std::chrono::steady_clock;

  static constexpr std::size_t k_settle_window = 32;
  static constexpr double k_settle_band = 0.05;

  static constexpr std::size_t k_race_min_samples = 8;
  static constexpr double k_race_z = 2.576;  // two-sided 99%
  // Samples at least this long decide the finalist and raced stops at min_samples without
  // min_time_s (see `finalist` above).
  static constexpr double k_decisive_sample_ms = 1.0;
  static constexpr double k_error_z = 1.96;  // target_error is a standard error: 95% is 1.96 of it

  // `prune_above_ms` <= 0 never prunes, `race_above_ms` <= 0 never races. `start` is the time of
  // the first timed launch.
  Sampler(const MeasureSettings& settings, double prune_above_ms, Clock::time_point start,
          double race_above_ms = 0);

  // The lower end of the 99% confidence interval of the median of `times` (the order statistic
  // of rank floor((n - z sqrt(n)) / 2), distribution-free); `times` is reordered.
  [[nodiscard]] static double median_lower_bound(std::vector<double>& times);

  static constexpr double k_preempt_ratio = 0.05;
  static constexpr double k_preempt_slack_ms = 0.02;
  static constexpr int k_max_retakes = 3;

  // Whether a sample of `wall_ms` during which the thread ran `cpu_ms` was (partly) off the CPU.
  [[nodiscard]] static bool preempted(double wall_ms, double cpu_ms);

  // Records one sample (ms) taken before `now`; returns SampleStop::more to go on, otherwise why
  // sampling is over (then reason() returns the same). Without `cpu_ms` the sample is taken as
  // undisturbed; with it, a preempted sample is retaken (see above).
  SampleStop add(double ms, Clock::time_point now, std::optional<double> cpu_ms = std::nullopt);

  // The candidate's checked run (never a sample) took `ms` of CPU time. Call before the first
  // add(). Above the prune bound, the prune test comes after the first sample instead of after
  // prune_after, and there is no warm-up. Otherwise (warmup_ms > 0) the first samples are the
  // warm-up: not counted until one takes the same time as the run before it, within
  // k_warm_agreement, with at least k_warm_min_ms spent since the checked run began, or until
  // warmup_ms has been spent (the runs' own time, or the wall time when that is more: cache
  // flushes count). A kernel of milliseconds is usually warm after its checked run,
  // and then no sample is lost; a fixed warm-up cost every candidate 25 ms. Without screen() the
  // runner warms up itself (the CUDA runner: warmup_ms of launches).
  void screen(double ms);
  // See `finalist` above; <= 0 (the default) never stops a candidate for it.
  void finals_bound(double finalist_below_ms) { m_finalist_below_ms = finalist_below_ms; }
  // Samples not counted as the warm-up.
  [[nodiscard]] std::size_t warmup_samples() const { return m_warmup_samples; }

  static constexpr double k_warm_agreement = 0.05;
  static constexpr double k_warm_min_ms = 2.0;

  [[nodiscard]] SampleStop reason() const { return m_stop; }
  [[nodiscard]] std::size_t count() const { return m_samples.size(); }
  // Samples dropped as preempted and taken again.
  [[nodiscard]] std::size_t retaken() const { return m_retaken; }
  [[nodiscard]] double rsd() const;
  // The samples so far, in order; leaves the sampler empty.
  [[nodiscard]] std::vector<double> take_samples() { return std::move(m_samples); }

private:
  [[nodiscard]] bool settled() const;
  [[nodiscard]] bool raced_out();
  [[nodiscard]] SampleStop interval_stop(bool precise_enough) const;

  MeasureSettings m_settings;
  double m_prune_above_ms;
  std::size_t m_prune_after;
  double m_race_above_ms;
  double m_finalist_below_ms = 0;
  Clock::time_point m_start;
  std::vector<double> m_samples;
  std::vector<double> m_prune_times; // the first prune_after samples as the prune test sees them
  std::vector<double> m_race_times;  // every sample as the race test sees it (when racing)
  std::vector<double> m_scratch;
  std::size_t m_retaken = 0;
  bool m_warming = false;
  double m_warm_previous_ms = 0;
  double m_warm_spent_ms = 0;
  double m_warm_check_ms = 0;
  std::size_t m_warmup_samples = 0;
  int m_retakes_in_a_row = 0;
  std::vector<double> m_rsd_history; // rsd after each sample once min_samples/min_time are met
  double m_measured_s = 0;
  double m_shortest_ms = 0;          // the shortest counted sample
  double m_checked_ms = 0;           // the checked run's CPU time (screen()); 0 = none
  double m_mean = 0, m_m2 = 0;       // Welford's running moments
  SampleStop m_stop = SampleStop::more;
};

// A measured candidate's `ok` outcome from its finished sampler (which is left empty): why
// sampling stopped (pruned/raced set `pruned`), the samples and their statistics, the samples
// retaken, and GFLOP/s and GB/s from the job's metrics.
[[nodiscard]] BenchOutcome sampled_outcome(Sampler& sampler, const BenchJob& job);

} // namespace ktune
