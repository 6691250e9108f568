#include "tableio/merge.hpp"

#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

using namespace ktune;
using namespace ktune::test;
using tableio::Policy;

namespace {

constexpr const char* k_small = "M=256,N=256,K=256";
constexpr const char* k_big = "M=512,N=512,K=512";
constexpr const char* k_huge = "M=1024,N=1024,K=1024";

// base: small (A, 2.0 ms, t=100), big (A, 5.0 ms, t=100)
// incoming: small (B, 1.0 ms, t=50: faster, older), big (B, 6.0 ms, t=200: slower, newer),
//           huge (A, only incoming)
tableio::Table base() {
  return make_table({make_row(k_small, k_config_a, 2.0, 100), make_row(k_big, k_config_a, 5.0, 100)});
}
tableio::Table incoming() {
  return make_table({make_row(k_small, k_config_b, 1.0, 50), make_row(k_big, k_config_b, 6.0, 200),
                     make_row(k_huge, k_config_a, 7.0, 10)});
}

std::string winner_config(const tableio::MergeResult& merged, const char* shape) {
  for (const auto& row : merged.table.rows) {
    if (row.shape == shape) return row.config_text();
  }
  FAIL("no row for " << shape);
  return {};
}

} // namespace

TEST_CASE("merge by policy keeps one row per key and lists the conflicts", "[tableio]") {
  SECTION("faster") {
    const auto merged = tableio::merge(base(), incoming(), Policy::faster);
    REQUIRE(merged.table.rows.size() == 3);
    REQUIRE(winner_config(merged, k_small) == k_config_b);
    REQUIRE(winner_config(merged, k_big) == k_config_a);
    REQUIRE(winner_config(merged, k_huge) == k_config_a);
    REQUIRE(merged.added == 1);
    REQUIRE(merged.replaced == 1);
    REQUIRE(merged.kept == 1);
    REQUIRE(merged.conflicts.size() == 2);
    const auto& big = merged.conflicts[1].key.shape == k_big ? merged.conflicts[1] : merged.conflicts[0];
    REQUIRE(big.kept.config_text() == k_config_a);
    REQUIRE(big.dropped.config_text() == k_config_b);
    REQUIRE_THAT(big.why, Catch::StartsWith("faster: existing 5 ms <= incoming 6 ms"));
  }
  SECTION("newer") {
    const auto merged = tableio::merge(base(), incoming(), Policy::newer);
    REQUIRE(winner_config(merged, k_small) == k_config_a);
    REQUIRE(winner_config(merged, k_big) == k_config_b);
    REQUIRE(merged.conflicts.size() == 2);
    for (const auto& c : merged.conflicts) REQUIRE_THAT(c.why, Catch::StartsWith("newer: "));
  }
  SECTION("keep") {
    const auto merged = tableio::merge(base(), incoming(), Policy::keep);
    REQUIRE(winner_config(merged, k_small) == k_config_a);
    REQUIRE(winner_config(merged, k_big) == k_config_a);
    REQUIRE(winner_config(merged, k_huge) == k_config_a);  // new keys still come in
    REQUIRE(merged.kept == 2);
    REQUIRE(merged.conflicts.size() == 2);
    REQUIRE(merged.conflicts[0].dropped.config_text() == k_config_b);
  }
  SECTION("the same config in both is no conflict; its better measurement is taken") {
    auto other = make_table({make_row(k_small, k_config_a, 1.5, 300)});
    const auto merged = tableio::merge(base(), other, Policy::faster);
    REQUIRE(merged.conflicts.empty());
    REQUIRE(merged.replaced == 1);
    REQUIRE(merged.table.rows.size() == 2);
    REQUIRE(merged.table.find(other.rows[0].key())->median_ms == 1.5);
  }
  SECTION("a tie keeps the base") {
    auto other = make_table({make_row(k_small, k_config_b, 2.0, 100)});
    for (Policy p : {Policy::faster, Policy::newer}) {
      const auto merged = tableio::merge(base(), other, p);
      REQUIRE(winner_config(merged, k_small) == k_config_a);
      REQUIRE(merged.conflicts.size() == 1);
    }
  }
  SECTION("a different device is a different key") {
    auto other = make_table({make_row(k_small, k_config_b, 0.1, 999, "another-fp")});
    const auto merged = tableio::merge(base(), other, Policy::faster);
    REQUIRE(merged.table.rows.size() == 3);
    REQUIRE(merged.conflicts.empty());
  }
}

TEST_CASE("policies parse by name", "[tableio]") {
  REQUIRE(tableio::parse_policy("faster") == Policy::faster);
  REQUIRE(tableio::parse_policy("newer") == Policy::newer);
  REQUIRE(tableio::parse_policy("keep") == Policy::keep);
  REQUIRE_FALSE(tableio::parse_policy("fastest"));
}
