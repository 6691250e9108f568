#include "core/expr.hpp"

#include <catch2/catch.hpp>

using ktune::Expr;
using ktune::NamedValues;

namespace {

std::int64_t eval_int(const std::string& text, const NamedValues& bindings = {}) {
  std::vector<std::string> names;
  for (const auto& [name, value] : bindings) names.push_back(name);
  auto expr = Expr::compile(text, names);
  REQUIRE(expr.ok());
  auto value = expr->eval_int(bindings);
  INFO(text << " -> " << (value ? std::string("ok") : value.error().message));
  REQUIRE(value.ok());
  return *value;
}

ktune::Error eval_error(const std::string& text, const NamedValues& bindings = {}) {
  std::vector<std::string> names;
  for (const auto& [name, value] : bindings) names.push_back(name);
  auto expr = Expr::compile(text, names);
  REQUIRE(expr.ok());
  auto value = expr->eval_int(bindings);
  REQUIRE_FALSE(value.ok());
  return value.error();
}

} // namespace

TEST_CASE("core/expr: arithmetic and precedence", "[core][expr]") {
  SECTION("C precedence") {
    CHECK(eval_int("1 + 2 * 3 == 7") == 1);
    CHECK(eval_int("1 + 2 * 3") == 7);
    CHECK(eval_int("(1 + 2) * 3") == 9);
    CHECK(eval_int("2 - 3 - 4") == -5);
    CHECK(eval_int("8 / 2 / 2") == 2);
    CHECK(eval_int("2 * 3 % 4") == 2);
    CHECK(eval_int("1 < 2 == 1") == 1);
    CHECK(eval_int("3 > 2 + 5") == 0);
  }
  SECTION("integer division truncates toward zero") {
    CHECK(eval_int("7/2 == 3") == 1);
    CHECK(eval_int("7 / 2") == 3);
    CHECK(eval_int("-7/2 == -3") == 1);
    CHECK(eval_int("-7 / 2") == -3);
    CHECK(eval_int("7 / -2") == -3);
    CHECK(eval_int("BM * BN / 256 <= 64", {{"BM", 128}, {"BN", 128}}) == 1);
    CHECK(eval_int("BM * BN / 256 <= 64", {{"BM", 128}, {"BN", 256}}) == 0);
    CHECK(eval_int("BM * BN / 256", {{"BM", 100}, {"BN", 3}}) == 1);
  }
  SECTION("real division when an operand is not integral") {
    auto expr = Expr::compile("x / 2.5", {"x"});
    REQUIRE(expr.ok());
    auto value = expr->eval({{"x", 5}});
    REQUIRE(value.ok());
    CHECK(*value == Approx(2.0));
    auto half = Expr::compile("1.5 / 3", {});
    REQUIRE(half.ok());
    CHECK(*half->eval({}) == Approx(0.5));
  }
  SECTION("remainder has C semantics") {
    CHECK(eval_int("K % BK == 0", {{"K", 64}, {"BK", 16}}) == 1);
    CHECK(eval_int("K % BK == 0", {{"K", 65}, {"BK", 16}}) == 0);
    CHECK(eval_int("7 % 3") == 1);
    CHECK(eval_int("-7 % 3") == -1);
    CHECK(eval_int("7 % -3") == 1);
  }
  SECTION("functions") {
    CHECK(eval_int("ceil_div(10, 4)") == 3);
    CHECK(eval_int("ceil_div(12, 4)") == 3);
    CHECK(eval_int("ceil_div(1, 4)") == 1);
    CHECK(eval_int("ceil_div(N, BN)", {{"N", 1000}, {"BN", 64}}) == 16);
    CHECK(eval_int("min(3, 2)") == 2);
    CHECK(eval_int("max(3, 2)") == 3);
    CHECK(eval_int("min(M, 64) + max(M, 64)", {{"M", 10}}) == 74);
  }
  SECTION("comparisons and logic") {
    CHECK(eval_int("a && b || c", {{"a", 1}, {"b", 0}, {"c", 1}}) == 1);
    CHECK(eval_int("a && b || c", {{"a", 1}, {"b", 0}, {"c", 0}}) == 0);
    CHECK(eval_int("a || b && c", {{"a", 1}, {"b", 0}, {"c", 0}}) == 1);
    CHECK(eval_int("1 <= 1") == 1);
    CHECK(eval_int("2 >= 3") == 0);
    CHECK(eval_int("1 != 2") == 1);
    CHECK(eval_int("5 > 4 && 4 < 5") == 1);
    CHECK(eval_int("!0") == 1);
  }
  SECTION("large integers stay exact") {
    CHECK(eval_int("M * N", {{"M", std::int64_t{1} << 20}, {"N", std::int64_t{1} << 20}}) ==
          (std::int64_t{1} << 40));
    CHECK(eval_int("M / 3", {{"M", (std::int64_t{1} << 40) + 1}}) == ((std::int64_t{1} << 40) + 1) / 3);
  }
}

TEST_CASE("core/expr: errors", "[core][expr]") {
  SECTION("unknown variable names the variable") {
    auto expr = Expr::compile("M * X + 1", {"M", "N"});
    REQUIRE_FALSE(expr.ok());
    CHECK(expr.error().code == ktune::ErrorCode::bad_expression);
    CHECK_THAT(expr.error().message, Catch::Contains("'X'") && Catch::Contains("M * X + 1"));
  }
  SECTION("syntax errors are found at compile time") {
    for (const char* text : {"K % BK ==", "(1 + 2", "1 +", "2 ^ 3", "", "   ", "1 = 2"}) {
      auto expr = Expr::compile(text, {"K", "BK"});
      INFO(text);
      REQUIRE_FALSE(expr.ok());
      CHECK(expr.error().code == ktune::ErrorCode::bad_expression);
      CHECK_THAT(expr.error().message, Catch::Contains(std::string("'") + text + "'"));
    }
  }
  SECTION("division and remainder by zero") {
    CHECK_THAT(eval_error("1 / x", {{"x", 0}}).message, Catch::Contains("division by zero"));
    CHECK_THAT(eval_error("1 % x", {{"x", 0}}).message, Catch::Contains("remainder by zero"));
    CHECK_THAT(eval_error("ceil_div(1, x)", {{"x", 0}}).message, Catch::Contains("by zero"));
    CHECK(eval_error("1 / x", {{"x", 0}}).code == ktune::ErrorCode::bad_expression);
  }
  SECTION("eval_int rejects non-integral results") {
    CHECK_THAT(eval_error("x / 2.5", {{"x", 4}}).message, Catch::Contains("integer"));
  }
  SECTION("an unbound variable that the expression reads") {
    auto expr = Expr::compile("M + 1", {"M", "N"});
    REQUIRE(expr.ok());
    auto missing = expr->eval({{"N", 1}});
    REQUIRE_FALSE(missing.ok());
    CHECK_THAT(missing.error().message, Catch::Contains("'M'"));
    auto unused_unbound = expr->eval({{"M", 1}});
    REQUIRE(unused_unbound.ok());
    CHECK(*unused_unbound == 2);
  }
}

TEST_CASE("core/expr: reuse and move", "[core][expr]") {
  auto compiled = Expr::compile("M * 2 + N", {"M", "N"});
  REQUIRE(compiled.ok());
  Expr expr = std::move(compiled).value();
  CHECK(expr.text() == "M * 2 + N");
  CHECK(*expr.eval_int({{"M", 1}, {"N", 1}}) == 3);
  CHECK(*expr.eval_int({{"N", 10}, {"M", 5}, {"extra", 99}}) == 20);
  Expr moved = std::move(expr);
  CHECK(*moved.eval_int({{"M", 2}, {"N", 0}}) == 4);
  std::vector<Expr> many;
  for (int i = 0; i < 8; ++i) many.push_back(std::move(Expr::compile("M + " + std::to_string(i), {"M"})).value());
  for (int i = 0; i < 8; ++i) CHECK(*many[static_cast<std::size_t>(i)].eval_int({{"M", 1}}) == 1 + i);
}

TEST_CASE("core/expr: only ktune's functions", "[core][expr]") {
  CHECK(eval_int("1 ? 2 : 3") == 2);
  for (const char* text : {"sin(1)", "_pi", "min(1, 2, 3)", "ceil_div(1)", "sum(1, 2)"}) {
    INFO(text);
    auto expr = Expr::compile(text, {});
    REQUIRE_FALSE(expr.ok());
    CHECK(expr.error().code == ktune::ErrorCode::bad_expression);
  }
  SECTION("names of removed functions may be variables") {
    CHECK(eval_int("sin + 1", {{"sin", 2}}) == 3);
  }
}
