#pragma once
// The pieces of ktuned's /metrics (docs/operations.md): a histogram of fixed buckets that the
// daemon's components keep in memory, and a writer of the Prometheus text exposition format,
// version 0.0.4 (`# HELP`, `# TYPE`, one sample per line; histograms as cumulative `_bucket{le}`
// lines ending with `+Inf`, then `_sum` and `_count`). Neither does I/O; neither is thread-safe
// (ktuned uses them on its io thread only).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ktune::daemon {

// Observations counted per bucket of ascending upper bounds; a value above the last bound is
// counted in `+Inf` only. Bounds in the unit of the observations (seconds for latencies).
class Histogram {
public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  [[nodiscard]] const std::vector<double>& upper_bounds() const { return m_bounds; }
  // Per bucket, not cumulative; one more entry than upper_bounds() (the +Inf bucket).
  [[nodiscard]] const std::vector<std::uint64_t>& bucket_counts() const { return m_counts; }
  [[nodiscard]] std::uint64_t count() const { return m_count; }
  [[nodiscard]] double sum() const { return m_sum; }

private:
  std::vector<double> m_bounds;
  std::vector<std::uint64_t> m_counts;
  std::uint64_t m_count = 0;
  double m_sum = 0;
};

// A lookup is answered from memory in microseconds: 1 us .. 10 ms.
[[nodiscard]] Histogram lookup_latency_histogram();
// A store write is one SQLite transaction with synchronous=FULL: 100 us .. 10 s.
[[nodiscard]] Histogram write_latency_histogram();

// Writes one exposition text. Call family() once per metric name, then its samples.
class Exposition {
public:
  using Labels = std::vector<std::pair<std::string_view, std::string>>;

  // "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  void family(std::string_view name, std::string_view type, std::string_view help);
  // "name{label="value",...} value"; label values are escaped (\\, \", \n).
  void sample(std::string_view name, const Labels& labels, double value);
  // A histogram family's samples: cumulative name_bucket{...,le="..."} lines ending with +Inf,
  // name_sum and name_count.
  void histogram(std::string_view name, const Labels& labels, const Histogram& histogram);

  [[nodiscard]] const std::string& text() const { return m_text; }

private:
  void append_labels(const Labels& labels, std::string_view le = {});
  std::string m_text;
};

// A sample value as the format writes it: shortest round-trip text, +Inf, -Inf, NaN.
[[nodiscard]] std::string format_metric_value(double value);

} // namespace ktune::daemon
