// Fuzzes Expr (core/expr.hpp): compile the input's first line for the variables M, N, K, BM, BN,
// BK, then evaluate it with values taken from the rest of the input (one binding left out when
// the data says so). Properties: nothing throws or crashes; errors use code "bad_expression";
// eval_int agrees with eval whenever it succeeds.
#include "core/expr.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::string> k_variables = {"M", "N", "K", "BM", "BN", "BK"};
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string text = input.substr(0, newline);
  const std::string rest = newline == std::string::npos ? std::string() : input.substr(newline + 1);

  auto expr = ktune::Expr::compile(text, k_variables);
  if (!expr) {
    FUZZ_CHECK(expr.error().code == ktune::ErrorCode::bad_expression, "compile errors use code bad_expression");
    return 0;
  }
  FUZZ_CHECK(expr->text() == text, "text() is the compiled text");

  FuzzedDataProvider values(reinterpret_cast<const std::uint8_t*>(rest.data()), rest.size());
  for (int round = 0; round < 4; ++round) {
    ktune::NamedValues bindings;
    const std::size_t skipped = values.ConsumeIntegralInRange<std::size_t>(0, k_variables.size() + 2);
    for (std::size_t i = 0; i < k_variables.size(); ++i) {
      if (i == skipped) continue; // an unbound variable
      std::int64_t value = 0;
      switch (values.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: value = values.ConsumeIntegralInRange<std::int64_t>(-4, 4); break;
      case 1: value = values.ConsumeIntegralInRange<std::int64_t>(1, 4096); break;
      case 2: value = std::int64_t{1} << values.ConsumeIntegralInRange<int>(0, 62); break;
      default: value = values.ConsumeIntegral<std::int64_t>(); break;
      }
      bindings.emplace_back(k_variables[i], value);
    }
    if (values.ConsumeBool()) bindings.emplace_back("unused", 7); // extra bindings are ignored

    auto real = expr->eval(bindings);
    auto integer = expr->eval_int(bindings);
    if (real) FUZZ_CHECK(std::isfinite(*real), "eval gives a finite value");
    else FUZZ_CHECK(real.error().code == ktune::ErrorCode::bad_expression, "eval errors use code bad_expression");
    if (integer) {
      FUZZ_CHECK(real.ok(), "eval_int succeeds only where eval does");
      FUZZ_CHECK(static_cast<double>(*integer) == *real, "eval_int agrees with eval");
    } else {
      FUZZ_CHECK(integer.error().code == ktune::ErrorCode::bad_expression, "eval_int errors use code bad_expression");
    }
    if (values.remaining_bytes() == 0) break;
  }
  return 0;
}
