#pragma once
// Comparing a table of winners with a baseline table (the regression check `ktune sweep` runs).
//
// Per key: present in both or in one only, whether the winning config changed, and the time
// ratio current/baseline of the median times. A key regressed when
//   ratio > 1 + max_regression
// and, when both rows carry statistics (n >= 2), the two 95% confidence intervals do not overlap.
// Each interval is centred on the row's median_ms with half-width t(0.975, n-1) * stddev / sqrt(n)
// (Student's t). When either row lacks statistics the ratio alone decides. A key improved under
// the mirror condition (ratio < 1 - max_regression, intervals apart).
#include "tableio/table.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

enum class Presence { both, current_only, baseline_only };
[[nodiscard]] std::string_view to_string(Presence presence);

struct Interval {
  double low = 0, high = 0;
};

struct KeyComparison {
  RowKey key;
  Presence presence = Presence::both;
  std::optional<TableRow> current, baseline;
  bool winner_changed = false;          // both present and the configs differ
  std::optional<double> ratio;          // current / baseline median; both present, baseline > 0
  std::optional<Interval> current_ci, baseline_ci; // when the row has n >= 2
  bool noise_checked = false;           // both intervals known
  bool intervals_overlap = false;       // meaningful when noise_checked
  bool regressed = false;
  bool improved = false;
};

struct Comparison {
  double max_regression = 0;            // e.g. 0.05 for 5%
  std::vector<KeyComparison> keys;      // in key order

  [[nodiscard]] std::size_t regressions() const;
  [[nodiscard]] std::size_t count(Presence presence) const;
};

// The two-sided 95% Student t quantile for `degrees` of freedom (>= 1).
[[nodiscard]] double t_quantile_975(std::size_t degrees);
// The 95% interval of a row's median; nullopt when its stats have n < 2.
[[nodiscard]] std::optional<Interval> confidence_interval(const TableRow& row);

// Both tables normalized. max_regression >= 0.
[[nodiscard]] Comparison compare(const Table& current, const Table& baseline,
                                 double max_regression);

// A markdown report: a summary line and one table row per key, regressions first.
[[nodiscard]] std::string render_markdown(const Comparison& comparison);
// JUnit XML: one <testcase> per key; a regression is a <failure>, a key in one table only is
// <skipped>.
[[nodiscard]] std::string render_junit(const Comparison& comparison,
                                       std::string_view suite_name = "ktune.baseline");

} // namespace ktune::tableio
