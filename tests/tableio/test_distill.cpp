#include "tableio/distill.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::tableio;

namespace {

// Shapes M=16..512 (N = K = 64), configs A, B, C: A is 1.0 below M=100 and 1.3 above, B the
// mirror, C 1.1 everywhere.
constexpr std::size_t A = 0, B = 1, C = 2;
const std::vector<std::int64_t> k_ms = {16, 32, 64, 128, 256, 512};

DistillInput two_regions() {
  DistillInput in;
  in.dims = {"M", "N", "K"};
  in.params = {"P"};
  in.configs = {{1}, {2}, {3}};
  for (std::int64_t m : k_ms) {
    DistillShape shape;
    shape.text = "M=" + std::to_string(m) + ",N=64,K=64";
    shape.values = {m, 64, 64};
    const bool small = m < 100;
    shape.winner = small ? A : B;
    in.shapes.push_back(shape);
    in.cells.push_back({Cell{CellState::measured, small ? 1.0 : 1.3},
                        Cell{CellState::measured, small ? 1.3 : 1.0},
                        Cell{CellState::measured, 1.1}});
  }
  return in;
}

DistillOptions with_configs(std::size_t k, std::optional<double> max_regret = std::nullopt) {
  DistillOptions options;
  options.max_configs = k;
  options.max_regret = max_regret;
  return options;
}

std::size_t shape_index(std::int64_t m) {
  for (std::size_t i = 0; i < k_ms.size(); ++i) {
    if (k_ms[i] == m) return i;
  }
  FAIL("no shape M=" << m);
  return 0;
}

} // namespace

TEST_CASE("distill: two configs and a split on M serve two regions exactly", "[tableio][distill]") {
  const DistillInput in = two_regions();
  auto out = distill(in, with_configs(2));
  REQUIRE(out.ok());
  CHECK(out->complete());
  REQUIRE(out->rule_configs.size() == 2);
  CHECK(out->rule.leaves() == 2);
  REQUIRE(out->rule.nodes[0].dim == 0);  // M
  // The geometric middle of 64 and 128, rounded up.
  CHECK(out->rule.nodes[0].below == 91);
  CHECK(out->in_sample.summary.geomean == Approx(1.0));
  CHECK(out->in_sample.summary.worst == Approx(1.0));
  for (std::size_t s = 0; s < k_ms.size(); ++s) {
    CHECK(out->in_sample.shapes[s].config == (k_ms[s] < 100 ? A : B));
  }
  // Left out, a shape away from the boundary is still served by its region's config.
  for (std::int64_t m : {16, 32, 256, 512}) {
    CHECK(out->loso.shapes[shape_index(m)].regret == Approx(1.0));
  }
  CHECK(out->loso.summary.shapes == k_ms.size());
}

TEST_CASE("distill: one config for all shapes is the one of least summed log regret",
          "[tableio][distill]") {
  auto out = distill(two_regions(), with_configs(1));
  REQUIRE(out.ok());
  REQUIRE(out->rule_configs == std::vector<std::size_t>{C});
  CHECK(out->rule.leaves() == 1);
  CHECK(out->in_sample.summary.geomean == Approx(1.1));
  CHECK(out->loso.summary.worst == Approx(1.1));
  // The nearest shape's winner. 64 lies as near 32 as 128 (log space): the tie goes to the shape
  // text that sorts first, "M=128,..", whose winner is B; 128's tie (64, 256) goes to 256.
  CHECK(out->nearest.summary.shapes == k_ms.size());
  CHECK(out->nearest.shapes[shape_index(64)].regret == Approx(1.3));
  CHECK(out->nearest.shapes[shape_index(128)].regret == Approx(1.0));
  CHECK(out->nearest.shapes[shape_index(16)].regret == Approx(1.0));
}

TEST_CASE("distill: a config the kernel does not admit at a shape gives way to the next",
          "[tableio][distill]") {
  DistillInput in = two_regions();
  in.cells[shape_index(16)][A] = Cell{CellState::not_admitted, 0};
  in.cells[shape_index(16)][C] = Cell{CellState::measured, 1.05};
  in.cells[shape_index(16)][B] = Cell{CellState::measured, 1.3};
  auto out = distill(in, with_configs(3));
  REQUIRE(out.ok());
  const ShapeChoice& at16 = out->in_sample.shapes[shape_index(16)];
  REQUIRE(at16.config);
  CHECK(*at16.config == C);
  // The regret is over the best measured at the shape (C, 1.05).
  CHECK(*at16.regret == Approx(1.0));
  CHECK(out->in_sample.summary.no_choice == 0);
}

TEST_CASE("distill: the nearest rule skips a winner the kernel does not admit at the shape",
          "[tableio][distill]") {
  DistillInput in = two_regions();
  in.cells[shape_index(16)][A] = Cell{CellState::not_admitted, 0};
  in.cells[shape_index(16)][C] = Cell{CellState::measured, 1.0};
  in.shapes[shape_index(16)].winner = C;
  in.cells[shape_index(512)][A] = Cell{CellState::measured, 1.3};
  auto out = distill(in, with_configs(2));
  REQUIRE(out.ok());
  // Shape 16's nearest shape is 32 (winner A, not admitted at 16): the next nearest whose winner
  // is admitted there is 64 (A again, no), then 128 (B).
  const ShapeChoice& at16 = out->nearest.shapes[shape_index(16)];
  REQUIRE(at16.config);
  CHECK(*at16.config == B);
  CHECK(*at16.regret == Approx(1.3));
  CHECK(out->nearest.substituted >= 1);
}

TEST_CASE("distill: cells it needs and nobody measured are listed, never guessed",
          "[tableio][distill]") {
  DistillInput in = two_regions();
  // C never measured at 512; B never measured at 64, where the nearest rule takes B (64 lies
  // as near 32 as 128, and "M=128,.." sorts first).
  in.cells[shape_index(512)][C] = Cell{CellState::unknown, 0};
  in.cells[shape_index(64)][B] = Cell{CellState::unknown, 0};
  std::size_t asked = 0;
  in.admits = [&](std::size_t, std::size_t) {
    ++asked;
    return true;
  };
  auto out = distill(in, with_configs(1));
  REQUIRE(out.ok());
  CHECK_FALSE(out->complete());
  const std::vector<std::pair<std::size_t, std::size_t>> expected{{shape_index(64), B},
                                                                 {shape_index(512), C}};
  CHECK(out->missing == expected);
  CHECK(asked == 2);  // each unknown cell asked once
  // An unknown cell costs the rule as a failure would: the one config is A, measured everywhere.
  CHECK(out->rule_configs == std::vector<std::size_t>{A});
  CHECK(out->in_sample.summary.unknown == 0);
  // The nearest rule's choice at 64 is not known there: left out of its figures, counted.
  CHECK_FALSE(out->nearest.shapes[shape_index(64)].regret);
  CHECK(out->nearest.summary.unknown == 1);
  CHECK(out->nearest.summary.shapes + out->nearest.summary.unknown == k_ms.size());

  SECTION("a cell the kernel does not admit is not missing") {
    in.admits = [&](std::size_t s, std::size_t) { return s != shape_index(512); };
    auto again = distill(in, with_configs(1));
    REQUIRE(again.ok());
    CHECK(again->missing == std::vector<std::pair<std::size_t, std::size_t>>{{shape_index(64), B}});
  }
}

TEST_CASE("distill: a config that failed at a shape counts ten times its best there",
          "[tableio][distill]") {
  DistillInput in = two_regions();
  // A is the fastest everywhere but fails at 256; B 1.2 everywhere.
  for (std::size_t s = 0; s < k_ms.size(); ++s) {
    in.cells[s] = {Cell{CellState::measured, 1.0}, Cell{CellState::measured, 1.2},
                   Cell{CellState::measured, 1.5}};
    in.shapes[s].winner = A;
  }
  in.cells[shape_index(256)][A] = Cell{CellState::failed, 0};
  in.shapes[shape_index(256)].winner = B;
  auto out = distill(in, with_configs(1));
  REQUIRE(out.ok());
  CHECK(out->rule_configs == std::vector<std::size_t>{B});

  SECTION("chosen where it failed, it is a failure in the summary") {
    std::vector<ShapeChoice> choices{{0, A, k_failure_regret}, {1, A, 1.0}};
    const RegretSummary summary = summarize_regret(choices);
    CHECK(summary.failures == 1);
    CHECK(summary.worst == k_failure_regret);
  }
}

TEST_CASE("distill: --max-regret takes the fewest configs that reach it", "[tableio][distill]") {
  SECTION("reached with two") {
    auto out = distill(two_regions(), with_configs(3, 1.05));
    REQUIRE(out.ok());
    CHECK(out->regret_met);
    CHECK(out->rule_configs.size() == 2);
  }
  SECTION("not reached within max_configs") {
    auto out = distill(two_regions(), with_configs(1, 1.05));
    REQUIRE(out.ok());
    CHECK_FALSE(out->regret_met);
    CHECK(out->rule_configs.size() == 1);
  }
}

TEST_CASE("distill: bad input is refused, naming what is wrong", "[tableio][distill]") {
  DistillInput in = two_regions();
  SECTION("no configs allowed") {
    auto out = distill(in, with_configs(0));
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message, Catch::Contains("max_configs"));
  }
  SECTION("a shape without a measured config") {
    for (auto& cell : in.cells[2]) cell = Cell{CellState::failed, 0};
    auto out = distill(in, {});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().code == ErrorCode::bad_request);
    CHECK_THAT(out.error().message, Catch::Contains("M=64,N=64,K=64"));
  }
  SECTION("no shapes") {
    in.shapes.clear();
    in.cells.clear();
    REQUIRE_FALSE(distill(in, {}).ok());
  }
}

TEST_CASE("distill: regret summaries and the nearest shape", "[tableio][distill]") {
  SECTION("p95 is the nearest rank: the 19th of 20") {
    std::vector<ShapeChoice> choices;
    for (int i = 1; i <= 20; ++i) choices.push_back({0, 0, 1.0 + i / 100.0});
    const RegretSummary summary = summarize_regret(choices);
    CHECK(summary.shapes == 20);
    CHECK(summary.p95 == Approx(1.19));
    CHECK(summary.worst == Approx(1.20));
    double logs = 0;
    for (int i = 1; i <= 20; ++i) logs += std::log(1.0 + i / 100.0);
    CHECK(summary.geomean == Approx(std::exp(logs / 20)));
  }
  SECTION("unknown and missing choices are counted apart") {
    const RegretSummary summary =
        summarize_regret({{0, std::nullopt, std::nullopt}, {1, 0, std::nullopt}, {2, 0, 1.5}});
    CHECK(summary.no_choice == 1);
    CHECK(summary.unknown == 1);
    CHECK(summary.shapes == 1);
  }
  SECTION("ties of distance go to the shape that sorts first, as ktuned's nearest rung") {
    std::vector<DistillShape> shapes{{"M=64", {64}, 0}, {"M=16", {16}, 0}};
    const std::vector<std::int64_t> at{32};
    CHECK(nearest_shape(shapes, at, {0, 1}) == 1u);  // "M=16" < "M=64"
    CHECK(nearest_shape(shapes, at, {}) == std::nullopt);
  }
}
