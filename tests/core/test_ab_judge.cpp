#include <catch2/catch.hpp>

#include "core/ab_judge.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

// `rounds` rounds of a baseline near 1 ms whose machine drifts by up to +-30% between rounds (the
// same drift for both sides of a round), the candidate `factor` times slower, each side with its
// own noise of `noise` (relative, uniform).
void rounds_of(double factor, double noise, std::size_t rounds, unsigned seed,
               std::vector<double>& a, std::vector<double>& b) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> drift(0.7, 1.3), jitter(-noise, noise);
  a.clear();
  b.clear();
  for (std::size_t r = 0; r < rounds; ++r) {
    const double machine = drift(rng);
    a.push_back(machine * (1 + jitter(rng)));
    b.push_back(machine * factor * (1 + jitter(rng)));
  }
}

} // namespace

TEST_CASE("core/ab_judge: the signed-rank interval", "[core][ab]") {
  // n = 10: the two-sided 5% critical value of the signed-rank statistic is 8, so the interval is
  // the 9th lowest and 9th highest of the 55 Walsh averages.
  std::vector<double> values;
  for (int i = 1; i <= 10; ++i) values.push_back(i);
  const auto hl = ktune::hodges_lehmann(values);
  CHECK(hl.estimate == Approx(5.5));
  std::vector<double> walsh;
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = i; j < values.size(); ++j) walsh.push_back((values[i] + values[j]) / 2);
  std::sort(walsh.begin(), walsh.end());
  CHECK(hl.low == walsh[8]);
  CHECK(hl.high == walsh[55 - 9]);
  // Under 6 values no interval reaches 95%: the range.
  const auto few = ktune::hodges_lehmann({1.0, 2.0, 3.0});
  CHECK(few.low == 1.0);
  CHECK(few.high == 3.0);
}

TEST_CASE("core/ab_judge: verdicts from paired rounds", "[core][ab]") {
  std::vector<double> a, b;
  SECTION("the same artifact, on a machine drifting 30% between rounds: same, every seed") {
    for (unsigned seed = 1; seed <= 50; ++seed) {
      rounds_of(1.0, 0.01, 10, seed, a, b);
      const auto j = ktune::judge_ab(a, b, 0.05);
      INFO(j.why);
      CHECK(j.verdict == ktune::AbVerdict::same);
    }
  }
  SECTION("10% slower: regressed, with the ratio, every seed") {
    for (unsigned seed = 1; seed <= 50; ++seed) {
      rounds_of(1.10, 0.02, 10, seed, a, b);
      const auto j = ktune::judge_ab(a, b, 0.05);
      INFO(j.why);
      CHECK(j.verdict == ktune::AbVerdict::regressed);
      CHECK(j.ratio == Approx(1.10).epsilon(0.02));
      CHECK(j.ratio_low > 1.0);
      CHECK(j.why.find("slower by +") != std::string::npos);
    }
  }
  SECTION("25% faster: improved") {
    rounds_of(0.8, 0.02, 8, 7, a, b);
    const auto j = ktune::judge_ab(a, b, 0.05);
    CHECK(j.verdict == ktune::AbVerdict::improved);
    CHECK(j.ratio_high < 1.0);
  }
  SECTION("two rounds with one side disturbed 3x decide nothing") {
    rounds_of(1.0, 0.01, 12, 3, a, b);
    b[2] *= 3;
    a[7] *= 3;
    const auto j = ktune::judge_ab(a, b, 0.05);
    INFO(j.why);
    CHECK(j.verdict == ktune::AbVerdict::same);
  }
  SECTION("rounds that disagree: ambiguous, saying why") {
    rounds_of(1.0, 0.25, 8, 11, a, b);
    const auto j = ktune::judge_ab(a, b, 0.05);
    INFO(j.why);
    CHECK(j.verdict == ktune::AbVerdict::ambiguous);
    CHECK(j.why.find("overlaps the minimum effect") != std::string::npos);
  }
  SECTION("too few rounds: ambiguous") {
    const auto j = ktune::judge_ab({1, 1, 1}, {2, 2, 2}, 0.05);
    CHECK(j.verdict == ktune::AbVerdict::ambiguous);
    CHECK(j.rounds == 3);
    CHECK(j.why.find("too few rounds") != std::string::npos);
  }
  SECTION("rounds without a time on a side are skipped") {
    const auto j = ktune::judge_ab({1, 0, 1}, {1, 1, -1}, 0.05);
    CHECK(j.rounds == 1);
  }
}
