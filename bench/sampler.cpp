#include "bench/sampler.hpp"

#include "core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <span>

namespace ktune {

std::string_view to_string(SampleStop stop) {
  switch (stop) {
    case SampleStop::more: return "more";
    case SampleStop::pruned: return "pruned";
    case SampleStop::raced: return "raced";
    case SampleStop::finalist: return "finalist";
    case SampleStop::converged: return "converged";
    case SampleStop::settled: return "settled";
    case SampleStop::capped: return "capped";
  }
  return "more";
}

Sampler::Sampler(const MeasureSettings& settings, double prune_above_ms, Clock::time_point start,
                 double race_above_ms)
    : m_settings(settings), m_prune_above_ms(prune_above_ms),
      m_prune_after(static_cast<std::size_t>(std::max(1, settings.prune_after))),
      m_race_above_ms(race_above_ms), m_start(start) {
  m_samples.reserve(static_cast<std::size_t>(std::clamp(settings.max_samples, 1, 4096)));
}

double Sampler::rsd() const {
  const auto n = static_cast<double>(m_samples.size());
  if (m_samples.size() < 2 || m_mean <= 0) return 0.0;
  return std::sqrt(m_m2 / (n - 1)) / m_mean;
}

bool Sampler::settled() const {
  if (m_rsd_history.size() < k_settle_window) return false;
  const double now = m_rsd_history.back();
  const auto window = std::span(m_rsd_history).last(k_settle_window);
  const auto [lo, hi] = std::minmax_element(window.begin(), window.end());
  return *hi - *lo <= k_settle_band * now;
}

double Sampler::median_lower_bound(std::vector<double>& times) {
  const auto n = static_cast<double>(times.size());
  const double rank = std::floor((n - k_race_z * std::sqrt(n)) / 2.0);
  const auto k = static_cast<std::size_t>(std::max(0.0, rank));
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(k), times.end());
  return times[k];
}

// The stops that read the median's 95% interval: finalist, raced on the finals' bound, and
// converged on target_error. Checked after every sample up to 64, then every 8th: computing the
// interval is O(n log n).
SampleStop Sampler::interval_stop(bool precise_enough) const {
  const std::size_t n = m_samples.size();
  const bool wanted = m_finalist_below_ms > 0 || (precise_enough && m_settings.target_error > 0);
  if (!wanted || n == 0 || (n > 64 && n % 8 != 0)) return SampleStop::more;
  const MedianInterval ci = median_interval(m_samples);
  if (m_finalist_below_ms > 0) {
    // Under 6 samples the interval is their range; the checked run is one more run in it.
    double low = ci.low_ms, high = ci.high_ms;
    if (m_checked_ms > 0 && n < 6) {
      low = std::min(low, m_checked_ms);
      high = std::max(high, m_checked_ms);
    }
    if (high < m_finalist_below_ms) return SampleStop::finalist;
    if (low > m_finalist_below_ms) return SampleStop::raced;
  }
  if (!precise_enough || m_settings.target_error <= 0) return SampleStop::more;
  std::vector<double> sorted(m_samples);
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n / 2), sorted.end());
  const double median = sorted[n / 2];
  const bool precise = median > 0 && ci.high_ms - ci.low_ms <= 2.0 * k_error_z * m_settings.target_error * median;
  return precise ? SampleStop::converged : SampleStop::more;
}

// Checked after every sample up to 64, then every 8th: the test is linear in the samples.
bool Sampler::raced_out() {
  const std::size_t n = m_race_times.size();
  if (n < k_race_min_samples || (n > 64 && n % 8 != 0)) return false;
  m_scratch.assign(m_race_times.begin(), m_race_times.end());
  return median_lower_bound(m_scratch) > m_race_above_ms;
}

void Sampler::screen(double ms) {
  if (!m_samples.empty()) return;
  m_checked_ms = ms;
  if (m_prune_above_ms > 0 && ms > m_prune_above_ms) {
    m_prune_after = 1;
    return;
  }
  m_warming = m_settings.warmup_ms > 0;
  m_warm_previous_ms = ms;
  m_warm_spent_ms = ms;
  m_warm_check_ms = ms;
}

bool Sampler::preempted(double wall_ms, double cpu_ms) {
  return wall_ms > cpu_ms * (1.0 + k_preempt_ratio) + k_preempt_slack_ms;
}

SampleStop Sampler::add(double ms, Clock::time_point now, std::optional<double> cpu_ms) {
  if (m_stop != SampleStop::more) return m_stop;
  const bool disturbed = cpu_ms && preempted(ms, *cpu_ms);
  if (disturbed && m_retakes_in_a_row < k_max_retakes &&
      m_retaken < m_samples.size() + static_cast<std::size_t>(k_max_retakes)) {
    ++m_retakes_in_a_row;
    ++m_retaken;
    return SampleStop::more;
  }
  m_retakes_in_a_row = 0;
  if (m_warming) {
    // Time spent warming: the runs' own, or the wall time since the first sample began when that
    // is more (a microsecond kernel behind a millisecond cache flush).
    const double wall_ms = std::chrono::duration<double, std::milli>(now - m_start).count();
    const double spent_ms = std::max(m_warm_spent_ms, m_warm_check_ms + wall_ms);
    const double own_ms = cpu_ms ? std::min(ms, *cpu_ms) : ms;
    const bool stable = spent_ms >= k_warm_min_ms &&
                        std::abs(own_ms - m_warm_previous_ms) <= k_warm_agreement * m_warm_previous_ms;
    m_warm_spent_ms += ms;
    if (!stable) {
      ++m_warmup_samples;
      m_warm_previous_ms = own_ms;
      if (std::max(m_warm_spent_ms, spent_ms) >= m_settings.warmup_ms) m_warming = false;
      return SampleStop::more;
    }
    m_warming = false;
  }
  m_samples.push_back(ms);
  m_measured_s += ms / 1000.0;
  const auto n = static_cast<double>(m_samples.size());
  const double delta = ms - m_mean;
  m_mean += delta / n;
  m_m2 += delta * (ms - m_mean);

  const auto count = static_cast<std::int64_t>(m_samples.size());
  const MeasureSettings& s = m_settings;
  if (m_prune_above_ms > 0 && m_prune_times.size() < m_prune_after) {
    m_prune_times.push_back(disturbed ? *cpu_ms : ms);
    if (m_prune_times.size() == m_prune_after) {
      std::vector<double> first(m_prune_times);
      std::nth_element(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(first.size() / 2),
                       first.end());
      if (first[first.size() / 2] > m_prune_above_ms) return m_stop = SampleStop::pruned;
    }
  }
  if (m_race_above_ms > 0) {
    m_race_times.push_back(disturbed ? *cpu_ms : ms);
    if (raced_out()) return m_stop = SampleStop::raced;
  }
  m_shortest_ms = count == 1 ? ms : std::min(m_shortest_ms, ms);
  const bool enough = count >= s.min_samples && m_measured_s >= s.min_time_s;
  // The finals' bound is a 30% margin: runs of a millisecond or more decide it at min_samples
  // runs, the checked run one of them when there is one (screen()), whatever min_time_s asks
  // for the median's precision.
  const std::int64_t runs = count + (m_checked_ms > 0 ? 1 : 0);
  if (enough || (runs >= s.min_samples && m_shortest_ms >= k_decisive_sample_ms)) {
    if (const SampleStop stop = interval_stop(enough); stop != SampleStop::more) return m_stop = stop;
  }
  if (enough) {
    const double current_rsd = rsd();
    if (current_rsd < s.target_rsd) return m_stop = SampleStop::converged;
    m_rsd_history.push_back(current_rsd);
    if (settled()) return m_stop = SampleStop::settled;
  }
  const double wall_s = std::chrono::duration<double>(now - m_start).count();
  if (m_measured_s >= s.max_time_s || count >= s.max_samples ||
      (count >= s.min_samples && wall_s >= s.max_time_s)) {
    return m_stop = SampleStop::capped;
  }
  return SampleStop::more;
}

BenchOutcome sampled_outcome(Sampler& sampler, const BenchJob& job) {
  BenchOutcome outcome;
  outcome.status = CandidateStatus::ok;
  outcome.pruned = sampler.reason() == SampleStop::pruned || sampler.reason() == SampleStop::raced;
  outcome.stop = std::string(to_string(sampler.reason()));
  outcome.retaken = static_cast<std::int64_t>(sampler.retaken());
  std::vector<double> samples = sampler.take_samples();
  outcome.samples_ms.assign(samples.begin(), samples.end());
  outcome.stats = summarize(std::move(samples));
  if (outcome.stats.median_ms > 0) {
    if (job.flops > 0) outcome.gflops = job.flops / (outcome.stats.median_ms * 1e6);
    if (job.bytes > 0) outcome.gbps = job.bytes / (outcome.stats.median_ms * 1e6);
  }
  return outcome;
}

} // namespace ktune
