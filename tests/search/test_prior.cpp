#include "search/prior.hpp"

#include "search/strategy.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using ktune::search::Prior;
using ktune::search::PriorSource;
using ktune::search::SearchSpace;

namespace {

// 8 x 8 configs, all valid.
SearchSpace grid() {
  std::vector<std::vector<std::uint32_t>> configs;
  for (std::uint32_t a = 0; a < 8; ++a) {
    for (std::uint32_t b = 0; b < 8; ++b) configs.push_back({a, b});
  }
  std::vector<double> values{1, 2, 4, 8, 16, 32, 64, 128};
  auto space = SearchSpace::create({{"a", values}, {"b", values}}, configs);
  REQUIRE(space.ok());
  return std::move(space).value();
}

// time = 1 + |a - a0| + |b - b0| (ms) over every config.
PriorSource bowl(const SearchSpace& space, std::uint32_t a0, std::uint32_t b0, std::string label) {
  PriorSource source{std::move(label), {}};
  for (std::size_t id = 0; id < space.size(); ++id) {
    const auto idx = space.indices(id);
    const double t = 1.0 + std::abs(static_cast<double>(idx[0]) - a0) + std::abs(static_cast<double>(idx[1]) - b0);
    source.results.push_back({id, t});
  }
  return source;
}

std::size_t id_of(const SearchSpace& space, std::uint32_t a, std::uint32_t b) {
  const std::vector<std::uint32_t> idx{a, b};
  return *space.find(idx);
}

} // namespace

TEST_CASE("search/prior: quantiles per source, failures, unknown configs", "[search][prior]") {
  const SearchSpace space = grid();
  SECTION("an empty prior says nothing") {
    const auto estimate = ktune::search::estimate_prior(space, {});
    CHECK(estimate.empty());
    CHECK(estimate.sources == 0);
    CHECK(std::isnan(estimate.score[0]));
  }
  SECTION("one source: the fastest config scores 0, the slowest 1, ranked best first") {
    const auto estimate = ktune::search::estimate_prior(space, {bowl(space, 5, 2, "s")});
    REQUIRE_FALSE(estimate.empty());
    CHECK(estimate.sources == 1);
    CHECK(estimate.results == space.size());
    CHECK(estimate.ranked.front() == id_of(space, 5, 2));
    CHECK(estimate.score[id_of(space, 5, 2)] == 0.0);
    CHECK(estimate.score[id_of(space, 0, 7)] == 1.0);
    CHECK(estimate.ranked.size() == space.size());
  }
  SECTION("two sources are averaged by quantile, not by time") {
    PriorSource fast = bowl(space, 5, 2, "fast device");
    PriorSource slow = bowl(space, 5, 2, "slow device");
    for (auto& r : slow.results) *r.time_ms *= 1000;
    const auto one = ktune::search::estimate_prior(space, {fast});
    const auto both = ktune::search::estimate_prior(space, {fast, slow});
    for (std::size_t id = 0; id < space.size(); ++id) CHECK(both.score[id] == Approx(one.score[id]));
  }
  SECTION("failures score 1, count in failure and are never ranked; unmeasured configs stay unknown") {
    PriorSource source{"partial", {}};
    source.results.push_back({id_of(space, 1, 1), 2.0});
    source.results.push_back({id_of(space, 2, 2), 1.0});
    source.results.push_back({id_of(space, 3, 3), std::nullopt});
    source.results.push_back({999, 1.0});                  // not in the space: ignored
    source.results.push_back({id_of(space, 4, 4), -1.0}); // not a time: ignored
    const auto estimate = ktune::search::estimate_prior(space, {source});
    CHECK(estimate.results == 3);
    CHECK(estimate.ranked == std::vector<std::size_t>{id_of(space, 2, 2), id_of(space, 1, 1)});
    CHECK(estimate.score[id_of(space, 3, 3)] == 1.0);
    CHECK(estimate.failure[id_of(space, 3, 3)] == 1.0);
    CHECK(estimate.failure[id_of(space, 2, 2)] == 0.0);
    CHECK(std::isnan(estimate.score[id_of(space, 4, 4)]));
  }
  SECTION("a source with failures only adds nothing") {
    PriorSource source{"broken", {{0, std::nullopt}, {1, std::nullopt}}};
    CHECK(ktune::search::estimate_prior(space, {source}).empty());
  }
}

TEST_CASE("search/prior: bayes starts from the prior, the others ignore it", "[search][prior]") {
  const SearchSpace space = grid();
  const Prior prior{bowl(space, 6, 1, "other shape")};
  SECTION("only bayes uses a prior") {
    CHECK(ktune::search::uses_prior("bayes"));
    CHECK_FALSE(ktune::search::uses_prior("random"));
    CHECK_FALSE(ktune::search::uses_prior("exhaustive"));
  }
  SECTION("bayes proposes the prior's best config first") {
    for (std::uint64_t seed : {0ULL, 1ULL, 7ULL}) {
      auto strategy = ktune::search::make_strategy("bayes", space, seed, prior);
      REQUIRE(strategy.ok());
      const auto first = (*strategy)->propose(1);
      REQUIRE(first.size() == 1);
      CHECK(first.front() == id_of(space, 6, 1));
    }
  }
  SECTION("without a prior, and for other strategies, the proposals do not change") {
    for (const std::string name : {"bayes", "random", "genetic"}) {
      auto cold = ktune::search::make_strategy(name, space, 3);
      auto warm = ktune::search::make_strategy(name, space, 3, name == "bayes" ? Prior{} : prior);
      REQUIRE(cold.ok());
      REQUIRE(warm.ok());
      for (int i = 0; i < 12; ++i) {
        const auto a = (*cold)->propose(1);
        const auto b = (*warm)->propose(1);
        REQUIRE(a == b);
        REQUIRE(a.size() == 1);
        const double t = 1.0 + static_cast<double>(a.front() % 7);
        REQUIRE((*cold)->observe(a.front(), t).ok());
        REQUIRE((*warm)->observe(b.front(), t).ok());
      }
    }
  }
  SECTION("a prior whose optimum is the new space's finds it at once; a cold search later") {
    auto time_of = [&](std::size_t id) {
      const auto idx = space.indices(id);
      return 1.0 + std::abs(static_cast<double>(idx[0]) - 6) + 2 * std::abs(static_cast<double>(idx[1]) - 1);
    };
    auto evaluations_to_optimum = [&](const Prior& p, std::uint64_t seed) {
      auto strategy = ktune::search::make_strategy("bayes", space, seed, p);
      REQUIRE(strategy.ok());
      for (std::size_t n = 1; n <= space.size(); ++n) {
        const auto ids = (*strategy)->propose(1);
        REQUIRE(ids.size() == 1);
        REQUIRE((*strategy)->observe(ids.front(), time_of(ids.front())).ok());
        if (time_of(ids.front()) == 1.0) return n;
      }
      return space.size();
    };
    std::size_t warm = 0, cold = 0;
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      warm += evaluations_to_optimum(prior, seed);
      cold += evaluations_to_optimum({}, seed);
    }
    CHECK(warm == 5);
    CHECK(cold > 5);
  }
}
