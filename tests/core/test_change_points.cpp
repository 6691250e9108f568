#include "core/change_points.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

namespace {

// A series of `n` points around `level`, with relative gaussian noise `rsd`.
std::vector<double> noisy(std::size_t n, double level, double rsd, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, rsd);
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(level * (1.0 + noise(rng)));
  return out;
}

} // namespace

TEST_CASE("core/change_points: sigma from successive differences", "[core][change_points]") {
  CHECK(ktune::successive_difference_sigma({}) == 0);
  CHECK(ktune::successive_difference_sigma({3.0}) == 0);
  // A step moves one difference only: the sigma stays that of the noise.
  std::vector<double> stepped{1, 1.1, 1, 1.1, 1, 1.1, 2, 2.1, 2, 2.1, 2, 2.1};
  CHECK(ktune::successive_difference_sigma(stepped) == Approx(1.4826 * 0.1 / std::sqrt(2.0)));
}

TEST_CASE("core/change_points: steps in synthetic series", "[core][change_points]") {
  SECTION("a clean step is found at its index") {
    std::vector<double> series(12, 1.0);
    for (std::size_t i = 7; i < series.size(); ++i) series[i] = 1.3;
    const auto points = ktune::find_change_points(series);
    REQUIRE(points.size() == 1);
    CHECK(points[0].index == 7);
    CHECK(points[0].before == Approx(1.0));
    CHECK(points[0].after == Approx(1.3));
    CHECK(points[0].ratio() == Approx(1.3));
  }
  SECTION("a 20% step in 3% noise is found at its index, over many seeds") {
    for (std::uint32_t seed = 1; seed <= 50; ++seed) {
      auto series = noisy(20, 2.0, 0.03, seed);
      const auto after = noisy(15, 2.4, 0.03, seed + 1000);
      series.insert(series.end(), after.begin(), after.end());
      const auto points = ktune::find_change_points(series);
      INFO("seed " << seed);
      REQUIRE(points.size() == 1);
      CHECK(points[0].index == 20);
      CHECK(points[0].ratio() == Approx(1.2).epsilon(0.05));
    }
  }
  SECTION("a step down (a speed-up) is a change point too") {
    std::vector<double> series{5, 5.1, 4.9, 5, 5.05, 2.5, 2.45, 2.55, 2.5};
    const auto points = ktune::find_change_points(series);
    REQUIRE(points.size() == 1);
    CHECK(points[0].index == 5);
    CHECK(points[0].ratio() == Approx(0.5).epsilon(0.05));
  }
  SECTION("a flat noisy series has none, over many seeds") {
    for (std::uint32_t seed = 1; seed <= 50; ++seed) {
      INFO("seed " << seed);
      CHECK(ktune::find_change_points(noisy(40, 1.0, 0.04, seed)).empty());
    }
  }
  SECTION("a single outlier is not a step") {
    auto series = noisy(30, 1.0, 0.02, 7);
    series[12] = 3.0;
    CHECK(ktune::find_change_points(series).empty());
    series.back() = 3.0; // the newest run alone is not a step either
    CHECK(ktune::find_change_points(series).empty());
  }
  SECTION("an outlier next to a real step does not hide it") {
    std::vector<double> series{1, 1.02, 0.98, 1, 1.01, 4.0, 1.5, 1.52, 1.49, 1.5, 1.51};
    const auto points = ktune::find_change_points(series);
    REQUIRE(points.size() == 1);
    CHECK((points[0].index == 5 || points[0].index == 6));
    CHECK(points[0].after == Approx(1.5).epsilon(0.02));
  }
  SECTION("a step under the minimum effect is not reported") {
    std::vector<double> series(10, 1.0);
    for (std::size_t i = 5; i < series.size(); ++i) series[i] = 1.03;
    CHECK(ktune::find_change_points(series).empty());
    CHECK(ktune::find_change_points(series, {.min_effect = 0.01}).size() == 1);
  }
  SECTION("a new level of two runs is a step, however the fit splits them") {
    std::vector<double> series{0.0087, 0.0089, 0.0092, 0.0082, 0.0082, 0.328, 0.320};
    const auto points = ktune::find_change_points(series);
    REQUIRE(points.size() == 1);
    CHECK(points[0].index == 5);
  }
  SECTION("too short a series has none") {
    CHECK(ktune::find_change_points({}).empty());
    CHECK(ktune::find_change_points({1.0, 2.0, 3.0}).empty());
  }
}
