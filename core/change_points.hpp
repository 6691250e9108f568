#pragma once
// Change points of a time series (a kernel's winning time, run after run): where its level steps.
//
// The method (airspeed velocity's, made robust): the series is fitted by a piecewise-constant
// function under an L1 cost -- each segment's level is its median, its cost the sum of absolute
// deviations from it -- plus a penalty per segment, minimised exactly by dynamic programming
// (O(n^2) segment costs, each O(n log n): fine for the hundreds of runs a key gets). The penalty
// is scaled by the series' own noise: sigma = 1.4826 x the median of |x[i+1] - x[i]| / sqrt(2)
// (the MAD of successive differences: a level step moves one difference only, so it hardly
// changes sigma), penalty = penalty_sigmas x sigma. A boundary of the fit is reported as a change
// point only when its two segments' levels differ by more than min_effect (relative to the
// earlier level) and each side holds at least min_segment points: a single outlier makes a
// segment of one point, which is never a step.
//
// Pure: no I/O, no allocation beyond the result.
#include <cstddef>
#include <vector>

namespace ktune {

struct ChangePointOptions {
  double penalty_sigmas = 4.0;   // penalty per segment, in sigmas of the series' noise
  double min_effect = 0.05;      // the smallest relative step reported (5%)
  std::size_t min_segment = 2;   // points each side of a reported step needs
};

struct ChangePoint {
  std::size_t index = 0;         // the first point of the new level
  double before = 0, after = 0;  // the medians of the segments either side
  [[nodiscard]] double ratio() const { return before > 0 ? after / before : 0; }
};

// The series' noise: 1.4826 x median |x[i+1] - x[i]| / sqrt(2); 0 for fewer than 2 points.
[[nodiscard]] double successive_difference_sigma(const std::vector<double>& series);

// Change points of `series` (oldest first), in index order. Fewer than 2 x min_segment points
// give none.
[[nodiscard]] std::vector<ChangePoint> find_change_points(const std::vector<double>& series,
                                                          const ChangePointOptions& options = {});

} // namespace ktune
