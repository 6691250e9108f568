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

TEST_CASE("search/prior: each source's quantiles are kept for weighing", "[search][prior]") {
  const SearchSpace space = grid();
  PriorSource partial{"partial", {{id_of(space, 1, 1), 2.0}, {id_of(space, 2, 2), 1.0}, {id_of(space, 3, 3), std::nullopt}}};
  const auto estimate = ktune::search::estimate_prior(space, {bowl(space, 5, 2, "whole"), partial});
  REQUIRE(estimate.by_source.size() == 2);
  CHECK(estimate.by_source[0][id_of(space, 5, 2)] == 0.0);
  CHECK(estimate.by_source[1][id_of(space, 2, 2)] == 0.0);
  CHECK(estimate.by_source[1][id_of(space, 1, 1)] == 1.0);
  CHECK(estimate.by_source[1][id_of(space, 3, 3)] == 1.0); // failed there
  CHECK(std::isnan(estimate.by_source[1][id_of(space, 7, 7)]));
  // The score is their mean where both have the config, the one source's elsewhere.
  const std::size_t both = id_of(space, 1, 1);
  CHECK(estimate.score[both] == Approx(0.5 * (estimate.by_source[0][both] + 1.0)));
  CHECK(estimate.score[id_of(space, 7, 7)] == estimate.by_source[0][id_of(space, 7, 7)]);
}

TEST_CASE("search/prior: bayes weighs the sources by how they agree with the results here",
          "[search][prior]") {
  // 24 x 24 configs; the new space's times a bowl at (18, 3) with a ripple, so that a cold
  // search needs a while.
  std::vector<std::vector<std::uint32_t>> configs;
  std::vector<double> values;
  for (std::uint32_t a = 0; a < 24; ++a) {
    values.push_back(a);
    for (std::uint32_t b = 0; b < 24; ++b) configs.push_back({a, b});
  }
  auto made = SearchSpace::create({{"a", values}, {"b", values}}, configs);
  REQUIRE(made.ok());
  const SearchSpace space = std::move(made).value();
  auto bowl_at = [&](double a0, double b0, double ripple) {
    return [&space, a0, b0, ripple](std::size_t id) {
      const auto idx = space.indices(id);
      const double a = idx[0], b = idx[1];
      return 1.0 + std::abs(a - a0) + std::abs(b - b0) + ripple * (1 + std::sin(3 * a + 5 * b));
    };
  };
  const auto time_of = bowl_at(18, 3, 2.0);
  auto source = [&](auto times, std::string label) {
    PriorSource out{std::move(label), {}};
    for (std::size_t id = 0; id < space.size(); ++id) out.results.push_back({id, times(id)});
    return out;
  };
  const PriorSource alike = source(bowl_at(18, 3, 0.0), "a device of the same kind");
  const PriorSource other = source(bowl_at(3, 18, 0.0), "a device of another kind");
  const double optimum = [&] {
    double best = 1e300;
    for (std::size_t id = 0; id < space.size(); ++id) best = std::min(best, time_of(id));
    return best;
  }();
  // Runs `evaluations` proposals: the strategy's prior use at the end, and the evaluations it
  // took to reach the optimum (evaluations + 1 when it did not).
  auto run = [&](const Prior& p, std::uint64_t seed, std::size_t evaluations) {
    auto strategy = ktune::search::make_strategy("bayes", space, seed, p);
    REQUIRE(strategy.ok());
    std::size_t found = evaluations + 1;
    for (std::size_t n = 1; n <= evaluations; ++n) {
      const auto ids = (*strategy)->propose(1);
      REQUIRE(ids.size() == 1);
      REQUIRE((*strategy)->observe(ids.front(), time_of(ids.front())).ok());
      if (time_of(ids.front()) == optimum && found > n) found = n;
    }
    return std::make_pair((*strategy)->prior_use(), found);
  };

  SECTION("a cold search has no prior use to report") {
    CHECK_FALSE(run({}, 0, 8).first.has_value());
  }
  SECTION("one source whose favourite loses to random configs is distrusted") {
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      const auto [use, found] = run({other}, seed, 20);
      REQUIRE(use.has_value());
      CHECK(use->favourite == *space.find(std::vector<std::uint32_t>{3, 18}));
      CHECK_FALSE(use->trusted);
    }
  }
  SECTION("next to a source of another kind, the alike one still leads the search") {
    // Their unweighted mean ranks the configs between the two bowls first: its favourite is
    // neither optimum, and a search that judged the prior by it distrusted it in 4 of these 5
    // seeds (257 evaluations to the optimum against 209 cold). Weighed, the alike source counts
    // and the other one does not: 139.
    std::size_t mixed = 0, cold = 0;
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      const auto [use, found] = run({alike, other}, seed, 60);
      REQUIRE(use.has_value());
      CHECK(use->trusted);
      mixed += found;
      cold += run({}, seed, 60).second;
    }
    INFO("evaluations to the optimum over 5 seeds: " << mixed << " with the two sources, " << cold << " cold");
    CHECK(mixed < cold);
  }
}
