#include "search/search_space.hpp"

#include <catch2/catch.hpp>

using ktune::search::Neighbourhood;
using ktune::search::SearchParam;
using ktune::search::SearchSpace;

namespace {

// 3 x 3 params, all configs except (1, 1).
SearchSpace grid_without_centre() {
  std::vector<std::vector<std::uint32_t>> configs;
  for (std::uint32_t a = 0; a < 3; ++a) {
    for (std::uint32_t b = 0; b < 3; ++b) {
      if (a == 1 && b == 1) continue;
      configs.push_back({a, b});
    }
  }
  auto space = SearchSpace::create({{"A", {1, 2, 4}}, {"B", {10, 20, 30}}}, configs);
  REQUIRE(space.ok());
  return std::move(space).value();
}

} // namespace

TEST_CASE("search/search_space: creation", "[search][search_space]") {
  SECTION("sizes, values and lookup") {
    const SearchSpace space = grid_without_centre();
    CHECK(space.size() == 8);
    CHECK(space.param_count() == 2);
    CHECK(space.cartesian_size() == 9);
    const std::vector<std::uint32_t> corner{2, 2};
    const auto id = space.find(corner);
    REQUIRE(id);
    CHECK(space.value(*id, 0) == 4);
    CHECK(space.value(*id, 1) == 30);
    CHECK(space.indices(*id)[0] == 2);
    const std::vector<std::uint32_t> centre{1, 1};
    CHECK_FALSE(space.find(centre));
    const std::vector<std::uint32_t> out_of_range{3, 0};
    CHECK_FALSE(space.find(out_of_range));
    const std::vector<std::uint32_t> too_short{0};
    CHECK_FALSE(space.find(too_short));
    CHECK(space.to_config(*id) == ktune::Config{{"A", 4}, {"B", 30}});
  }
  SECTION("ids follow the order of the given configs") {
    auto space = SearchSpace::create({{"A", {1, 2}}}, {{1}, {0}});
    REQUIRE(space.ok());
    CHECK(space->value(0, 0) == 2);
    CHECK(space->value(1, 0) == 1);
  }
  SECTION("errors") {
    auto no_params = SearchSpace::create({}, {{}});
    REQUIRE_FALSE(no_params.ok());
    CHECK(no_params.error().code == ktune::ErrorCode::bad_space);

    auto empty_values = SearchSpace::create({{"A", {}}}, {{0}});
    REQUIRE_FALSE(empty_values.ok());
    CHECK_THAT(empty_values.error().message, Catch::Contains("'A' has no values"));

    auto no_configs = SearchSpace::create({{"A", {1}}}, {});
    REQUIRE_FALSE(no_configs.ok());

    auto out_of_range = SearchSpace::create({{"A", {1, 2}}}, {{0}, {2}});
    REQUIRE_FALSE(out_of_range.ok());
    CHECK_THAT(out_of_range.error().message, Catch::Contains("config 1") && Catch::Contains("out of range"));

    auto wrong_length = SearchSpace::create({{"A", {1, 2}}}, {{0, 0}});
    REQUIRE_FALSE(wrong_length.ok());

    auto duplicate = SearchSpace::create({{"A", {1, 2}}, {"B", {1}}}, {{0, 0}, {1, 0}, {0, 0}});
    REQUIRE_FALSE(duplicate.ok());
    CHECK_THAT(duplicate.error().message, Catch::Contains("duplicates"));

    std::vector<SearchParam> huge;
    for (int i = 0; i < 70; ++i) huge.push_back({"P" + std::to_string(i), {1, 2}});
    auto overflow = SearchSpace::create(huge, {std::vector<std::uint32_t>(70, 0)});
    REQUIRE_FALSE(overflow.ok());
    CHECK_THAT(overflow.error().message, Catch::Contains("2^63"));
  }
  SECTION("the empty space") {
    const SearchSpace space;
    CHECK(space.size() == 0);
    CHECK(space.param_count() == 0);
  }
}

TEST_CASE("search/search_space: neighbourhoods", "[search][search_space]") {
  const SearchSpace space = grid_without_centre();
  auto id = [&](std::uint32_t a, std::uint32_t b) {
    const std::vector<std::uint32_t> v{a, b};
    return *space.find(v);
  };
  SECTION("adjacent: one param one step, valid configs only") {
    // (0,1): adjacent are (1,1) [invalid], (0,0), (0,2).
    CHECK(space.neighbours(id(0, 1), Neighbourhood::adjacent) == std::vector<std::size_t>{id(0, 0), id(0, 2)});
    // (0,0): (1,0), (0,1).
    const auto n = space.neighbours(id(0, 0), Neighbourhood::adjacent);
    CHECK(n.size() == 2);
  }
  SECTION("hamming: one param any other value") {
    // (0,1): (1,1) invalid, (2,1), (0,0), (0,2).
    const auto n = space.neighbours(id(0, 1), Neighbourhood::hamming);
    CHECK(n.size() == 3);
    CHECK(std::is_sorted(n.begin(), n.end()));
    CHECK(std::find(n.begin(), n.end(), id(2, 1)) != n.end());
    CHECK(space.hamming_distance(id(0, 1), id(2, 1)) == 1);
    CHECK(space.hamming_distance(id(0, 0), id(2, 2)) == 2);
  }
}

TEST_CASE("search/search_space: from a kernel's admitted configs", "[search][search_space]") {
  const std::vector<ktune::ParamSpec> params{{"BM", {16, 32, 64}}, {"BK", {4, 8}}};
  SECTION("maps values to indices in declared order") {
    const std::vector<ktune::Config> configs{{{"BM", 16}, {"BK", 8}}, {{"BK", 4}, {"BM", 64}}};
    auto space = SearchSpace::from_configs(params, configs);
    REQUIRE(space.ok());
    CHECK(space->size() == 2);
    CHECK(space->cartesian_size() == 6);
    CHECK(space->to_config(1) == ktune::Config{{"BM", 64}, {"BK", 4}});
  }
  SECTION("undeclared value or missing param") {
    auto undeclared = SearchSpace::from_configs(params, {{{"BM", 48}, {"BK", 8}}});
    REQUIRE_FALSE(undeclared.ok());
    CHECK_THAT(undeclared.error().message, Catch::Contains("BM=48"));
    auto missing = SearchSpace::from_configs(params, {{{"BM", 16}}});
    REQUIRE_FALSE(missing.ok());
    CHECK_THAT(missing.error().message, Catch::Contains("no value for parameter 'BK'"));
  }
}
