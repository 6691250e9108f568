#include "core/signature.hpp"

#include <catch2/catch.hpp>

#include <string>

using ktune::find_signature;
using ktune::parse_signature;

TEST_CASE("core/signature: a typed declaration", "[core][signature]") {
  auto sig = parse_signature(
      "void gemm_blocked(const float* A, const float* B, float* C, int M, int N, int K)");
  INFO((sig ? std::string() : sig.error().message));
  REQUIRE(sig.ok());
  CHECK(sig->name == "gemm_blocked");
  REQUIRE(sig->params.size() == 6);
  CHECK(sig->params[0].name == "A");
  CHECK(sig->params[0].pointer);
  CHECK(sig->params[0].const_data);
  CHECK(sig->params[0].dtype == "f32");
  CHECK(sig->params[2].written() == "float* C");
  CHECK_FALSE(sig->params[2].const_data);
  CHECK(sig->params[3].dtype == "i32");
  CHECK_FALSE(sig->params[3].pointer);
  CHECK(sig->line == 0);
}

TEST_CASE("core/signature: scalar types map to dtypes", "[core][signature]") {
  CHECK(ktune::dtype_of_c_type("int") == "i32");
  CHECK(ktune::dtype_of_c_type("long") == "i64");
  CHECK(ktune::dtype_of_c_type("int64_t") == "i64");
  CHECK(ktune::dtype_of_c_type("std::int64_t") == "i64");
  CHECK(ktune::dtype_of_c_type("std::size_t") == "i64");
  CHECK(ktune::dtype_of_c_type("float") == "f32");
  CHECK(ktune::dtype_of_c_type("double") == "f64");
  CHECK(ktune::dtype_of_c_type("__half") == "f16");
  CHECK(ktune::dtype_of_c_type("KTUNE_DTYPE") == "");
  CHECK_FALSE(ktune::dtype_of_c_type("short").has_value());

  auto sig = parse_signature("extern \"C\" __global__ void __launch_bounds__(256) k("
                             "KTUNE_DTYPE* __restrict__ x, unsigned long long n, double alpha)");
  INFO((sig ? std::string() : sig.error().message));
  REQUIRE(sig.ok());
  CHECK(sig->params[0].dtype.empty());
  CHECK(sig->params[1].c_type == "unsigned long long");
  CHECK(sig->params[1].dtype == "i64");
  CHECK(sig->params[2].dtype == "f64");
  CHECK(parse_signature("void none(void)")->params.empty());
  CHECK(parse_signature("void arr(float a[], int)")->params[0].pointer);
}

TEST_CASE("core/signature: what is refused", "[core][signature]") {
  auto message = [](const std::string& text) {
    auto sig = parse_signature(text);
    REQUIRE_FALSE(sig.ok());
    CHECK(sig.error().code == ktune::ErrorCode::spec_error);
    return sig.error().message;
  };
  CHECK_THAT(message("int f(float* x)"), Catch::Contains("returning void"));
  CHECK_THAT(message("void f(float** x)"), Catch::Contains("2 levels of pointer"));
  CHECK_THAT(message("void f(short s)"), Catch::Contains("'short' has no ktune dtype"));
  CHECK_THAT(message("void f(float& x)"), Catch::Contains("references"));
  CHECK_THAT(message("void f(float* x"), Catch::Contains("does not close"));
  CHECK_THAT(message("gemm"), Catch::Contains("expected a declaration"));
}

TEST_CASE("core/signature: found in a source", "[core][signature]") {
  const std::string source =
      "#include <cstddef>\n"
      "#define BM 4\n"
      "// void scale(int wrong) in a comment does not count\n"
      "static void helper(float* x) { scale_calls(x); }\n"
      "extern \"C\"\n"
      "void scale(float* x,\n"
      "           std::size_t n) {\n"
      "  for (std::size_t i = 0; i < n; ++i) x[i] *= 2;\n"
      "}\n"
      "void caller(float* x) { scale(x, 4); }\n";
  auto sig = find_signature(source, "scale");
  INFO((sig ? std::string() : sig.error().message));
  REQUIRE(sig.ok());
  CHECK(sig->line == 6);
  REQUIRE(sig->params.size() == 2);
  CHECK(sig->params[1].name == "n");
  CHECK(sig->params[1].dtype == "i64");

  auto missing = find_signature(source, "gemm");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("no declaration 'void gemm(...)'"));
}
