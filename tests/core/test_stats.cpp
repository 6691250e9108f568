#include "core/stats.hpp"

#include <catch2/catch.hpp>

TEST_CASE("core/stats: summarize", "[core][stats]") {
  SECTION("empty input") {
    const auto s = ktune::summarize({});
    CHECK(s.n == 0);
    CHECK(s.median_ms == 0);
    CHECK(s.rsd() == 0);
  }
  SECTION("one sample") {
    const auto s = ktune::summarize({2.5});
    CHECK(s.n == 1);
    CHECK(s.min_ms == 2.5);
    CHECK(s.max_ms == 2.5);
    CHECK(s.median_ms == 2.5);
    CHECK(s.q1_ms == 2.5);
    CHECK(s.q3_ms == 2.5);
    CHECK(s.stddev_ms == 0);
    CHECK(s.rsd() == 0);
  }
  SECTION("unsorted input, odd count") {
    const auto s = ktune::summarize({5, 1, 4, 2, 3});
    CHECK(s.n == 5);
    CHECK(s.min_ms == 1);
    CHECK(s.max_ms == 5);
    CHECK(s.median_ms == 3);
    CHECK(s.mean_ms == Approx(3));
    CHECK(s.q1_ms == Approx(2));
    CHECK(s.q3_ms == Approx(4));
    CHECK(s.stddev_ms == Approx(std::sqrt(2.5)));
    CHECK(s.rsd() == Approx(std::sqrt(2.5) / 3));
  }
  SECTION("even count interpolates") {
    const auto s = ktune::summarize({4, 1, 3, 2});
    CHECK(s.median_ms == Approx(2.5));
    CHECK(s.q1_ms == Approx(1.75));
    CHECK(s.q3_ms == Approx(3.25));
    CHECK(s.stddev_ms == Approx(std::sqrt(5.0 / 3.0)));
  }
  SECTION("zero mean gives rsd 0") {
    const auto s = ktune::summarize({0, 0, 0});
    CHECK(s.rsd() == 0);
  }
}

TEST_CASE("core/stats: pool_rounds", "[core][stats]") {
  SECTION("rounds pool into the summary of all their samples, medians of the medians") {
    const std::vector<double> a = {1, 2, 3, 4, 5};
    const std::vector<double> b = {2, 3, 4};
    const std::vector<double> c = {10, 11, 12, 13};
    const auto pooled = ktune::pool_rounds({ktune::summarize(a), ktune::summarize(b),
                                            ktune::summarize(c)});
    std::vector<double> all(a);
    all.insert(all.end(), b.begin(), b.end());
    all.insert(all.end(), c.begin(), c.end());
    const auto direct = ktune::summarize(all);
    CHECK(pooled.n == 12);
    CHECK(pooled.min_ms == 1);
    CHECK(pooled.max_ms == 13);
    CHECK(pooled.mean_ms == Approx(direct.mean_ms));
    CHECK(pooled.stddev_ms == Approx(direct.stddev_ms));
    CHECK(pooled.median_ms == Approx(3));  // medians 3, 3, 11.5
    CHECK(pooled.q1_ms == Approx(2.5));    // q1s 2, 2.5, 10.75
  }
  SECTION("empty rounds are skipped") {
    CHECK(ktune::pool_rounds({}).n == 0);
    const auto pooled = ktune::pool_rounds({ktune::SampleStats{}, ktune::summarize({4, 6})});
    CHECK(pooled.n == 2);
    CHECK(pooled.median_ms == Approx(5));
    CHECK(pooled.min_ms == 4);
  }
}

TEST_CASE("core/stats: judge_finals", "[core][stats]") {
  SECTION("the best is the lowest median of round medians; it ties itself") {
    const auto v = ktune::judge_finals({{2.0, 2.0, 2.0}, {1.0, 1.0, 1.0}}, 0.03);
    CHECK(v.best == 1);
    CHECK(v.tied == std::vector<bool>{false, true});
    CHECK(v.ratio[0] == Approx(2.0));
    CHECK(v.ratio_low[0] == Approx(2.0));  // no spread, no interval
    CHECK(v.ratio[1] == Approx(1.0));
  }
  SECTION("drift shared by a round cancels: a steady 1% gap ties, a steady 10% gap does not") {
    // The machine slows down from round to round; the finalists keep their gaps.
    const std::vector<double> drift = {1.0, 1.3, 0.9, 1.6, 1.1};
    std::vector<double> best, near, slow;
    for (double d : drift) {
      best.push_back(d);
      near.push_back(1.01 * d);
      slow.push_back(1.10 * d);
    }
    const auto v = ktune::judge_finals({slow, near, best}, 0.03);
    CHECK(v.best == 2);
    CHECK(v.ratio[1] == Approx(1.01));
    CHECK(v.ratio[0] == Approx(1.10));
    CHECK(v.tied == std::vector<bool>{false, true, true});
  }
  SECTION("an uncertain 5% gap ties, a certain one does not") {
    const std::vector<double> best = {1.0, 1.0, 1.0, 1.0, 1.0};
    const std::vector<double> steady = {1.05, 1.05, 1.05, 1.05, 1.05};
    const std::vector<double> noisy = {1.15, 0.97, 1.05, 0.99, 1.08};  // median 1.05
    const auto v = ktune::judge_finals({best, steady, noisy}, 0.03);
    CHECK(v.best == 0);
    CHECK_FALSE(v.tied[1]);
    CHECK(v.ratio_low[1] == Approx(1.05));
    CHECK(v.ratio[2] == Approx(1.05));
    CHECK(v.ratio_low[2] < 1.03);
    CHECK(v.tied[2]);
  }
  SECTION("one disturbed round does not decide") {
    const std::vector<double> best = {1.0, 1.0, 1.0, 1.0, 1.0};
    const std::vector<double> hit = {1.01, 1.02, 1.60, 1.00, 1.02};  // geometric mean ~1.10
    const auto v = ktune::judge_finals({best, hit}, 0.03);
    CHECK(v.ratio[1] == Approx(1.02));
    CHECK(v.tied[1]);
  }
  SECTION("however noisy, a tie is never measured more than 2 x tie_margin slower") {
    const std::vector<double> best = {1.0, 1.0, 1.0, 1.0, 1.0};
    const std::vector<double> wild = {2.5, 0.6, 1.9, 0.7, 1.4};  // median 1.4, interval huge
    const auto v = ktune::judge_finals({best, wild}, 0.03);
    CHECK(v.ratio_low[1] < 1.0);
    CHECK(v.ratio[1] > 1.06);
    CHECK_FALSE(v.tied[1]);
  }
  SECTION("one round: the ratio alone decides") {
    const auto v = ktune::judge_finals({{1.0}, {1.02}, {1.05}}, 0.03);
    CHECK(v.tied == std::vector<bool>{true, true, false});
  }
  SECTION("equal medians: the lower index is the best") {
    CHECK(ktune::judge_finals({{1.0, 1.0}, {1.0, 1.0}}, 0.03).best == 0);
    CHECK(ktune::judge_finals({}, 0.03).tied.empty());
  }
}

TEST_CASE("core/stats: median_interval", "[core][stats]") {
  SECTION("empty and small inputs") {
    CHECK(ktune::median_interval({}).low_ms == 0);
    const auto few = ktune::median_interval({3, 1, 2});
    CHECK(few.low_ms == 1);
    CHECK(few.high_ms == 3);
  }
  SECTION("order statistics around the median, untouched by outliers") {
    std::vector<double> samples;
    for (int i = 1; i <= 100; ++i) samples.push_back(i);
    const auto ci = ktune::median_interval(samples);
    // ranks 50 -+ 9.8: the 40th and 61st values.
    CHECK(ci.low_ms == 40);
    CHECK(ci.high_ms == 61);
    samples.back() = 1e6;
    samples[98] = 1e5;
    CHECK(ktune::median_interval(samples).high_ms == 61);
  }
}

TEST_CASE("core/stats: mann_whitney", "[core][stats]") {
  SECTION("an empty side has p 1") { CHECK(ktune::mann_whitney({}, {1, 2}).p_value == 1); }
  SECTION("identical values have p 1") {
    CHECK(ktune::mann_whitney({1, 1, 1}, {1, 1, 1}).p_value == 1);
  }
  SECTION("U counts the pairs a > b") {
    CHECK(ktune::mann_whitney({4, 5, 6}, {1, 2, 3}).u == 9);
    CHECK(ktune::mann_whitney({1, 2, 3}, {4, 5, 6}).u == 0);
    CHECK(ktune::mann_whitney({1, 2}, {2, 3}).u == Approx(0.5));
  }
  SECTION("p-values against scipy.stats.mannwhitneyu(method='asymptotic')") {
    // Fully separated samples of 10 and 10: U = 100, z = (50 - 0.5) / sqrt(175).
    std::vector<double> a, b;
    for (int i = 0; i < 10; ++i) {
      a.push_back(10 + i);
      b.push_back(i);
    }
    CHECK(ktune::mann_whitney(a, b).p_value == Approx(0.00018267).epsilon(1e-3));
    // Interleaved: no evidence either way.
    CHECK(ktune::mann_whitney({1, 3, 5, 7, 9}, {2, 4, 6, 8, 10}).p_value > 0.5);
  }
}
