#include "search/stop_condition.hpp"

#include <catch2/catch.hpp>

using ktune::search::Budget;
using ktune::search::parse_evaluation_budget;
using ktune::search::StopCondition;
using namespace std::chrono_literals;

TEST_CASE("search/stop_condition: parsing budgets", "[search][stop_condition]") {
  SECTION("counts and percentages") {
    CHECK(*parse_evaluation_budget("30", 1000) == 30);
    CHECK(*parse_evaluation_budget("10%", 4201) == 420);
    CHECK(*parse_evaluation_budget("0.5%", 582) == 3);
    CHECK(*parse_evaluation_budget("2.5%", 200) == 5);
    CHECK(*parse_evaluation_budget("100%", 77) == 77);
    CHECK(*parse_evaluation_budget("0.01%", 10) == 1); // at least one evaluation
    CHECK(*parse_evaluation_budget("5000", 10) == 5000); // capping is the caller's business
  }
  SECTION("errors") {
    for (const char* bad : {"", "0", "-3", "ten", "3.5", "12x", "%", "0%", "101%", "-1%", "nan%", "1e400%"}) {
      INFO(bad);
      auto parsed = parse_evaluation_budget(bad, 100);
      REQUIRE_FALSE(parsed.ok());
      CHECK(parsed.error().code == ktune::ErrorCode::bad_budget);
    }
  }
}

TEST_CASE("search/stop_condition: parsing time budgets", "[search][stop_condition]") {
  using ktune::search::is_time_budget;
  using ktune::search::parse_time_budget;
  SECTION("seconds") {
    CHECK(is_time_budget("60s"));
    CHECK_FALSE(is_time_budget("60"));
    CHECK_FALSE(is_time_budget("2%"));
    CHECK_FALSE(is_time_budget(""));
    CHECK(*parse_time_budget("60s") == 60000ms);
    CHECK(*parse_time_budget("1.5s") == 1500ms);
    CHECK(*parse_time_budget("0.0001s") == 1ms); // rounded up: never a budget of nothing
  }
  SECTION("errors") {
    for (const char* bad : {"s", "60", "0s", "-5s", "ten s", "5ss", "nans", "1e400s", "1e9s", " 5s"}) {
      INFO(bad);
      auto parsed = parse_time_budget(bad);
      REQUIRE_FALSE(parsed.ok());
      CHECK(parsed.error().code == ktune::ErrorCode::bad_budget);
    }
    // A count budget names the time form in its message.
    CHECK_THAT(parse_evaluation_budget("", 10).error().message, Catch::Contains("60s"));
  }
}

TEST_CASE("search/stop_condition: limits", "[search][stop_condition]") {
  const auto t0 = StopCondition::Clock::time_point{};
  SECTION("max evaluations, and proposals never overshoot") {
    StopCondition stop(Budget{5, std::nullopt, std::nullopt, std::nullopt}, 100, t0);
    CHECK(stop.evaluation_limit() == 5);
    CHECK(stop.proposals_left(0) == 5);
    CHECK(stop.proposals_left(3) == 2);
    CHECK(stop.proposals_left(7) == 0);
    for (int i = 0; i < 4; ++i) stop.record(1.0);
    CHECK_FALSE(stop.reached(t0));
    CHECK(stop.reason(t0).empty());
    stop.record(std::nullopt);
    CHECK(stop.reached(t0));
    CHECK(stop.reason(t0) == "budget of 5 evaluations");
    CHECK(stop.proposals_left(0) == 0);
  }
  SECTION("fraction of the space") {
    StopCondition stop(Budget{std::nullopt, 0.02, std::nullopt, std::nullopt}, 4201, t0);
    CHECK(stop.evaluation_limit() == 84); // as parse_evaluation_budget("2%", 4201)
    StopCondition tiny(Budget{std::nullopt, 0.001, std::nullopt, std::nullopt}, 100, t0);
    CHECK(tiny.evaluation_limit() == 1);
    StopCondition both(Budget{50, 0.5, std::nullopt, std::nullopt}, 60, t0);
    CHECK(both.evaluation_limit() == 30);
  }
  SECTION("no limit: the space") {
    StopCondition stop(Budget{}, 3, t0);
    for (int i = 0; i < 3; ++i) stop.record(2.0);
    CHECK(stop.reason(t0) == "search space exhausted");
    StopCondition capped(Budget{1000, std::nullopt, std::nullopt, std::nullopt}, 10, t0);
    CHECK(capped.evaluation_limit() == 10);
  }
  SECTION("patience: evaluations without a new best") {
    StopCondition stop(Budget{std::nullopt, std::nullopt, std::nullopt, 3}, 100, t0);
    stop.record(5.0);
    stop.record(4.0);
    stop.record(4.5);
    stop.record(std::nullopt);
    CHECK_FALSE(stop.reached(t0));
    stop.record(3.0); // improvement resets
    stop.record(3.0);
    stop.record(3.1);
    CHECK_FALSE(stop.reached(t0));
    CHECK(stop.proposals_left(0) > 0);
    stop.record(9.0);
    CHECK(stop.reached(t0));
    CHECK(stop.reason(t0) == "no improvement in 3 evaluations");
    CHECK(stop.proposals_left(0) == 0);
  }
  SECTION("wall time") {
    StopCondition stop(Budget{std::nullopt, std::nullopt, 1000ms, std::nullopt}, 100, t0);
    CHECK_FALSE(stop.reached(t0 + 999ms));
    CHECK(stop.reached(t0 + 1000ms));
    CHECK(stop.reason(t0 + 2s) == "wall time of 1000 ms");
  }
}
