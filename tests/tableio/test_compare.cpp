#include "tableio/compare.hpp"

#include "tableio/formats.hpp"
#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

using namespace ktune;
using namespace ktune::test;
using tableio::Presence;

namespace {

constexpr const char* k_small = "M=256,N=256,K=256";
constexpr const char* k_big = "M=512,N=512,K=512";
constexpr const char* k_huge = "M=1024,N=1024,K=1024";

// Rows with a 1% stddev over 10 samples: 95% half-width ~0.72% of the median.
tableio::Table current() {
  return make_table({make_row(k_small, k_config_a, 1.0, 1), make_row(k_big, k_config_a, 5.0, 1),
                     make_row(k_huge, k_config_a, 9.0, 1)});
}

tableio::TableRow& row_of(tableio::Table& table, const char* shape) {
  for (auto& row : table.rows) {
    if (row.shape == shape) return row;
  }
  FAIL("no row " << shape);
  return table.rows.front();
}

const tableio::KeyComparison& key_of(const tableio::Comparison& c, const char* shape) {
  for (const auto& k : c.keys) {
    if (k.key.shape == shape) return k;
  }
  FAIL("no key " << shape);
  return c.keys.front();
}

} // namespace

TEST_CASE("a baseline edited to be 20% faster on one key makes that key regress", "[tableio]") {
  const auto now = current();
  // The baseline file: the same export, one key's times edited down by 20%.
  auto doc = tableio::table_to_json(now);
  for (auto& row : doc["rows"]) {
    if (row["shape"] == k_big) {
      row["median_ms"] = row["median_ms"].get<double>() * 0.8;
      row["stats"]["median_ms"] = row["stats"]["median_ms"].get<double>() * 0.8;
      row["stats"]["mean_ms"] = row["stats"]["mean_ms"].get<double>() * 0.8;
    }
  }
  auto& rows = doc["rows"];
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i]["shape"] == k_small) rows.erase(i);  // the small key is new in the current table
  }
  auto baseline = tableio::table_from_json(doc, "baseline.json");
  REQUIRE(baseline.ok());

  const auto result = tableio::compare(now, *baseline, {.min_effect = 0.05});
  REQUIRE(result.keys.size() == 3);
  REQUIRE(result.regressions() == 1);
  const auto& big = key_of(result, k_big);
  REQUIRE(big.presence == Presence::both);
  REQUIRE(big.regressed());
  REQUIRE(*big.ratio == Approx(1.25));
  REQUIRE(big.method == tableio::Method::interval);
  REQUIRE_FALSE(big.winner_changed);
  const auto& huge = key_of(result, k_huge);
  REQUIRE_FALSE(huge.regressed());
  REQUIRE(huge.verdict == tableio::Verdict::same);
  REQUIRE(*huge.ratio == Approx(1.0));
  REQUIRE(key_of(result, k_small).presence == Presence::current_only);
  REQUIRE(result.count(Presence::current_only) == 1);

  SECTION("markdown lists the regression first") {
    const std::string md = tableio::render_markdown(result);
    REQUIRE_THAT(md, Catch::Contains("**1 regressed**"));
    const auto table_start = md.find("|---");
    const auto first_row = md.find('\n', table_start) + 1;
    REQUIRE(md.compare(first_row, 13, "| REGRESSED |") == 0);
    REQUIRE_THAT(md, Catch::Contains("| 1.250 |"));
    REQUIRE_THAT(md, Catch::Contains("| new |"));
  }
  SECTION("JUnit has one testcase per key and one failure") {
    const std::string xml = tableio::render_junit(result);
    REQUIRE_THAT(xml, Catch::StartsWith("<?xml"));
    REQUIRE_THAT(xml, Catch::Contains("tests=\"3\" failures=\"1\""));
    std::size_t testcases = 0, failures = 0, skipped = 0;
    for (auto p = xml.find("<testcase "); p != std::string::npos; p = xml.find("<testcase ", p + 1)) ++testcases;
    for (auto p = xml.find("<failure "); p != std::string::npos; p = xml.find("<failure ", p + 1)) ++failures;
    for (auto p = xml.find("<skipped "); p != std::string::npos; p = xml.find("<skipped ", p + 1)) ++skipped;
    REQUIRE(testcases == 3);
    REQUIRE(failures == 1);
    REQUIRE(skipped == 1);
    const auto failure = xml.find("<failure ");
    const auto its_case = xml.rfind("<testcase ", failure);
    REQUIRE(xml.substr(its_case, failure - its_case).find(k_big) != std::string::npos);
  }
}

TEST_CASE("a slower key inside the noise does not regress", "[tableio]") {
  auto base = current();
  auto now = current();
  // 10% slower, but an interquartile range of 20% over 10 samples: the intervals overlap.
  for (auto* table : {&base, &now}) {
    for (auto& row : table->rows) {
      row.stats.q1_ms = row.median_ms * 0.9;
      row.stats.q3_ms = row.median_ms * 1.1;
    }
  }
  row_of(now, k_small).median_ms *= 1.1;
  const auto result = tableio::compare(now, base, {.min_effect = 0.05});
  const auto& k = key_of(result, k_small);
  REQUIRE(*k.ratio == Approx(1.1));
  REQUIRE(k.method == tableio::Method::interval);
  REQUIRE(k.verdict == tableio::Verdict::same);

  SECTION("without statistics the ratio alone decides") {
    row_of(now, k_small).stats = {};
    const auto alone = tableio::compare(now, base, {.min_effect = 0.05});
    REQUIRE(key_of(alone, k_small).method == tableio::Method::ratio_only);
    REQUIRE(key_of(alone, k_small).regressed());
    REQUIRE(alone.regressions() == 1);
  }
  SECTION("under the limit nothing regresses, even outside the noise") {
    for (auto* table : {&base, &now}) {
      for (auto& row : table->rows) row.stats.q1_ms = row.stats.q3_ms = row.median_ms;
    }
    REQUIRE(tableio::compare(now, base, {.min_effect = 0.15}).regressions() == 0);
    REQUIRE(tableio::compare(now, base, {.min_effect = 0.05}).regressions() == 1);
  }
}

TEST_CASE("compare reports changed winners, improvements and keys missing now", "[tableio]") {
  auto base = current();
  auto now = current();
  row_of(now, k_big).config = nlohmann::ordered_json::parse(k_config_b);
  row_of(now, k_big).median_ms *= 0.5;
  now.rows.erase(now.rows.begin());  // M=1024 sorts first
  const auto result = tableio::compare(now, base, {.min_effect = 0.05});
  const auto& changed = key_of(result, k_big);
  REQUIRE(changed.winner_changed);
  REQUIRE(changed.improved());
  REQUIRE_FALSE(changed.regressed());
  REQUIRE(key_of(result, k_huge).presence == Presence::baseline_only);
  REQUIRE_FALSE(key_of(result, k_huge).ratio);
  REQUIRE_THAT(tableio::render_markdown(result), Catch::Contains("changed: "));
  REQUIRE_THAT(tableio::render_markdown(result), Catch::Contains("| missing |"));
}

TEST_CASE("without quartiles the interval of a median uses Student's t", "[tableio]") {
  REQUIRE(tableio::t_quantile_975(1) == Approx(12.706).epsilon(1e-4));
  REQUIRE(tableio::t_quantile_975(9) == Approx(2.262).epsilon(1e-3));
  REQUIRE(tableio::t_quantile_975(30) == Approx(2.042).epsilon(1e-3));
  REQUIRE(tableio::t_quantile_975(40) == Approx(2.021).epsilon(1e-3));   // beyond the old table
  REQUIRE(tableio::t_quantile_975(10'000) == Approx(1.960).epsilon(1e-3));
  auto row = make_row(k_small, k_config_a, 10.0, 1);
  row.stats.n = 10;
  row.stats.stddev_ms = 1.0;
  row.stats.q1_ms = row.stats.q3_ms = 0;  // an old table without quartiles
  const auto ci = tableio::confidence_interval(row);
  REQUIRE(ci);
  REQUIRE(ci->low == Approx(10.0 - 2.262 / std::sqrt(10.0)));
  REQUIRE(ci->high == Approx(10.0 + 2.262 / std::sqrt(10.0)));
  row.stats.n = 1;
  REQUIRE_FALSE(tableio::confidence_interval(row));
}

namespace {

// A 0.09 ms kernel measured on a shared machine: 40 samples within +-3% of the median, and three
// taken while the process was preempted (up to 8.1 ms), like the ones in issue 19's report.
std::vector<float> noisy_samples(double median_ms, unsigned seed) {
  std::vector<float> out;
  unsigned state = seed;
  for (int i = 0; i < 40; ++i) {
    state = state * 1103515245u + 12345u;
    const double jitter = (static_cast<double>((state >> 8) % 1000) / 1000.0 - 0.5) * 0.06;
    out.push_back(static_cast<float>(median_ms * (1 + jitter)));
  }
  out[7] = static_cast<float>(median_ms * 90);
  out[19] = static_cast<float>(median_ms * 20);
  out[33] = static_cast<float>(median_ms * 4);
  return out;
}

tableio::TableRow sampled_row(const char* shape, double median_ms, unsigned seed) {
  auto row = make_row(shape, k_config_a, median_ms, 1);
  row.samples_ms = noisy_samples(median_ms, seed);
  row.stats = summarize(std::vector<double>(row.samples_ms.begin(), row.samples_ms.end()));
  row.median_ms = row.stats.median_ms;
  return row;
}

} // namespace

TEST_CASE("a baseline 1.33x or 2x faster than the current run is a regression", "[tableio]") {
  // The current run as measured; the baseline the same run with every time scaled down.
  for (const double factor : {1.33, 2.0}) {
    CAPTURE(factor);
    const auto now = make_table({sampled_row(k_small, 0.09, 1)});
    const auto base = make_table({sampled_row(k_small, 0.09 / factor, 2)});
    REQUIRE(now.rows.front().stats.max_ms > 50 * now.rows.front().median_ms);

    SECTION("with samples on both sides the rank test decides") {
      const auto result = tableio::compare(now, base, {});
      const auto& k = result.keys.front();
      REQUIRE(k.method == tableio::Method::rank_test);
      REQUIRE(k.verdict == tableio::Verdict::regressed);
      REQUIRE(*k.p_value < 1e-6);
      REQUIRE(*k.ratio == Approx(factor).epsilon(0.05));
      REQUIRE(k.ratio_ci->low > 1.05);
      REQUIRE(k.ratio_ci->low <= *k.ratio);
      REQUIRE(k.ratio_ci->high >= *k.ratio);
      REQUIRE(result.regressions() == 1);
      const std::string xml = tableio::render_junit(result);
      REQUIRE_THAT(xml, Catch::Contains("<failure type=\"regression\""));
      REQUIRE_THAT(xml, Catch::Contains("Mann-Whitney p"));
    }
    SECTION("a baseline without samples falls back to the intervals of the medians") {
      auto old = base;
      old.rows.front().samples_ms.clear();
      const auto result = tableio::compare(now, old, {});
      const auto& k = result.keys.front();
      REQUIRE(k.method == tableio::Method::interval);
      REQUIRE(k.verdict == tableio::Verdict::regressed);
      REQUIRE_FALSE(k.p_value);
      REQUIRE_THAT(tableio::render_junit(result), Catch::Contains("no samples on the baseline side"));
    }
  }
}

TEST_CASE("the rank rule: unchanged is same, small or insignificant changes are same", "[tableio]") {
  SECTION("two measurements of the same kernel") {
    const auto result = tableio::compare(make_table({sampled_row(k_small, 0.09, 3)}),
                                         make_table({sampled_row(k_small, 0.09, 4)}), {});
    REQUIRE(result.keys.front().verdict == tableio::Verdict::same);
    REQUIRE(result.regressions() == 0);
  }
  SECTION("a significant 3% slowdown is below the minimum effect") {
    auto slow = sampled_row(k_small, 0.09, 5);
    for (auto& x : slow.samples_ms) x *= 1.03f;
    const auto result = tableio::compare(make_table({slow}),
                                         make_table({sampled_row(k_small, 0.09, 5)}), {});
    REQUIRE(*result.keys.front().p_value < 0.01);
    REQUIRE(result.keys.front().verdict == tableio::Verdict::same);
  }
  SECTION("a 2x speed-up is an improvement") {
    const auto result = tableio::compare(make_table({sampled_row(k_small, 0.045, 6)}),
                                         make_table({sampled_row(k_small, 0.09, 7)}), {});
    REQUIRE(result.keys.front().verdict == tableio::Verdict::improved);
  }
  SECTION("too few samples on one side is unknown") {
    auto few = sampled_row(k_small, 0.18, 8);
    few.samples_ms.resize(tableio::k_min_samples - 1);
    const auto result = tableio::compare(make_table({few}),
                                         make_table({sampled_row(k_small, 0.09, 9)}), {});
    REQUIRE(result.keys.front().verdict == tableio::Verdict::unknown);
    REQUIRE(result.count(tableio::Verdict::unknown) == 1);
    REQUIRE(result.regressions() == 0);
  }
}

TEST_CASE("kept samples round-trip through the JSON table", "[tableio]") {
  auto table = make_table({sampled_row(k_small, 0.09, 10), make_row(k_big, k_config_a, 5.0, 1)});
  auto back = tableio::table_from_json(tableio::table_to_json(table), "t.json");
  REQUIRE(back.ok());
  REQUIRE(back->rows.size() == 2);
  const auto& sampled = *back->find(table.rows.front().key());
  REQUIRE(sampled.samples_ms == table.rows.front().samples_ms);
  REQUIRE(back->find(table.rows.back().key())->samples_ms.empty());

  auto doc = tableio::table_to_json(table);
  doc["rows"][0]["samples_ms"] = nlohmann::ordered_json::array({0.1, "x"});
  const auto bad = tableio::table_from_json(doc, "t.json");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.error().message, Catch::Contains("samples_ms[1]"));
}

TEST_CASE("JUnit of a run without a baseline: one passing case per key", "[tableio]") {
  const std::string xml = tableio::render_junit(current(), "ktune.sweep.nightly");
  REQUIRE_THAT(xml, Catch::Contains("tests=\"3\" failures=\"0\""));
  REQUIRE_THAT(xml, Catch::Contains("tuned, no baseline"));
  REQUIRE(xml.find("<failure") == std::string::npos);
}

TEST_CASE("JUnit of several suites: one document whose counts add up", "[tableio]") {
  const std::vector<tableio::JunitCase> shards = {
      {.classname = "ktune.fleet.shards", .name = "shard 1", .text = "shard 1/2: done"},
      {.classname = "ktune.fleet.shards", .name = "shard 2", .failure = "shard 2 failed",
       .text = "Slurm CANCELLED; log <x>.log"}};
  const std::string xml = tableio::render_junit(
      {tableio::junit_suite("ktune.fleet.shards", shards), tableio::junit_suite(current(), "ktune.fleet.winners")});
  REQUIRE_THAT(xml, Catch::StartsWith("<?xml"));
  REQUIRE_THAT(xml, Catch::Contains("<testsuites name=\"ktune\" tests=\"5\" failures=\"1\""));
  REQUIRE_THAT(xml, Catch::Contains("<testsuite name=\"ktune.fleet.shards\" tests=\"2\" failures=\"1\""));
  REQUIRE_THAT(xml, Catch::Contains("<failure type=\"failure\" message=\"shard 2 failed\">"));
  REQUIRE_THAT(xml, Catch::Contains("log &lt;x&gt;.log"));
  REQUIRE_THAT(xml, Catch::Contains("<testsuite name=\"ktune.fleet.winners\" tests=\"3\""));
  // One suite alone renders exactly as render_junit of that report.
  REQUIRE(tableio::render_junit({tableio::junit_suite(current(), "s")}) == tableio::render_junit(current(), "s"));
}

namespace {

// A run of the history: `n` samples around `median_ms`, spread +-0.5%.
tableio::RunPoint run_at(std::int64_t job, double median_ms, std::size_t n = 20) {
  tableio::RunPoint run;
  run.job_id = job;
  run.finished_at_ms = 1000 * job;
  run.source_hash = "abc";
  run.config = k_config_a;
  run.median_ms = median_ms;
  for (std::size_t i = 0; i < n; ++i) {
    const double offset = (static_cast<double>(i) / static_cast<double>(n - 1) - 0.5) * 0.01;
    run.samples_ms.push_back(static_cast<float>(median_ms * (1 + offset)));
  }
  return run;
}

// Five earlier runs whose medians spread 20% between runs; each run's own samples are tight.
std::vector<tableio::RunPoint> spread_runs() {
  return {run_at(1, 1.00), run_at(2, 1.12), run_at(3, 0.95), run_at(4, 1.08), run_at(5, 1.15)};
}

} // namespace

TEST_CASE("history rule: the current run against the spread of several earlier runs",
          "[tableio][history]") {
  const auto row = make_row(k_small, k_config_a, 1.0, 1);
  const tableio::CompareOptions options{.min_effect = 0.05};
  SECTION("inside the spread between runs is the same, though a rank test on one run says otherwise") {
    const auto now = run_at(6, 1.10);
    // The single-run rule on the newest run alone (1.15) and on the first (1.00) would call this
    // a change: within-run samples are tight.
    const auto k = tableio::compare_with_history(row, now, spread_runs(), options);
    CHECK(k.method == tableio::Method::history);
    CHECK(k.verdict == tableio::Verdict::same);
    CHECK(k.baseline_runs == 5);
    REQUIRE(k.baseline_range);
    CHECK(k.baseline_range->low == Approx(0.95));
    CHECK(k.baseline_range->high == Approx(1.15));
    CHECK(*k.ratio == Approx(1.10 / 1.08));
    CHECK(k.baseline_samples == 100);
  }
  SECTION("above the slowest run and the minimum effect above their median is a regression") {
    const auto k = tableio::compare_with_history(row, run_at(6, 1.17), spread_runs(), options);
    CHECK(k.verdict == tableio::Verdict::regressed);
    REQUIRE(k.p_value);
    CHECK(*k.p_value < options.alpha);
    CHECK(tableio::render_markdown({options, {k}, {}}).find("REGRESSED") != std::string::npos);
  }
  SECTION("above every run but within the minimum effect of their median is not") {
    std::vector<tableio::RunPoint> steady{run_at(1, 1.0), run_at(2, 1.01), run_at(3, 0.99),
                                          run_at(4, 1.0), run_at(5, 1.02)};
    const auto k = tableio::compare_with_history(row, run_at(6, 1.04), steady, options);
    CHECK(k.verdict == tableio::Verdict::same);
    CHECK(*k.p_value < options.alpha); // the rank test alone would have called it
  }
  SECTION("a significant slowdown inside the spread between runs is not") {
    const auto k = tableio::compare_with_history(row, run_at(6, 1.14), spread_runs(), options);
    CHECK(*k.ratio > 1.05);
    CHECK(k.verdict == tableio::Verdict::same);
  }
  SECTION("the issue's 1.33x and 2x slowdowns of a steady key are regressions") {
    std::vector<tableio::RunPoint> steady{run_at(1, 1.0), run_at(2, 1.01), run_at(3, 0.99)};
    CHECK(tableio::compare_with_history(row, run_at(4, 1.33), steady, options).regressed());
    CHECK(tableio::compare_with_history(row, run_at(4, 2.0), steady, options).regressed());
  }
  SECTION("below the fastest run is an improvement") {
    const auto k = tableio::compare_with_history(row, run_at(6, 0.8), spread_runs(), options);
    CHECK(k.verdict == tableio::Verdict::improved);
  }
  SECTION("without samples on a side the step over every run decides alone") {
    auto now = run_at(6, 1.3);
    now.samples_ms.clear();
    const auto k = tableio::compare_with_history(row, now, spread_runs(), options);
    CHECK(k.verdict == tableio::Verdict::regressed);
    CHECK_FALSE(k.p_value);
  }
  SECTION("fewer than three earlier runs: unknown, said so") {
    std::vector<tableio::RunPoint> two{run_at(1, 1.0), run_at(2, 1.0)};
    const auto k = tableio::compare_with_history(row, run_at(3, 3.0), two, options);
    CHECK(k.verdict == tableio::Verdict::unknown);
    CHECK(k.method == tableio::Method::none);
    CHECK(tableio::render_junit(tableio::Comparison{options, {k}, {}}).find("2 earlier good run(s)") !=
          std::string::npos);
  }
}

TEST_CASE("last-good runs leave regressed runs out of later baselines", "[tableio][history]") {
  const tableio::CompareOptions options{.min_effect = 0.05};
  SECTION("a steady history: the last five") {
    std::vector<tableio::RunPoint> series;
    for (std::int64_t i = 0; i < 8; ++i) series.push_back(run_at(i + 1, 1.0 + 0.01 * static_cast<double>(i % 2)));
    CHECK(tableio::last_good_runs(series, options) == std::vector<std::size_t>{3, 4, 5, 6, 7});
  }
  SECTION("a regressed run is not good, and the next runs are judged without it") {
    std::vector<tableio::RunPoint> series{run_at(1, 1.0), run_at(2, 1.01), run_at(3, 0.99),
                                          run_at(4, 1.5), run_at(5, 1.0), run_at(6, 1.52)};
    const auto good = tableio::last_good_runs(series, options);
    CHECK(good == std::vector<std::size_t>{0, 1, 2, 4});
    // So a regression that stays keeps failing: run 6 against 1-3 and 5.
    std::vector<tableio::RunPoint> baseline;
    for (auto i : good) baseline.push_back(series[i]);
    CHECK(tableio::compare_with_history(make_row(k_small, k_config_a, 1.0, 1), series[5], baseline,
                                        options).regressed());
  }
  SECTION("the first runs are good: nothing to judge them by") {
    std::vector<tableio::RunPoint> series{run_at(1, 1.0), run_at(2, 5.0)};
    CHECK(tableio::last_good_runs(series, options) == std::vector<std::size_t>{0, 1});
  }
}

TEST_CASE("history selects the keys an A/B confirms, the A/B decides", "[tableio][history][ab]") {
  const tableio::CompareOptions options{.min_effect = 0.05};
  const auto row = make_row(k_small, k_config_a, 1.0, 1);
  auto other_row = make_row(k_big, k_config_a, 1.0, 1);
  const auto history = spread_runs();
  tableio::Comparison comparison{options,
                                 {tableio::compare_with_history(row, run_at(6, 1.4), history, options),
                                  tableio::compare_with_history(other_row, run_at(6, 1.08), history, options)},
                                 {}};
  REQUIRE(comparison.regressions() == 1);
  CHECK(tableio::needs_confirmation(comparison.keys[0], options));
  CHECK_FALSE(tableio::needs_confirmation(comparison.keys[1], options));
  SECTION("a changed source is confirmed even inside the noise") {
    auto changed = run_at(6, 1.08);
    changed.source_hash = "def";
    const auto k = tableio::compare_with_history(other_row, changed, history, options);
    CHECK(k.source_changed);
    CHECK(k.verdict == tableio::Verdict::same);
    CHECK(tableio::needs_confirmation(k, options));
  }
  SECTION("an A/B that finds the two builds the same clears it") {
    tableio::AbFigures ab;
    ab.verdict = tableio::Verdict::same;
    ab.measured = true;
    ab.ratio = 1.004;
    ab.ratio_ci = tableio::Interval{0.99, 1.02};
    ab.rounds = 10;
    ab.why = "A/B ratio 1.004 [0.990, 1.020] over 10 interleaved rounds: within the minimum effect";
    tableio::apply_ab(comparison.keys[0], ab);
    CHECK(comparison.regressions() == 0);
    CHECK(comparison.count(tableio::Verdict::same) == 2);
    CHECK_FALSE(comparison.keys[1].ab);  // not selected: judged by history alone
    // The history's figures stay for the report, beside the A/B's.
    CHECK(*comparison.keys[0].ratio == Approx(1.4 / 1.08));
    const std::string junit = tableio::render_junit(comparison);
    CHECK(junit.find("A/B same: A/B ratio 1.004") != std::string::npos);
    CHECK(junit.find("selected by: current") != std::string::npos);
    CHECK(tableio::render_markdown(comparison).find("1.004 [0.990, 1.020], 10 rounds") != std::string::npos);
  }
  SECTION("an A/B that finds it slower keeps it, with the A/B's figures in the failure") {
    tableio::AbFigures ab;
    ab.verdict = tableio::Verdict::regressed;
    ab.measured = true;
    ab.ratio = 1.31;
    ab.rounds = 12;
    ab.why = "slower";
    tableio::apply_ab(comparison.keys[0], ab);
    CHECK(comparison.regressions() == 1);
    CHECK(tableio::render_junit(comparison).find("regressed: ratio 1.310 (A/B, 12 rounds)") != std::string::npos);
  }
  SECTION("an A/B that could not run is ambiguous: skipped in JUnit, a failure with --strict") {
    tableio::AbFigures ab;
    ab.why = "baseline: the source of k at 0123 is kept nowhere: the old artifact is gone";
    tableio::apply_ab(comparison.keys[0], ab);
    CHECK(comparison.regressions() == 0);
    CHECK(comparison.count(tableio::Verdict::ambiguous) == 1);
    const std::string skipped = tableio::render_junit(comparison);
    CHECK(skipped.find("<skipped message=\"ambiguous: A/B not measured: baseline") != std::string::npos);
    CHECK(skipped.find("<failure") == std::string::npos);
    const std::string strict = tableio::render_junit(comparison, "s", tableio::AmbiguousIs::failure);
    CHECK(strict.find("type=\"ambiguous\"") != std::string::npos);
    CHECK(tableio::render_markdown(comparison).find("the old artifact is gone") != std::string::npos);
  }
}

TEST_CASE("the canary normalises ratios and, without A/Bs, distrusts a moved machine",
          "[tableio][canary]") {
  const tableio::CompareOptions options{.min_effect = 0.05};
  const auto history = spread_runs();
  const auto row = make_row(k_small, k_config_a, 1.0, 1);
  const auto reading = [&](double compute, double memory, std::int64_t at) {
    CanaryReading r;
    r.fingerprint = row.fingerprint;
    r.device = "cpu";
    r.taken_at = at;
    r.compute_ms = compute;
    r.memory_ms = memory;
    return r;
  };
  // The whole machine 30% slower tonight: the kernel's 1.4x is mostly the machine's.
  const auto move = tableio::compare_canary(row.fingerprint, "cpu",
                                            {reading(1.3, 2.6, 10), reading(1.3, 2.6, 20)},
                                            {reading(1.0, 2.0, 1), reading(1.0, 2.0, 2)});
  REQUIRE(move.factor);
  CHECK(*move.factor == Approx(1.3));
  CHECK(move.moved(0.05));
  CHECK_FALSE(move.drifted(0.05));
  CHECK(move.text(0.05).find("machine 30% slower than the baseline's") != std::string::npos);
  CHECK(move.text(0.05).find("verdicts from A/B only") != std::string::npos);
  tableio::Comparison comparison{options, {tableio::compare_with_history(row, run_at(6, 1.4), history, options)}, {move}};
  tableio::normalize(comparison);
  REQUIRE(comparison.keys[0].normalized_ratio);
  CHECK(*comparison.keys[0].normalized_ratio == Approx(1.4 / 1.08 / 1.3));
  REQUIRE(comparison.regressions() == 1);
  CHECK(tableio::distrust_moved_machines(comparison) == 1);
  CHECK(comparison.keys[0].verdict == tableio::Verdict::ambiguous);
  CHECK(comparison.keys[0].ab->why.find("machine 30% slower") != std::string::npos);
  SECTION("a machine that moved less than the key, or the other way, leaves its verdict") {
    // Tonight 8% faster than the baseline's, drifting x1.15 during the run; the key x1.48 of its
    // history (1.6 ms against 1.08).
    const auto faster = tableio::compare_canary(row.fingerprint, "cpu",
                                                {reading(0.92, 1.6, 10), reading(0.92, 2.1, 20)},
                                                {reading(1.0, 2.0, 1), reading(1.0, 2.0, 2)});
    REQUIRE(faster.drift);
    CHECK(faster.drifted(0.05));
    tableio::Comparison beyond{options, {tableio::compare_with_history(row, run_at(6, 1.6), history, options)}, {faster}};
    REQUIRE(beyond.regressions() == 1);
    CHECK(tableio::distrust_moved_machines(beyond) == 0);
    CHECK(beyond.keys[0].verdict == tableio::Verdict::regressed);
    // The same machine and the key x1.16 (1.25 ms): within what the drift could do.
    tableio::Comparison within{options, {tableio::compare_with_history(row, run_at(6, 1.25), history, options)}, {faster}};
    REQUIRE(within.regressions() == 1);
    CHECK(tableio::distrust_moved_machines(within) == 1);
    CHECK(within.keys[0].verdict == tableio::Verdict::ambiguous);
  }
  SECTION("a canary that moved during the run says so") {
    const auto drifting = tableio::compare_canary(row.fingerprint, "cpu",
                                                  {reading(1.0, 2.0, 10), reading(1.2, 2.4, 20)}, {});
    CHECK_FALSE(drifting.factor);
    CHECK(drifting.drifted(0.05));
    CHECK(drifting.text(0.05).find("the canary moved mid-measure") != std::string::npos);
  }
}

TEST_CASE("a changed winner: the A/B at the baseline's config tells the kernel from tonight's choice",
          "[tableio][history][ab]") {
  using tableio::Verdict;
  using tableio::WinnerCheck;
  const auto figures = [](Verdict verdict, double ratio) {
    tableio::AbFigures ab;
    ab.verdict = verdict;
    ab.measured = true;
    ab.ratio = ratio;
    ab.rounds = 10;
    ab.why = "A/B ratio " + std::to_string(ratio);
    return ab;
  };
  tableio::KeyComparison k;
  k.baseline = make_row(k_small, k_config_a, 1.0, 1);
  k.current = make_row(k_small, k_config_b, 1.13, 2);
  k.winner_changed = true;
  k.verdict = Verdict::regressed;
  SECTION("no A/B, or the winner is the baseline's: nothing more") {
    CHECK(tableio::winner_check(k) == WinnerCheck::none);
    tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
    k.winner_changed = false;
    CHECK(tableio::winner_check(k) == WinnerCheck::none);
  }
  SECTION("one source, the winners' A/B slower: the kernel is the same, the config chosen is slower") {
    tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
    REQUIRE(tableio::winner_check(k) == WinnerCheck::same_source);
    tableio::settle_same_source(k);
    CHECK(k.verdict == Verdict::same);
    REQUIRE(k.ab);
    CHECK(k.ab->winner_slower);
    CHECK(*k.ab->winners_ratio == Approx(1.13));
    CHECK(*k.ab->ratio == Approx(1.13));  // the winners' figures stay
    CHECK_THAT(k.ab->why, Catch::StartsWith("the source is unchanged") &&
                              Catch::Contains("A/B ratio 1.130 (regressed)") &&
                              Catch::Contains("the config tonight's tuning chose is slower, not the kernel"));
    CHECK(tableio::winner_check(k) == WinnerCheck::none);
  }
  SECTION("one source, the winners' A/B not slower: its verdict stands") {
    tableio::apply_ab(k, figures(Verdict::improved, 0.9));
    CHECK(tableio::winner_check(k) == WinnerCheck::none);
  }
  SECTION("a changed source: an A/B at the baseline's config") {
    k.current->source_hash = "another";
    SECTION("the winners slower, the source as fast at the baseline's config: same, the config is slower") {
      tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
      REQUIRE(tableio::winner_check(k) == WinnerCheck::at_baseline_config);
      CHECK(tableio::apply_config_ab(k, figures(Verdict::same, 1.002)));
      CHECK(k.verdict == Verdict::same);
      CHECK(k.ab->winner_slower);
      CHECK(*k.ab->ratio == Approx(1.002));
      CHECK(*k.ab->winners_ratio == Approx(1.13));
      CHECK_THAT(k.ab->why, Catch::StartsWith("at the baseline's config the current source: ") &&
                                Catch::Contains("not the source"));
    }
    SECTION("the winners slower and so is the source at the baseline's config: regressed stays") {
      tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
      CHECK_FALSE(tableio::apply_config_ab(k, figures(Verdict::regressed, 1.12)));
      CHECK(k.verdict == Verdict::regressed);
      CHECK(*k.ab->ratio == Approx(1.13));
      CHECK_FALSE(k.ab->winner_slower);
      CHECK_THAT(k.ab->why, Catch::EndsWith("; at the baseline's config the current source: regressed: A/B ratio 1.120000"));
    }
    SECTION("the winners slower, the baseline's config unclear: ambiguous, nothing claimed") {
      tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
      CHECK(tableio::apply_config_ab(k, figures(Verdict::ambiguous, 1.04)));
      CHECK(k.verdict == Verdict::ambiguous);
      CHECK_FALSE(k.ab->winner_slower);
      CHECK(*k.ab->winners_ratio == Approx(1.13));
    }
    SECTION("the winners the same, the source slower at the baseline's config: regressed (hidden)") {
      tableio::apply_ab(k, figures(Verdict::same, 1.01));
      REQUIRE(tableio::winner_check(k) == WinnerCheck::at_baseline_config);
      CHECK(tableio::apply_config_ab(k, figures(Verdict::regressed, 1.10)));
      CHECK(k.verdict == Verdict::regressed);
      CHECK_FALSE(k.ab->winner_slower);
      CHECK_THAT(k.ab->why, Catch::Contains("A/B ratio 1.010 (same)"));
    }
    SECTION("the winners the same, the baseline's config unclear: ambiguous") {
      tableio::apply_ab(k, figures(Verdict::same, 1.01));
      CHECK(tableio::apply_config_ab(k, figures(Verdict::ambiguous, 1.07)));
      CHECK(k.verdict == Verdict::ambiguous);
      CHECK_FALSE(k.ab->winner_slower);
      CHECK(*k.ab->ratio == Approx(1.07));
      CHECK(*k.ab->winners_ratio == Approx(1.01));
    }
    SECTION("the winners the same and so the baseline's config: same stays") {
      tableio::apply_ab(k, figures(Verdict::same, 1.01));
      CHECK_FALSE(tableio::apply_config_ab(k, figures(Verdict::same, 0.99)));
      CHECK(k.verdict == Verdict::same);
      CHECK(*k.ab->ratio == Approx(1.01));
    }
    SECTION("an A/B at the baseline's config that could not run decides nothing") {
      tableio::apply_ab(k, figures(Verdict::regressed, 1.13));
      tableio::AbFigures gone;
      gone.why = "the old artifact is gone";
      CHECK_FALSE(tableio::apply_config_ab(k, gone));
      CHECK(k.verdict == Verdict::regressed);
    }
  }
}
