#include "replay/replay.hpp"

#include "search/strategy.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using ktune::replay::RecordedSpace;
using ktune::replay::ReplayOptions;

namespace {

// 10 x 10 configs; time = 1 + |a - 6| + |b - 3|, so the optimum 1.0 ms is at (6, 3); configs
// with a + b == 17 fail; configs with a == b are absent.
RecordedSpace synthetic_recording() {
  std::vector<std::vector<std::uint32_t>> configs;
  RecordedSpace r;
  for (std::uint32_t a = 0; a < 10; ++a) {
    for (std::uint32_t b = 0; b < 10; ++b) {
      if (a == b) continue;
      configs.push_back({a, b});
      if (a + b == 17) {
        r.time_ms.push_back(std::nullopt);
        ++r.failed;
      } else {
        r.time_ms.push_back(1.0 + std::abs(static_cast<double>(a) - 6) + std::abs(static_cast<double>(b) - 3));
        ++r.measured;
      }
    }
  }
  std::vector<double> values{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto space = ktune::search::SearchSpace::create({{"a", values}, {"b", values}}, configs);
  REQUIRE(space.ok());
  r.space = std::move(space).value();
  r.label = "synthetic";
  r.optimum_ms = 1.0;
  const std::vector<std::uint32_t> best{6, 3};
  r.optimum_config = *r.space.find(best);
  r.value_text.assign(2, {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  return r;
}

} // namespace

TEST_CASE("replay/replay: one run answers from the recording", "[replay][replay]") {
  const RecordedSpace r = synthetic_recording();
  SECTION("exhaustive over the whole space finds the optimum, counting failures") {
    auto run = ktune::replay::replay_run(r, "exhaustive", r.space.size() + 50, 0);
    REQUIRE(run.ok());
    CHECK(run->proposals.size() == r.space.size());
    CHECK(run->best_after.back() == 1.0);
    CHECK(run->failed == r.failed);
    // Best-so-far never gets worse.
    for (std::size_t i = 1; i < run->best_after.size(); ++i) CHECK(run->best_after[i] <= run->best_after[i - 1]);
  }
  SECTION("the budget bounds the evaluations, with and without batches") {
    for (std::size_t batch : {std::size_t{1}, std::size_t{4}}) {
      auto run = ktune::replay::replay_run(r, "genetic", 13, 5, batch);
      REQUIRE(run.ok());
      CHECK(run->proposals.size() == 13);
    }
  }
  SECTION("seeds reproduce runs") {
    auto a = ktune::replay::replay_run(r, "annealing", 30, 9);
    auto b = ktune::replay::replay_run(r, "annealing", 30, 9);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(a->proposals == b->proposals);
    CHECK(ktune::replay::repeat_seed(9, 0) != ktune::replay::repeat_seed(9, 1));
  }
  SECTION("unknown strategy") {
    auto run = ktune::replay::replay_run(r, "nope", 10, 0);
    REQUIRE_FALSE(run.ok());
    CHECK(run.error().code == ktune::ErrorCode::unknown_strategy);
  }
}

TEST_CASE("replay/replay: repeats summarised at checkpoints", "[replay][replay]") {
  const RecordedSpace r = synthetic_recording();
  SECTION("a budget of the whole space reaches the optimum every time") {
    ReplayOptions options{"random", r.space.size(), 3, 1, 1, {1, r.space.size()}};
    auto report = ktune::replay::run_replay(r, options);
    REQUIRE(report.ok());
    REQUIRE(report->checkpoints.size() == 2);
    const auto& last = report->checkpoints.back();
    CHECK(last.mean_fraction == 1.0);
    CHECK(last.min_fraction == 1.0);
    CHECK(last.optimum_rate == 1.0);
    const auto& first = report->checkpoints.front();
    CHECK(first.evaluations == 1);
    CHECK(first.mean_fraction <= 1.0);
    CHECK(first.min_fraction <= first.mean_fraction);
    CHECK(first.max_fraction >= first.mean_fraction);
    CHECK(report->mean_failed == Approx(static_cast<double>(r.failed)));
  }
  SECTION("fractions are optimum / best found, averaged over the runs") {
    ReplayOptions options{"local", 20, 4, 2, 1, {}};
    auto report = ktune::replay::run_replay(r, options);
    REQUIRE(report.ok());
    double sum = 0;
    double lowest = 1;
    for (std::size_t i = 0; i < 4; ++i) {
      auto run = ktune::replay::replay_run(r, "local", 20, ktune::replay::repeat_seed(2, i));
      REQUIRE(run.ok());
      const double f = std::isfinite(run->best_after.back()) ? 1.0 / run->best_after.back() : 0.0;
      sum += f;
      lowest = std::min(lowest, f);
    }
    CHECK(report->checkpoints.back().evaluations == 20);
    CHECK(report->checkpoints.back().mean_fraction == Approx(sum / 4));
    CHECK(report->checkpoints.back().min_fraction == Approx(lowest));
  }
  SECTION("budgets beyond the space are capped") {
    ReplayOptions options{"exhaustive", 1000, 1, 0, 1, {}};
    auto report = ktune::replay::run_replay(r, options);
    REQUIRE(report.ok());
    CHECK(report->budget == r.space.size());
    CHECK(report->checkpoints.back().evaluations == r.space.size());
  }
  SECTION("bad options") {
    CHECK_FALSE(ktune::replay::run_replay(r, ReplayOptions{"random", 0, 1, 0, 1, {}}).ok());
    CHECK_FALSE(ktune::replay::run_replay(r, ReplayOptions{"random", 5, 0, 0, 1, {}}).ok());
    CHECK_FALSE(ktune::replay::run_replay(r, ReplayOptions{"random", 5, 1, 0, 0, {}}).ok());
    CHECK_FALSE(ktune::replay::run_replay(r, ReplayOptions{"random", 5, 1, 0, 1, {3, 2}}).ok());
    CHECK_FALSE(ktune::replay::run_replay(r, ReplayOptions{"random", 5, 1, 0, 1, {6}}).ok());
  }
}

TEST_CASE("replay/replay: even checkpoints", "[replay][replay]") {
  CHECK(ktune::replay::even_checkpoints(100, 4) == std::vector<std::size_t>{25, 50, 75, 100});
  CHECK(ktune::replay::even_checkpoints(3, 10) == std::vector<std::size_t>{1, 2, 3});
  CHECK(ktune::replay::even_checkpoints(7, 1) == std::vector<std::size_t>{7});
  CHECK(ktune::replay::even_checkpoints(0, 5).empty());
}

TEST_CASE("replay/replay: a recording of another device as a prior", "[replay][prior]") {
  const RecordedSpace target = synthetic_recording();
  SECTION("configs map by name and value text; those not in the target's space are left out") {
    RecordedSpace source = synthetic_recording();
    source.label = "other device";
    auto prior = ktune::replay::prior_source(target, source);
    REQUIRE(prior.ok());
    CHECK(prior->label == "other device");
    CHECK(prior->results.size() == target.space.size());
    for (const auto& r : prior->results) CHECK(r.time_ms == target.time_ms[r.config]);
  }
  SECTION("param order and value lists may differ") {
    // The same kernel with the params listed the other way round and value 9 of a unknown here.
    std::vector<std::vector<std::uint32_t>> configs;
    RecordedSpace source;
    for (std::uint32_t b = 0; b < 10; ++b) {
      for (std::uint32_t a = 0; a < 11; ++a) {
        configs.push_back({b, a});
        source.time_ms.push_back(1.0 + a + b);
      }
    }
    std::vector<double> b_values{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    std::vector<double> a_values{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11};
    auto space = ktune::search::SearchSpace::create({{"b", b_values}, {"a", a_values}}, configs);
    REQUIRE(space.ok());
    source.space = std::move(space).value();
    source.label = "reordered";
    source.value_text = {{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"},
                         {"0", "1", "2", "3", "4", "5", "6", "7", "8", "10", "11"}};
    auto prior = ktune::replay::prior_source(target, source);
    REQUIRE(prior.ok());
    std::size_t expected = 0; // a in 0..8 (9 values shared), a != b
    for (std::uint32_t a = 0; a < 9; ++a) {
      for (std::uint32_t b = 0; b < 10; ++b) expected += a != b ? 1 : 0;
    }
    CHECK(prior->results.size() == expected);
    const std::vector<std::uint32_t> at{2, 5};
    const std::size_t id = *target.space.find(at);
    bool found = false;
    for (const auto& r : prior->results) {
      if (r.config == id) {
        found = true;
        CHECK(*r.time_ms == 1.0 + 2 + 5);
      }
    }
    CHECK(found);
  }
  SECTION("a recording of another kernel is refused") {
    RecordedSpace other = synthetic_recording();
    std::vector<std::vector<std::uint32_t>> configs{{0}, {1}};
    auto space = ktune::search::SearchSpace::create({{"block", {32, 64}}}, configs);
    REQUIRE(space.ok());
    other.space = std::move(space).value();
    other.value_text = {{"32", "64"}};
    other.time_ms = {1.0, 2.0};
    other.label = "other kernel";
    auto prior = ktune::replay::prior_source(target, other);
    REQUIRE_FALSE(prior.ok());
    CHECK(prior.error().code == ktune::ErrorCode::bad_prior);
    CHECK(prior.error().message.find("other kernel") != std::string::npos);
  }
  SECTION("bayes with a prior of the same landscape starts at its optimum") {
    ReplayOptions options;
    options.strategy = "bayes";
    options.budget = 1;
    options.repeats = 3;
    RecordedSpace source = synthetic_recording();
    auto prior = ktune::replay::prior_source(target, source);
    REQUIRE(prior.ok());
    options.prior.push_back(std::move(*prior));
    auto report = ktune::replay::run_replay(target, options);
    REQUIRE(report.ok());
    CHECK(report->checkpoints.back().optimum_rate == 1.0);
  }
}
