#include "search/surrogate_support.hpp"

#include <catch2/catch.hpp>

TEST_CASE("search/surrogate_support: features and expected improvement", "[search][surrogate]") {
  using ktune::search::alignment;
  using ktune::search::expected_improvement;
  using ktune::search::wants_alignment_feature;
  CHECK(alignment(48) == 4);
  CHECK(alignment(64) == 6);
  CHECK(alignment(7) == 0);
  CHECK(alignment(0) == 0);
  CHECK(alignment(2.5) == 0);
  CHECK(wants_alignment_feature({16, 32, 48, 64, 80}));
  CHECK_FALSE(wants_alignment_feature({1, 2, 4, 8}));
  CHECK_FALSE(wants_alignment_feature({0, 1}));
  CHECK_FALSE(wants_alignment_feature({1.5, 3, 6}));

  CHECK(expected_improvement(1.0, 0.0, 2.0) == 1.0);
  CHECK(expected_improvement(3.0, 0.0, 2.0) == 0.0);
  CHECK(expected_improvement(2.0, 1.0, 2.0) == Approx(0.3989422804));
  CHECK(expected_improvement(1.0, 1.0, 2.0) > expected_improvement(3.0, 1.0, 2.0));
  CHECK(expected_improvement(3.0, 2.0, 2.0) > expected_improvement(3.0, 1.0, 2.0));
}

TEST_CASE("search/surrogate_support: feature encoding", "[search][surrogate]") {
  using ktune::search::FeatureEncoder;
  auto space = ktune::search::SearchSpace::create({{"A", {16, 32, 48, 64}}, {"B", {1}}, {"C", {1, 2, 4}}},
                                                  {{2, 0, 2}, {0, 0, 0}});
  REQUIRE(space.ok());
  SECTION("value indices scaled to [0, 1], alignment next to its param, constants dropped") {
    const FeatureEncoder encoder(*space);
    REQUIRE(encoder.size() == 3);
    std::vector<double> row;
    encoder.append(0, row); // A=48 (alignment 4 of at most 6), C=4
    REQUIRE(row.size() == 3);
    CHECK(row[0] == Approx(2.0 / 3.0));
    CHECK(row[1] == Approx(4.0 / 6.0));
    CHECK(row[2] == Approx(1.0));
    encoder.append(1, row); // appends
    REQUIRE(row.size() == 6);
    CHECK(row[3] == 0.0);
  }
}
