#include "core/change_points.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>

namespace ktune {

namespace {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

// The L1 cost of a growing segment (sum of |x - m| for m a median of the points), kept with two
// heaps: O(log n) per point added.
class RunningL1 {
public:
  void add(double x) {
    if (m_low.empty() || x <= m_low.top()) {
      m_low.push(x);
      m_low_sum += x;
    } else {
      m_high.push(x);
      m_high_sum += x;
    }
    if (m_low.size() > m_high.size() + 1) {
      const double moved = m_low.top();
      m_low.pop();
      m_low_sum -= moved;
      m_high.push(moved);
      m_high_sum += moved;
    } else if (m_high.size() > m_low.size()) {
      const double moved = m_high.top();
      m_high.pop();
      m_high_sum -= moved;
      m_low.push(moved);
      m_low_sum += moved;
    }
  }
  [[nodiscard]] double cost() const {
    const double m = m_low.top();
    return (m * static_cast<double>(m_low.size()) - m_low_sum) +
           (m_high_sum - m * static_cast<double>(m_high.size()));
  }

private:
  std::priority_queue<double> m_low;                                              // max-heap
  std::priority_queue<double, std::vector<double>, std::greater<double>> m_high;  // min-heap
  double m_low_sum = 0, m_high_sum = 0;
};

} // namespace

double successive_difference_sigma(const std::vector<double>& series) {
  if (series.size() < 2) return 0;
  std::vector<double> diffs;
  diffs.reserve(series.size() - 1);
  for (std::size_t i = 1; i < series.size(); ++i) diffs.push_back(std::abs(series[i] - series[i - 1]));
  return 1.4826 * median_of(std::move(diffs)) / std::sqrt(2.0);
}

namespace {

double level(const std::vector<double>& series, std::size_t a, std::size_t b) {
  return median_of({series.begin() + static_cast<std::ptrdiff_t>(a),
                    series.begin() + static_cast<std::ptrdiff_t>(b)});
}

// The segmentation of least L1 cost plus `penalty` per segment beyond the first (optimal
// partitioning): the segment starts, oldest first, then n.
std::vector<std::size_t> optimal_segments(const std::vector<double>& series, double penalty) {
  const std::size_t n = series.size();
  // best[j]: the least cost of the first j points; start[j]: where its last segment starts.
  std::vector<double> best(n + 1, std::numeric_limits<double>::infinity());
  std::vector<std::size_t> start(n + 1, 0);
  best[0] = -penalty; // the first segment pays no penalty
  std::vector<std::vector<double>> cost(n); // cost[i][j - i - 1]: points i .. j-1
  for (std::size_t i = 0; i < n; ++i) {
    RunningL1 segment;
    cost[i].reserve(n - i);
    for (std::size_t j = i; j < n; ++j) {
      segment.add(series[j]);
      cost[i].push_back(segment.cost());
    }
  }
  for (std::size_t j = 1; j <= n; ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      const double total = best[i] + penalty + cost[i][j - i - 1];
      if (total < best[j]) { // strict: on a tie the longer last segment (fewer segments) wins
        best[j] = total;
        start[j] = i;
      }
    }
  }
  std::vector<std::size_t> bounds;
  for (std::size_t j = n; j > 0; j = start[j]) bounds.push_back(start[j]);
  std::reverse(bounds.begin(), bounds.end());
  bounds.push_back(n);
  return bounds;
}

// Segments shorter than min_segment (an outlier, a level not yet confirmed by a second run)
// join the neighbour whose level is nearer, shortest first, until none is left or one remains.
void join_short_segments(const std::vector<double>& series, std::size_t min_segment,
                         std::vector<std::size_t>& kept) {
  while (kept.size() > 2) {
    std::size_t shortest = 0;
    for (std::size_t s = 1; s + 1 < kept.size(); ++s) {
      if (kept[s + 1] - kept[s] < kept[shortest + 1] - kept[shortest]) shortest = s;
    }
    if (kept[shortest + 1] - kept[shortest] >= min_segment) break;
    const double own = level(series, kept[shortest], kept[shortest + 1]);
    const bool has_before = shortest > 0, has_after = shortest + 2 < kept.size();
    bool join_before = has_before;
    if (has_before && has_after) {
      join_before = std::abs(level(series, kept[shortest - 1], kept[shortest]) - own) <=
                    std::abs(level(series, kept[shortest + 1], kept[shortest + 2]) - own);
    }
    // Joining the segment before removes this segment's start; joining the one after, the next start.
    kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(join_before ? shortest : shortest + 1));
  }
}

} // namespace

std::vector<ChangePoint> find_change_points(const std::vector<double>& series,
                                            const ChangePointOptions& options) {
  const std::size_t n = series.size();
  const std::size_t min_segment = std::max<std::size_t>(options.min_segment, 1);
  if (n < 2 * min_segment) return {};
  std::vector<double> magnitudes;
  for (double x : series) magnitudes.push_back(std::abs(x));
  // A series without noise (identical runs) still needs a penalty, else every point would be a
  // segment of its own: a floor of 0.1% of its typical magnitude.
  const double sigma = std::max(successive_difference_sigma(series), 1e-3 * median_of(magnitudes));
  if (sigma <= 0) return {};
  // The penalty grows with the series' length: the best split of a flat noisy series saves
  // more the longer it is.
  const double penalty = options.penalty_sigmas * sigma * std::max(1.0, std::log(static_cast<double>(n)));
  std::vector<std::size_t> kept = optimal_segments(series, penalty); // segment starts, then n
  join_short_segments(series, min_segment, kept);

  std::vector<ChangePoint> points;
  for (std::size_t s = 1; s + 1 < kept.size(); ++s) {
    const std::size_t a = kept[s - 1], b = kept[s], c = kept[s + 1];
    ChangePoint point;
    point.index = b;
    point.before = level(series, a, b);
    point.after = level(series, b, c);
    const double step = std::abs(point.after - point.before);
    if (point.before != 0 && step > options.min_effect * std::abs(point.before)) points.push_back(point);
  }
  return points;
}

} // namespace ktune
