// The exposition writer and histogram behind /metrics (daemon/metrics.hpp).
#include "daemon/metrics.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using ktune::daemon::Exposition;
using ktune::daemon::format_metric_value;
using ktune::daemon::Histogram;

TEST_CASE("a histogram counts each value in the first bucket whose bound it does not exceed",
          "[metrics]") {
  Histogram h({0.1, 1, 10});
  for (const double v : {0.05, 0.1, 0.5, 20.0}) h.observe(v);
  CHECK(h.bucket_counts() == std::vector<std::uint64_t>{2, 1, 0, 1});
  CHECK(h.count() == 4);
  CHECK(h.sum() == Approx(20.65));
}

TEST_CASE("the exposition text follows the 0.0.4 format", "[metrics]") {
  Exposition out;
  SECTION("a counter with escaped label values") {
    out.family("x_total", "counter", "Help with a \\ and\na newline.");
    out.sample("x_total", {{"path", "a\"b\\c\nd"}}, 3);
    out.sample("x_total", {}, 0.25);
    CHECK(out.text() ==
          "# HELP x_total Help with a \\\\ and\\na newline.\n"
          "# TYPE x_total counter\n"
          "x_total{path=\"a\\\"b\\\\c\\nd\"} 3\n"
          "x_total 0.25\n");
  }
  SECTION("a histogram's buckets are cumulative and end with +Inf, then _sum and _count") {
    Histogram h({0.5, 1});
    h.observe(0.25);
    h.observe(0.5);
    h.observe(4);
    out.family("t_seconds", "histogram", "Times.");
    out.histogram("t_seconds", {{"lane", "cpu"}}, h);
    CHECK(out.text() ==
          "# HELP t_seconds Times.\n"
          "# TYPE t_seconds histogram\n"
          "t_seconds_bucket{lane=\"cpu\",le=\"0.5\"} 2\n"
          "t_seconds_bucket{lane=\"cpu\",le=\"1\"} 2\n"
          "t_seconds_bucket{lane=\"cpu\",le=\"+Inf\"} 3\n"
          "t_seconds_sum{lane=\"cpu\"} 4.75\n"
          "t_seconds_count{lane=\"cpu\"} 3\n");
  }
}

TEST_CASE("sample values are written as the format reads them", "[metrics]") {
  CHECK(format_metric_value(12) == "12");
  CHECK(format_metric_value(1e-6) == "1e-06");
  CHECK(format_metric_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_metric_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_metric_value(std::nan("")) == "NaN");
}
