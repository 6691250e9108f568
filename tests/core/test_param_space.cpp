#include "core/param_space.hpp"

#include <catch2/catch.hpp>

using ktune::Config;
using ktune::ParamSpace;

namespace {

ktune::KernelSpec make_spec(std::vector<std::string> constraints) {
  ktune::KernelSpec spec;
  spec.name = "gemm";
  spec.shape_dims = {"M", "K"};
  spec.params = {{"BM", {16, 32, 64}}, {"BK", {4, 8}}};
  spec.constraints = std::move(constraints);
  return spec;
}

ktune::Shape shape_of(const char* text) {
  auto shape = ktune::Shape::parse(text);
  REQUIRE(shape.ok());
  return *shape;
}

} // namespace

TEST_CASE("core/param_space: indexing and enumeration", "[core][param_space]") {
  SECTION("last param varies fastest") {
    auto space = ParamSpace::create(make_spec({}), shape_of("M=64,K=16"));
    REQUIRE(space.ok());
    CHECK(space->cartesian_size() == 6);
    CHECK(space->config_at(0) == Config{{"BM", 16}, {"BK", 4}});
    CHECK(space->config_at(1) == Config{{"BM", 16}, {"BK", 8}});
    CHECK(space->config_at(2) == Config{{"BM", 32}, {"BK", 4}});
    CHECK(space->config_at(5) == Config{{"BM", 64}, {"BK", 8}});
    auto all = space->enumerate();
    REQUIRE(all.ok());
    CHECK(all->size() == 6);
  }
  SECTION("constraints filter with shape dims bound") {
    auto space = ParamSpace::create(make_spec({"M % BM == 0", "BM * BK < 256"}), shape_of("M=32,K=16"));
    REQUIRE(space.ok());
    auto all = space->enumerate();
    REQUIRE(all.ok());
    REQUIRE(all->size() == 3);
    CHECK((*all)[0] == Config{{"BM", 16}, {"BK", 4}});
    CHECK((*all)[1] == Config{{"BM", 16}, {"BK", 8}});
    CHECK((*all)[2] == Config{{"BM", 32}, {"BK", 4}});
    CHECK(*space->admits({{"BM", 32}, {"BK", 4}}));
    CHECK_FALSE(*space->admits({{"BM", 32}, {"BK", 8}}));
  }
  SECTION("admits rejects unknown values and missing params") {
    auto space = ParamSpace::create(make_spec({}), shape_of("M=32,K=16"));
    REQUIRE(space.ok());
    CHECK_FALSE(*space->admits({{"BM", 24}, {"BK", 4}}));
    CHECK_FALSE(*space->admits({{"BM", 16}}));
    CHECK_FALSE(*space->admits({{"BM", 16}, {"BX", 4}}));
    CHECK(*space->admits({{"BK", 4}, {"BM", 16}}));
  }
  SECTION("a constraint that cannot be evaluated") {
    auto space = ParamSpace::create(make_spec({"M % (BK - 4) == 0"}), shape_of("M=32,K=16"));
    REQUIRE(space.ok());
    auto error = space->admits({{"BM", 16}, {"BK", 4}});
    REQUIRE_FALSE(error.ok());
    // An arithmetic error is the spec's: named with the constraint, the config and the shape,
    // never an empty space.
    CHECK(error.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(error.error().message, Catch::Contains("constraints[0]") &&
                                          Catch::Contains("M % (BK - 4) == 0") &&
                                          Catch::Contains("by zero") &&
                                          Catch::Contains("BM=16,BK=4") && Catch::Contains("M=32"));
    auto all = space->enumerate();
    REQUIRE_FALSE(all.ok());
    CHECK(all.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(all.error().message, Catch::Contains("remainder by zero"));
  }
  SECTION("space too large") {
    auto space = ParamSpace::create(make_spec({}), shape_of("M=32,K=16"));
    REQUIRE(space.ok());
    auto all = space->enumerate(5);
    REQUIRE_FALSE(all.ok());
    CHECK(all.error().code == ktune::ErrorCode::space_too_large);
    CHECK_THAT(all.error().message, Catch::Contains("6"));
  }
  SECTION("no params: one empty config") {
    auto spec = make_spec({"M > 1"});
    spec.params.clear();
    auto space = ParamSpace::create(spec, shape_of("M=32,K=16"));
    REQUIRE(space.ok());
    CHECK(space->cartesian_size() == 1);
    auto all = space->enumerate();
    REQUIRE(all.ok());
    REQUIRE(all->size() == 1);
    CHECK(all->front().empty());
  }
  SECTION("a bad constraint is a spec error") {
    auto space = ParamSpace::create(make_spec({"BM <"}), shape_of("M=32,K=16"));
    REQUIRE_FALSE(space.ok());
    CHECK(space.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(space.error().message, Catch::Contains("constraints[0]") && Catch::Contains("BM <"));
  }
}

TEST_CASE("core/param_space: helpers", "[core][param_space]") {
  CHECK(ktune::config_to_string({{"BM", 64}, {"BN", 64}, {"BK", 16}}) == "BM=64,BN=64,BK=16");
  CHECK(ktune::config_to_string({}).empty());
  const auto bound = ktune::bind(shape_of("M=1,K=2"), {{"BM", 3}});
  CHECK(bound == ktune::NamedValues{{"M", 1}, {"K", 2}, {"BM", 3}});
}
