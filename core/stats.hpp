#pragma once
// Summary statistics of timed samples (milliseconds).
#include <cstddef>
#include <vector>

namespace ktune {

struct SampleStats {
  std::size_t n = 0;
  double min_ms = 0, max_ms = 0, median_ms = 0, mean_ms = 0, stddev_ms = 0;
  double q1_ms = 0, q3_ms = 0;

  // Relative standard deviation (stddev / mean); 0 when n < 2 or mean == 0.
  [[nodiscard]] double rsd() const;
};

// Quartiles by linear interpolation between order statistics; stddev is the sample (n-1) one.
// An empty input gives n == 0 and zeros.
[[nodiscard]] SampleStats summarize(std::vector<double> samples_ms);

} // namespace ktune
