#include "core/stats.hpp"

#include <boost/math/distributions/students_t.hpp>

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

SampleStats pool_rounds(const std::vector<SampleStats>& rounds) {
  SampleStats s;
  std::vector<double> medians, q1s, q3s;
  double sum = 0;
  for (const auto& r : rounds) {
    if (r.n == 0) continue;
    s.min_ms = s.n == 0 ? r.min_ms : std::min(s.min_ms, r.min_ms);
    s.max_ms = s.n == 0 ? r.max_ms : std::max(s.max_ms, r.max_ms);
    s.n += r.n;
    sum += r.mean_ms * static_cast<double>(r.n);
    medians.push_back(r.median_ms);
    q1s.push_back(r.q1_ms);
    q3s.push_back(r.q3_ms);
  }
  if (s.n == 0) return s;
  s.mean_ms = sum / static_cast<double>(s.n);
  // Squares about the pooled mean: each round's own (n-1) s^2 plus n (its mean - pooled mean)^2.
  double squares = 0;
  for (const auto& r : rounds) {
    if (r.n == 0) continue;
    const double shift = r.mean_ms - s.mean_ms;
    squares += static_cast<double>(r.n - 1) * r.stddev_ms * r.stddev_ms +
               static_cast<double>(r.n) * shift * shift;
  }
  if (s.n >= 2) s.stddev_ms = std::sqrt(squares / static_cast<double>(s.n - 1));
  auto median_of = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return quantile(values, 0.5);
  };
  s.median_ms = median_of(std::move(medians));
  s.q1_ms = median_of(std::move(q1s));
  s.q3_ms = median_of(std::move(q3s));
  return s;
}

FinalsVerdict judge_finals(const std::vector<std::vector<double>>& round_ms, double tie_margin) {
  FinalsVerdict v;
  if (round_ms.empty()) return v;
  const std::size_t rounds = round_ms.front().size();
  std::vector<double> medians;
  for (const auto& row : round_ms) {
    std::vector<double> sorted(row);
    std::sort(sorted.begin(), sorted.end());
    medians.push_back(quantile(sorted, 0.5));
  }
  v.best = static_cast<std::size_t>(std::min_element(medians.begin(), medians.end()) -
                                    medians.begin());
  const auto& best = round_ms[v.best];
  const double log_margin = std::log1p(tie_margin);
  const double log_limit = std::log1p(2 * tie_margin);
  for (const auto& row : round_ms) {
    // Log ratios to the best, round by round: their median, their mean and its standard error.
    std::vector<double> logs;
    for (std::size_t r = 0; r < rounds; ++r) logs.push_back(std::log(row[r] / best[r]));
    double mean = 0;
    for (double d : logs) mean += d;
    mean /= static_cast<double>(rounds);
    double low = mean;
    if (rounds >= 2) {
      double squares = 0;
      for (double d : logs) squares += (d - mean) * (d - mean);
      const double se = std::sqrt(squares / static_cast<double>(rounds - 1)) /
                        std::sqrt(static_cast<double>(rounds));
      low = mean - t_quantile(0.975, rounds - 1) * se;
    }
    std::sort(logs.begin(), logs.end());
    const double median = quantile(logs, 0.5);
    v.ratio.push_back(std::exp(median));
    v.ratio_low.push_back(std::exp(low));
    v.tied.push_back(low <= log_margin && median <= log_limit);
  }
  return v;
}

double t_quantile(double p, std::size_t df) {
  return boost::math::quantile(
      boost::math::students_t_distribution<double>(static_cast<double>(std::max<std::size_t>(df, 1))), p);
}

MedianInterval median_interval(std::vector<double> samples_ms) {
  if (samples_ms.empty()) return {};
  std::sort(samples_ms.begin(), samples_ms.end());
  const std::size_t n = samples_ms.size();
  if (n < 6) return {samples_ms.front(), samples_ms.back()};
  // 1-based ranks n/2 -+ 1.96 sqrt(n)/2, widened outward to whole ranks.
  const double half = 1.959964 * std::sqrt(static_cast<double>(n)) / 2.0;
  const double centre = static_cast<double>(n) / 2.0;
  const auto low_rank = static_cast<std::size_t>(std::max(1.0, std::floor(centre - half)));
  const auto high_rank = static_cast<std::size_t>(
      std::min(static_cast<double>(n), std::ceil(centre + 1.0 + half)));
  return {samples_ms[low_rank - 1], samples_ms[high_rank - 1]};
}

RankTest mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  RankTest out;
  if (a.empty() || b.empty()) return out;
  struct Item {
    double value;
    bool from_a;
  };
  std::vector<Item> all;
  all.reserve(a.size() + b.size());
  for (double x : a) all.push_back({x, true});
  for (double x : b) all.push_back({x, false});
  std::sort(all.begin(), all.end(), [](const Item& l, const Item& r) { return l.value < r.value; });
  // Mid-ranks over runs of ties; the sum of t^3 - t over tie runs for the variance correction.
  double rank_sum_a = 0, tie_term = 0;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].value == all[i].value) ++j;
    const double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k) {
      if (all[k].from_a) rank_sum_a += mid_rank;
    }
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  const double n1 = static_cast<double>(a.size()), n2 = static_cast<double>(b.size());
  const double n = n1 + n2;
  out.u = rank_sum_a - n1 * (n1 + 1) / 2.0;
  const double mean = n1 * n2 / 2.0;
  const double variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)));
  if (variance <= 0) return out; // every value equal
  const double distance = std::max(0.0, std::abs(out.u - mean) - 0.5);
  out.p_value = std::min(1.0, std::erfc(distance / std::sqrt(variance) / std::sqrt(2.0)));
  return out;
}

} // namespace ktune
