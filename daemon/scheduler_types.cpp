#include "daemon/scheduler_types.hpp"

#include <cmath>

namespace ktune::daemon {

namespace {

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
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

std::chrono::milliseconds compile_deadline(const SchedulerSettings& settings,
                                           const JobRecord& record) {
  const std::optional<double>& compile_timeout_s = record.options.compile_timeout_s;
  const double seconds = compile_timeout_s && *compile_timeout_s > 0
                             ? std::clamp(*compile_timeout_s,
                                          compile_timeout_floor_s(settings.compile_timeout_s),
                                          compile_timeout_limit_s(settings.compile_timeout_s))
                             : settings.compile_timeout_s;
  return seconds_to_ms(seconds);
}

} // namespace ktune::daemon
