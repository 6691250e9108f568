// The finals and the winner choice (daemon/finals.hpp) as pure functions: who goes to the
// finals, who is raced out, the winning group, the incumbent, the 1% rule and the pooled
// (remeasured) rows. No daemon, no store: rows and rounds are made by the test.
#include "daemon/finals.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::daemon;

namespace {

SampleStats stats_of(double median_ms, std::size_t n = 10) {
  SampleStats s;
  s.n = n;
  s.min_ms = s.max_ms = s.median_ms = s.mean_ms = s.q1_ms = s.q3_ms = median_ms;
  return s;
}

ResultRecord row(std::size_t index, double median_ms, bool pruned = false, bool tied = false) {
  ResultRecord r;
  r.config_index = static_cast<std::int64_t>(index);
  r.config = "{\"BM\":" + std::to_string(index) + "}";
  r.status = CandidateStatus::ok;
  r.stats = stats_of(median_ms);
  r.gflops = 100.0 / median_ms;
  r.gbps = 10.0 / median_ms;
  r.pruned = pruned;
  r.tied = tied;
  return r;
}

std::map<std::size_t, ResultRecord> rows_of(const std::vector<ResultRecord>& rows) {
  std::map<std::size_t, ResultRecord> out;
  for (const auto& r : rows) out[static_cast<std::size_t>(r.config_index)] = r;
  return out;
}

// A finalist measured `rounds.size()` rounds, one round median each, five samples per round.
FinalistRounds finalist(std::size_t index, const std::vector<double>& rounds) {
  FinalistRounds f;
  f.index = index;
  for (const double ms : rounds) {
    f.rounds.push_back(stats_of(ms, 5));
    for (int i = 0; i < 5; ++i) f.samples.push_back(static_cast<float>(ms));
  }
  return f;
}

const ResultRecord& winner_of(const WinnerChoice& choice) { return choice.rows.at(choice.winner); }

} // namespace

TEST_CASE("pick_finalists: the best and the rows measured here within the margin, nearest first",
          "[daemon][finals]") {
  const auto rows = rows_of({row(0, 1.00), row(1, 1.20), row(2, 1.40), row(3, 1.05, true),
                             row(4, 1.10), row(5, 1.02)});
  const std::optional<ResultRecord> best = rows.at(0);
  const std::set<std::size_t> all = {0, 1, 2, 3, 4, 5};

  SECTION("within 30%, pruned rows never, in config order") {
    CHECK(pick_finalists(rows, best, all, 0.30, 32) == std::vector<std::size_t>{0, 1, 4, 5});
  }
  SECTION("at most `finalists`, the nearest kept") {
    CHECK(pick_finalists(rows, best, all, 0.30, 3) == std::vector<std::size_t>{0, 4, 5});
  }
  SECTION("a row reused from an earlier job is no finalist") {
    CHECK(pick_finalists(rows, best, {0, 1, 2, 3, 4}, 0.30, 32) ==
          std::vector<std::size_t>{0, 1, 4});
  }
  SECTION("no finals: a best not measured here, fewer than two, or none") {
    CHECK(pick_finalists(rows, best, {1, 2, 4, 5}, 0.30, 32).empty());
    CHECK(pick_finalists(rows, best, all, 0.01, 32).empty());
    CHECK(pick_finalists(rows, best, all, 0.30, 1).empty());
    CHECK(pick_finalists(rows, std::nullopt, all, 0.30, 32).empty());
  }
}

TEST_CASE("race_out: clear losers leave from round 3 on, slowest first, two always stay",
          "[daemon][finals]") {
  const std::vector<FinalistRounds> four = {
      finalist(0, {1.00, 1.00, 1.00}), finalist(1, {1.01, 1.01, 1.01}),
      finalist(2, {1.20, 1.21, 1.19}), finalist(3, {1.50, 1.52, 1.49})};
  CHECK(race_out(four, 2, 0.03).empty());  // too early
  CHECK(race_out(four, 3, 0.03) == std::vector<std::size_t>{2, 3});
  // Three finalists, two of them losers: only the slowest leaves.
  const std::vector<FinalistRounds> three = {four[0], four[2], four[3]};
  CHECK(race_out(three, 3, 0.03) == std::vector<std::size_t>{2});
  CHECK(race_out({four[0], four[3]}, 5, 0.03).empty());
}

TEST_CASE("choose_winner after finals: the finals' ties, the fastest tie, pooled rows",
          "[daemon][finals]") {
  FinalsInput input;
  input.ok_rows = rows_of({row(0, 1.10), row(1, 1.00), row(2, 1.02), row(3, 0.90)});
  // Row 3 was fastest in the search but is not in the finals (measured at another moment).
  input.finalists = {finalist(0, {1.20, 1.21, 1.19, 1.20, 1.22}),
                     finalist(1, {1.00, 1.00, 1.01, 1.00, 1.00}),
                     finalist(2, {0.98, 0.99, 0.98, 0.99, 0.98})};
  input.tie_margin = 0.03;

  SECTION("the tie with the lowest median wins; the row outside the finals never does") {
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.ties == std::vector<std::int64_t>{1, 2});
    CHECK(winner_of(choice).config_index == 2);
    CHECK_FALSE(choice.incumbent_kept);
    CHECK(choice.verdict.tied == std::vector<bool>{false, true, true});
    for (const auto& r : choice.rows) CHECK(r.tied == (r.config_index == 1 || r.config_index == 2));
  }
  SECTION("the incumbent is kept when it is in the group") {
    input.incumbent_config = input.ok_rows.at(1).config;
    const WinnerChoice choice = choose_winner(input);
    CHECK(winner_of(choice).config_index == 1);
    CHECK(choice.incumbent_kept);
  }
  SECTION("an incumbent outside the group is not") {
    input.incumbent_config = input.ok_rows.at(0).config;
    const WinnerChoice choice = choose_winner(input);
    CHECK(winner_of(choice).config_index == 2);
    CHECK_FALSE(choice.incumbent_kept);
  }
  SECTION("remeasure: every finalist's row holds its rounds pooled, the raced-out ones too") {
    input.raced_out = {finalist(3, {1.30, 1.31, 1.29})};
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.remeasured == std::vector<std::int64_t>{0, 1, 2, 3});
    const ResultRecord& pooled = choice.rows.at(2);
    CHECK(pooled.remeasured);
    CHECK(pooled.samples_ms.size() == 25);
    CHECK(pooled.stats.n == 25);
    CHECK(pooled.stats.median_ms == Approx(0.98));
    CHECK(pooled.gflops == Approx(100.0 / 0.98));  // scaled by the change of median
    CHECK(pooled.gbps == Approx(10.0 / 0.98));
    CHECK(choice.rows.at(3).stats.median_ms == Approx(1.30));
    CHECK(choice.rows.at(3).remeasured);
    CHECK_FALSE(choice.rows.at(3).tied);  // raced out: never in the group
    // The input is not changed.
    CHECK_FALSE(input.ok_rows.at(2).remeasured);
  }
  SECTION("a finalist without samples keeps its rounds' figures pooled") {
    for (auto& f : input.finalists) f.samples.clear();
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.rows.at(1).samples_ms.empty());
    CHECK(choice.rows.at(1).stats.n == 25);
    CHECK(choice.rows.at(1).stats.median_ms == Approx(1.00));
  }
}

TEST_CASE("choose_winner: medians within 1% are one time, the lower config index wins",
          "[daemon][finals]") {
  FinalsInput input;
  input.tie_margin = 0.03;
  input.finalists = {finalist(4, {1.000, 1.000, 1.000}), finalist(7, {0.995, 0.995, 0.995}),
                     finalist(9, {0.980, 0.980, 0.980})};
  input.ok_rows = rows_of({row(4, 1.0), row(7, 1.0), row(9, 1.0)});

  SECTION("beyond 1% of the fastest: the fastest") {
    CHECK(winner_of(choose_winner(input)).config_index == 9);
  }
  SECTION("within 1% of the fastest: the lowest index among them") {
    input.finalists[2] = finalist(9, {0.991, 0.991, 0.991});
    // 1.000 is within 1% of 0.991, so config 4 wins, though 7 and 9 are faster.
    CHECK(winner_of(choose_winner(input)).config_index == 4);
  }
}

TEST_CASE("choose_winner without finals: tie_margin on medians, a reused judgement stands",
          "[daemon][finals]") {
  FinalsInput input;
  input.tie_margin = 0.03;

  SECTION("the fastest and those within tie_margin; pruned rows never tie") {
    input.ok_rows = rows_of({row(0, 1.02), row(1, 1.00), row(2, 1.50), row(3, 1.01, true)});
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.ties == std::vector<std::int64_t>{0, 1});
    CHECK(winner_of(choice).config_index == 1);
    CHECK(choice.remeasured.empty());
    CHECK(choice.verdict.tied.empty());
    for (const auto& r : choice.rows) CHECK_FALSE(r.remeasured);
  }
  SECTION("the incumbent in the group is kept") {
    input.ok_rows = rows_of({row(0, 1.02), row(1, 1.00), row(2, 1.50)});
    input.incumbent_config = input.ok_rows.at(0).config;
    const WinnerChoice choice = choose_winner(input);
    CHECK(winner_of(choice).config_index == 0);
    CHECK(choice.incumbent_kept);
  }
  SECTION("one finalist left is no finals") {
    input.ok_rows = rows_of({row(0, 1.00), row(1, 1.20)});
    input.finalists = {finalist(0, {0.5, 0.5})};
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.remeasured.empty());
    CHECK(choice.rows.at(0).stats.median_ms == Approx(1.00));
    CHECK(choice.ties == std::vector<std::int64_t>{0});
  }
  SECTION("every row reused: the earlier job's ties stand, even the slower one's") {
    input.measured_here = false;
    input.ok_rows = rows_of({row(0, 1.00), row(1, 1.05, false, true), row(2, 1.06, false, true)});
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.ties == std::vector<std::int64_t>{1, 2});
    CHECK(winner_of(choice).config_index == 1);
  }
  SECTION("every row reused, none tied: the medians decide") {
    input.measured_here = false;
    input.ok_rows = rows_of({row(0, 1.00), row(1, 1.05)});
    const WinnerChoice choice = choose_winner(input);
    CHECK(choice.ties == std::vector<std::int64_t>{0});
    CHECK(winner_of(choice).config_index == 0);
  }
}
