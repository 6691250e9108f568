#include "core/stats.hpp"

#include <algorithm>
#include <cmath>

namespace ktune {
namespace {

// Linear interpolation between order statistics of sorted data at fraction p (0..1):
// position p * (n - 1), the method of numpy's default percentile.
double quantile(const std::vector<double>& sorted, double p) {
  const double position = p * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

} // namespace

double SampleStats::rsd() const {
  if (n < 2 || mean_ms == 0) return 0;
  return stddev_ms / mean_ms;
}

SampleStats summarize(std::vector<double> samples_ms) {
  SampleStats s;
  s.n = samples_ms.size();
  if (s.n == 0) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  s.min_ms = samples_ms.front();
  s.max_ms = samples_ms.back();
  s.median_ms = quantile(samples_ms, 0.5);
  s.q1_ms = quantile(samples_ms, 0.25);
  s.q3_ms = quantile(samples_ms, 0.75);
  double sum = 0;
  for (double x : samples_ms) sum += x;
  s.mean_ms = sum / static_cast<double>(s.n);
  if (s.n >= 2) {
    double squares = 0;
    for (double x : samples_ms) squares += (x - s.mean_ms) * (x - s.mean_ms);
    s.stddev_ms = std::sqrt(squares / static_cast<double>(s.n - 1));
  }
  return s;
}

} // namespace ktune
