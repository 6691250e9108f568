#include "core/stats.hpp"

#include <catch2/catch.hpp>

TEST_CASE("core/stats: summarize", "[core][stats]") {
  SECTION("empty input") {
    const auto s = ktune::summarize({});
    CHECK(s.n == 0);
    CHECK(s.median_ms == 0);
    CHECK(s.rsd() == 0);
  }
  SECTION("one sample") {
    const auto s = ktune::summarize({2.5});
    CHECK(s.n == 1);
    CHECK(s.min_ms == 2.5);
    CHECK(s.max_ms == 2.5);
    CHECK(s.median_ms == 2.5);
    CHECK(s.q1_ms == 2.5);
    CHECK(s.q3_ms == 2.5);
    CHECK(s.stddev_ms == 0);
    CHECK(s.rsd() == 0);
  }
  SECTION("unsorted input, odd count") {
    const auto s = ktune::summarize({5, 1, 4, 2, 3});
    CHECK(s.n == 5);
    CHECK(s.min_ms == 1);
    CHECK(s.max_ms == 5);
    CHECK(s.median_ms == 3);
    CHECK(s.mean_ms == Approx(3));
    CHECK(s.q1_ms == Approx(2));
    CHECK(s.q3_ms == Approx(4));
    CHECK(s.stddev_ms == Approx(std::sqrt(2.5)));
    CHECK(s.rsd() == Approx(std::sqrt(2.5) / 3));
  }
  SECTION("even count interpolates") {
    const auto s = ktune::summarize({4, 1, 3, 2});
    CHECK(s.median_ms == Approx(2.5));
    CHECK(s.q1_ms == Approx(1.75));
    CHECK(s.q3_ms == Approx(3.25));
    CHECK(s.stddev_ms == Approx(std::sqrt(5.0 / 3.0)));
  }
  SECTION("zero mean gives rsd 0") {
    const auto s = ktune::summarize({0, 0, 0});
    CHECK(s.rsd() == 0);
  }
}
