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

  const auto result = tableio::compare(now, *baseline, 0.05);
  REQUIRE(result.keys.size() == 3);
  REQUIRE(result.regressions() == 1);
  const auto& big = key_of(result, k_big);
  REQUIRE(big.presence == Presence::both);
  REQUIRE(big.regressed);
  REQUIRE(*big.ratio == Approx(1.25));
  REQUIRE(big.noise_checked);
  REQUIRE_FALSE(big.intervals_overlap);
  REQUIRE_FALSE(big.winner_changed);
  const auto& huge = key_of(result, k_huge);
  REQUIRE_FALSE(huge.regressed);
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
  // 10% slower, but stddev 20% over 10 samples: the intervals overlap.
  for (auto* table : {&base, &now}) {
    for (auto& row : table->rows) row.stats.stddev_ms = row.median_ms * 0.2;
  }
  row_of(now, k_small).median_ms *= 1.1;
  const auto result = tableio::compare(now, base, 0.05);
  const auto& k = key_of(result, k_small);
  REQUIRE(*k.ratio == Approx(1.1));
  REQUIRE(k.noise_checked);
  REQUIRE(k.intervals_overlap);
  REQUIRE_FALSE(k.regressed);

  SECTION("without statistics the ratio alone decides") {
    row_of(now, k_small).stats = {};
    const auto alone = tableio::compare(now, base, 0.05);
    REQUIRE_FALSE(key_of(alone, k_small).noise_checked);
    REQUIRE(key_of(alone, k_small).regressed);
    REQUIRE(alone.regressions() == 1);
  }
  SECTION("under the limit nothing regresses, even outside the noise") {
    for (auto* table : {&base, &now}) {
      for (auto& row : table->rows) row.stats.stddev_ms = 0;
    }
    REQUIRE(tableio::compare(now, base, 0.15).regressions() == 0);
    REQUIRE(tableio::compare(now, base, 0.05).regressions() == 1);
  }
}

TEST_CASE("compare reports changed winners, improvements and keys missing now", "[tableio]") {
  auto base = current();
  auto now = current();
  row_of(now, k_big).config = nlohmann::ordered_json::parse(k_config_b);
  row_of(now, k_big).median_ms *= 0.5;
  now.rows.erase(now.rows.begin());  // M=1024 sorts first
  const auto result = tableio::compare(now, base, 0.05);
  const auto& changed = key_of(result, k_big);
  REQUIRE(changed.winner_changed);
  REQUIRE(changed.improved);
  REQUIRE_FALSE(changed.regressed);
  REQUIRE(key_of(result, k_huge).presence == Presence::baseline_only);
  REQUIRE_FALSE(key_of(result, k_huge).ratio);
  REQUIRE_THAT(tableio::render_markdown(result), Catch::Contains("changed: "));
  REQUIRE_THAT(tableio::render_markdown(result), Catch::Contains("| missing |"));
}

TEST_CASE("confidence intervals use Student's t", "[tableio]") {
  REQUIRE(tableio::t_quantile_975(1) == Approx(12.706));
  REQUIRE(tableio::t_quantile_975(9) == Approx(2.262));
  REQUIRE(tableio::t_quantile_975(10'000) == Approx(1.98));
  auto row = make_row(k_small, k_config_a, 10.0, 1);
  row.stats.n = 10;
  row.stats.stddev_ms = 1.0;
  const auto ci = tableio::confidence_interval(row);
  REQUIRE(ci);
  REQUIRE(ci->low == Approx(10.0 - 2.262 / std::sqrt(10.0)));
  REQUIRE(ci->high == Approx(10.0 + 2.262 / std::sqrt(10.0)));
  row.stats.n = 1;
  REQUIRE_FALSE(tableio::confidence_interval(row));
}
