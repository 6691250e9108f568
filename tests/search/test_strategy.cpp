#include "search/strategy.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

using ktune::search::SearchSpace;
using ktune::search::Strategy;

namespace {

// A: 8 values (the first `a_values` of them), B: 6, C: 4; configs with (a + b + c) % 5 == 0 are
// outside the space.
SearchSpace synthetic_space(std::uint32_t a_values = 8) {
  std::vector<std::vector<std::uint32_t>> configs;
  for (std::uint32_t a = 0; a < a_values; ++a) {
    for (std::uint32_t b = 0; b < 6; ++b) {
      for (std::uint32_t c = 0; c < 4; ++c) {
        if ((a + b + c) % 5 != 0) configs.push_back({a, b, c});
      }
    }
  }
  auto space = SearchSpace::create(
      {{"A", {1, 2, 4, 8, 16, 32, 64, 128}}, {"B", {1, 2, 3, 4, 5, 6}}, {"C", {0, 1, 2, 3}}}, configs);
  REQUIRE(space.ok());
  return std::move(space).value();
}

// A bowl with its minimum at A=32, B=3, C=0; configs with A=128 and B >= 4, or A=8 and B >= 5 fail.
std::optional<double> synthetic_time(const SearchSpace& space, std::size_t id) {
  const auto i = space.indices(id);
  if ((i[0] == 7 && i[1] >= 3) || (i[0] == 3 && i[1] >= 4)) return std::nullopt;
  const double a = static_cast<double>(i[0]) - 5.0;
  const double b = static_cast<double>(i[1]) - 2.0;
  const double c = static_cast<double>(i[2]);
  return 1.0 + 0.4 * a * a + 0.3 * b * b + 0.25 * c + 0.05 * a * b;
}

std::size_t optimum(const SearchSpace& space) {
  std::size_t best = 0;
  double best_time = INFINITY;
  for (std::size_t id = 0; id < space.size(); ++id) {
    const auto t = synthetic_time(space, id);
    if (t && *t < best_time) {
      best_time = *t;
      best = id;
    }
  }
  return best;
}

std::unique_ptr<Strategy> make(const std::string& name, const SearchSpace& space, std::uint64_t seed) {
  auto strategy = ktune::search::make_strategy(name, space, seed);
  REQUIRE(strategy.ok());
  return std::move(strategy).value();
}

// Runs `strategy` for at most `limit` evaluations in batches of `batch`, observing each batch in
// reverse order; returns the proposals in order.
std::vector<std::size_t> drive(Strategy& strategy, std::size_t limit, std::size_t batch) {
  std::vector<std::size_t> proposals;
  while (proposals.size() < limit) {
    const auto ids = strategy.propose(std::min(batch, limit - proposals.size()));
    if (ids.empty()) break;
    REQUIRE(ids.size() <= batch);
    proposals.insert(proposals.end(), ids.begin(), ids.end());
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      REQUIRE(strategy.observe(*it, synthetic_time(strategy.space(), *it)).ok());
    }
  }
  return proposals;
}

} // namespace

TEST_CASE("search/strategy: every strategy proposes each valid config at most once", "[search][strategy]") {
  const SearchSpace space = synthetic_space(4);
  for (const auto& name : ktune::search::strategy_names()) {
    for (std::size_t batch : {std::size_t{1}, std::size_t{3}}) {
      INFO(name << ", batch " << batch);
      auto strategy = make(name, space, 7);
      CHECK(strategy->name() == name);
      const auto proposals = drive(*strategy, space.size() + 10, batch);
      // Every id is a config of the space, none twice, and running to the end covers the space.
      CHECK(proposals.size() == space.size());
      CHECK(std::all_of(proposals.begin(), proposals.end(), [&](std::size_t id) { return id < space.size(); }));
      CHECK(std::set<std::size_t>(proposals.begin(), proposals.end()).size() == proposals.size());
      CHECK(strategy->exhausted());
      CHECK(strategy->propose(4).empty());
      CHECK(strategy->observed_count() == space.size());
      REQUIRE(strategy->best());
      CHECK(strategy->best()->config == optimum(space));
      std::size_t failures = 0;
      for (std::size_t id = 0; id < space.size(); ++id) failures += synthetic_time(space, id) ? 0 : 1;
      CHECK(strategy->failed_count() == failures);
    }
  }
}

TEST_CASE("search/strategy: the same seed gives the same proposals", "[search][strategy]") {
  const SearchSpace space = synthetic_space();
  for (const auto& name : ktune::search::strategy_names()) {
    INFO(name);
    auto first = make(name, space, 42);
    auto second = make(name, space, 42);
    const auto a = drive(*first, 40, 2);
    const auto b = drive(*second, 40, 2);
    CHECK(a == b);
    if (name != "exhaustive") {
      auto other = make(name, space, 43);
      CHECK(drive(*other, 40, 2) != a);
    }
  }
}

TEST_CASE("search/strategy: exhaustive walks the space in id order", "[search][strategy]") {
  const SearchSpace space = synthetic_space();
  auto strategy = make("exhaustive", space, 0);
  const auto proposals = drive(*strategy, space.size(), 5);
  for (std::size_t i = 0; i < proposals.size(); ++i) CHECK(proposals[i] == i);
}

TEST_CASE("search/strategy: results arrive late and in any order", "[search][strategy]") {
  const SearchSpace space = synthetic_space();
  for (const auto& name : ktune::search::strategy_names()) {
    INFO(name);
    auto strategy = make(name, space, 3);
    std::vector<std::size_t> outstanding;
    std::set<std::size_t> seen;
    // Keep 4 evaluations in flight, finishing the oldest one at a time.
    for (int round = 0; round < 60; ++round) {
      const auto ids = strategy->propose(4 - outstanding.size());
      for (std::size_t id : ids) CHECK(seen.insert(id).second);
      outstanding.insert(outstanding.end(), ids.begin(), ids.end());
      CHECK(strategy->pending_count() == outstanding.size());
      if (outstanding.empty()) {
        FAIL("a strategy returned nothing with nothing outstanding");
      }
      const std::size_t done = outstanding.front();
      outstanding.erase(outstanding.begin());
      REQUIRE(strategy->observe(done, synthetic_time(space, done)).ok());
    }
  }
}

TEST_CASE("search/strategy: observe rejects what was not outstanding", "[search][strategy]") {
  const SearchSpace space = synthetic_space();
  auto strategy = make("random", space, 1);
  const auto ids = strategy->propose(2);
  REQUIRE(ids.size() == 2);
  std::size_t never = 0;
  while (std::find(ids.begin(), ids.end(), never) != ids.end()) ++never;

  auto not_proposed = strategy->observe(never, 1.0);
  REQUIRE_FALSE(not_proposed.ok());
  CHECK(not_proposed.error().code == ktune::ErrorCode::bad_observation);
  CHECK_THAT(not_proposed.error().message, Catch::Contains("never proposed"));

  CHECK_FALSE(strategy->observe(space.size(), 1.0).ok());
  CHECK_FALSE(strategy->observe(ids[0], -1.0).ok());
  CHECK_FALSE(strategy->observe(ids[0], std::nan("")).ok());
  CHECK_FALSE(strategy->observe(ids[0], INFINITY).ok());
  CHECK(strategy->observed_count() == 0);

  REQUIRE(strategy->observe(ids[0], std::nullopt).ok());
  auto twice = strategy->observe(ids[0], 1.0);
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.error().message, Catch::Contains("already observed"));
  CHECK(strategy->failed_count() == 1);
  CHECK_FALSE(strategy->best());
  REQUIRE(strategy->observe(ids[1], 2.5).ok());
  REQUIRE(strategy->best());
  CHECK(strategy->best()->config == ids[1]);
  CHECK(strategy->best()->time_ms == 2.5);
}

TEST_CASE("search/strategy: model-based and local strategies learn", "[search][strategy]") {
  // On the bowl (150 configs) random search needs 75 evaluations on average to hit the optimum;
  // the learning strategies need far fewer, averaged over a few seeds.
  const SearchSpace space = synthetic_space();
  const std::size_t target = optimum(space);
  for (const std::string name : {"local", "annealing", "genetic", "bayes"}) {
    INFO(name);
    double total = 0;
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      auto strategy = make(name, space, seed);
      std::size_t evaluations = 0;
      bool found = false;
      while (!found && evaluations < space.size()) {
        const auto ids = strategy->propose(1);
        REQUIRE(ids.size() == 1);
        ++evaluations;
        found = ids[0] == target;
        REQUIRE(strategy->observe(ids[0], synthetic_time(space, ids[0])).ok());
      }
      REQUIRE(found);
      total += static_cast<double>(evaluations);
    }
    CHECK(total / 5 < static_cast<double>(space.size()) / 3);
  }
}

TEST_CASE("search/strategy: bayes learns where configs fail", "[search][strategy]") {
  // Half of the space fails (A >= 16), including the region where the bowl would be lowest;
  // after its random start, bayes should mostly stay out.
  const SearchSpace space = synthetic_space();
  std::size_t failures = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    auto strategy = make("bayes", space, seed);
    for (int i = 0; i < 30; ++i) {
      const auto ids = strategy->propose(1);
      REQUIRE(ids.size() == 1);
      const bool fails = space.indices(ids[0])[0] >= 4;
      failures += fails ? 1 : 0;
      REQUIRE(strategy->observe(ids[0], fails ? std::nullopt : synthetic_time(space, ids[0])).ok());
    }
  }
  // Random sampling would fail about 45 times in these 90 evaluations.
  CHECK(failures < 30);
}

TEST_CASE("search/strategy: degenerate spaces", "[search][strategy]") {
  SECTION("one config") {
    auto space = SearchSpace::create({{"A", {1}}}, {{0}});
    REQUIRE(space.ok());
    for (const auto& name : ktune::search::strategy_names()) {
      auto strategy = make(name, *space, 0);
      const auto ids = strategy->propose(3);
      REQUIRE(ids == std::vector<std::size_t>{0});
      REQUIRE(strategy->observe(0, 1.0).ok());
      CHECK(strategy->propose(3).empty());
      CHECK(strategy->exhausted());
    }
  }
  SECTION("the empty space") {
    const SearchSpace space;
    for (const auto& name : ktune::search::strategy_names()) {
      auto strategy = make(name, space, 0);
      CHECK(strategy->propose(1).empty());
      CHECK(strategy->exhausted());
    }
  }
  SECTION("every config fails") {
    const SearchSpace space = synthetic_space();
    for (const auto& name : ktune::search::strategy_names()) {
      INFO(name);
      auto strategy = make(name, space, 5);
      std::size_t evaluations = 0;
      while (true) {
        const auto ids = strategy->propose(2);
        if (ids.empty()) break;
        for (std::size_t id : ids) REQUIRE(strategy->observe(id, std::nullopt).ok());
        evaluations += ids.size();
      }
      CHECK(evaluations == space.size());
      CHECK_FALSE(strategy->best());
    }
  }
}

TEST_CASE("search/strategy: unknown names", "[search][strategy]") {
  const SearchSpace space = synthetic_space();
  auto strategy = ktune::search::make_strategy("simplex", space, 0);
  REQUIRE_FALSE(strategy.ok());
  CHECK(strategy.error().code == ktune::ErrorCode::unknown_strategy);
  CHECK_THAT(strategy.error().message, Catch::Contains("'simplex'") && Catch::Contains("genetic"));
}
