#include "core/shape.hpp"

#include <catch2/catch.hpp>

using ktune::Shape;

TEST_CASE("core/shape: parse", "[core][shape]") {
  SECTION("canonical text round-trips") {
    auto shape = Shape::parse("M=256,N=128,K=64");
    REQUIRE(shape.ok());
    REQUIRE(shape->dims.size() == 3);
    CHECK(shape->dims[0] == std::pair<std::string, std::int64_t>{"M", 256});
    CHECK(shape->to_string() == "M=256,N=128,K=64");
    CHECK(shape->get("N") == 128);
    CHECK_FALSE(shape->get("X").has_value());
  }
  SECTION("spaces around items") {
    auto shape = Shape::parse("  M = 1 , n_2=1099511627776 ");
    REQUIRE(shape.ok());
    CHECK(shape->to_string() == "M=1,n_2=1099511627776");
  }
  SECTION("errors name the offending item") {
    struct Case { const char* text; const char* expect; };
    for (auto c : {Case{"", "empty"}, Case{"   ", "empty"}, Case{"M=1,,N=2", "empty item"},
                   Case{"M=1,N", "'N'"}, Case{"1M=3", "'1M=3'"}, Case{"M-x=3", "bad name"},
                   Case{"M=abc", "'abc'"}, Case{"M=1.5", "not an integer"}, Case{"M=0", "positive"},
                   Case{"M=-4", "positive"}, Case{"M=1,M=2", "duplicate"},
                   Case{"M=1099511627777", "2^40"}, Case{"M=99999999999999999999999", "2^40"},
                   Case{"M=", "not an integer"}, Case{"=5", "bad name"}, Case{"M=1,", "empty item"}}) {
      auto shape = Shape::parse(c.text);
      INFO(c.text);
      REQUIRE_FALSE(shape.ok());
      CHECK(shape.error().code == ktune::ErrorCode::bad_shape);
      CHECK_THAT(shape.error().message, Catch::Contains(c.expect));
    }
  }
}

TEST_CASE("core/shape: conform to a kernel's dims", "[core][shape]") {
  auto shape = Shape::parse("K=3,M=1,N=2");
  REQUIRE(shape.ok());
  SECTION("reorders") {
    auto conformed = ktune::conform_shape(*shape, {"M", "N", "K"}, "gemm");
    REQUIRE(conformed.ok());
    CHECK(conformed->to_string() == "M=1,N=2,K=3");
  }
  SECTION("missing dimension") {
    auto conformed = ktune::conform_shape(*shape, {"M", "N", "K", "B"}, "gemm");
    REQUIRE_FALSE(conformed.ok());
    CHECK(conformed.error().code == ktune::ErrorCode::bad_shape);
    CHECK_THAT(conformed.error().message, Catch::Contains("missing dimension 'B'") && Catch::Contains("gemm"));
  }
  SECTION("undeclared dimension") {
    auto conformed = ktune::conform_shape(*shape, {"M", "N"}, "gemm");
    REQUIRE_FALSE(conformed.ok());
    CHECK_THAT(conformed.error().message, Catch::Contains("no dimension 'K'"));
  }
}

TEST_CASE("core/shape: a huge shape is refused after a bounded amount of work, quoted briefly",
          "[core][shape]") {
  // 143k dimensions (857 KB) once took 33 s of quadratic duplicate checks.
  std::string text;
  for (int i = 0; i < 143000; ++i) text += (i ? ",D" : "D") + std::to_string(i) + "=1";
  auto shape = ktune::Shape::parse(text);
  REQUIRE_FALSE(shape.ok());
  CHECK(shape.error().code == ktune::ErrorCode::bad_shape);
  CHECK_THAT(shape.error().message, Catch::Contains("more than 64 dimensions"));
  CHECK(shape.error().message.size() < 400);

  auto long_value = ktune::Shape::parse("N=" + std::string(100000, '7') + "x");
  REQUIRE_FALSE(long_value.ok());
  CHECK(long_value.error().message.size() < 600);

  std::string sixty_four;
  for (int i = 0; i < 64; ++i) sixty_four += (i ? ",D" : "D") + std::to_string(i) + "=2";
  CHECK(ktune::Shape::parse(sixty_four).ok());
}
