// Fuzzes parse_kernel_spec (core/kernel_spec.hpp) on kernel.toml text. Properties: nothing
// throws or crashes; errors use code "spec_error" and name the file label; an accepted spec has
// a name, identifiers for dims and params, at least one value per param, a default config in
// params order, and every expression in it compiles against the shape dims and params.
#include "core/expr.hpp"
#include "core/kernel_spec.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view k_label = "kernels/fuzz/kernel.toml";

void check_compiles(const std::string& text, const std::vector<std::string>& variables) {
  if (text.empty()) return;
  auto expr = ktune::Expr::compile(text, variables);
  FUZZ_CHECK(expr.ok(), "an accepted spec's expressions compile");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = ktune::parse_kernel_spec(text, k_label);
  if (!spec) {
    FUZZ_CHECK(spec.error().code == ktune::ErrorCode::spec_error, "errors use code spec_error");
    FUZZ_CHECK(spec.error().message.rfind(k_label, 0) == 0, "errors start with the file label");
    return 0;
  }
  FUZZ_CHECK(!spec->name.empty(), "an accepted spec has a name");
  std::vector<std::string> variables = spec->shape_dims;
  for (const auto& param : spec->params) {
    FUZZ_CHECK(!param.values.empty(), "every param has a value");
    variables.push_back(param.name);
  }
  if (spec->default_config.size() == spec->params.size()) {
    for (std::size_t i = 0; i < spec->params.size(); ++i) {
      FUZZ_CHECK(spec->default_config[i].first == spec->params[i].name, "the default config is in params order");
    }
  }
  for (const auto& constraint : spec->constraints) check_compiles(constraint, variables);
  for (const auto& arg : spec->args) {
    check_compiles(arg.count, variables);
    check_compiles(arg.value, variables);
  }
  check_compiles(spec->flops, variables);
  check_compiles(spec->bytes, variables);
  if (spec->launch) {
    for (int i = 0; i < 3; ++i) {
      check_compiles(spec->launch->grid[i], variables);
      check_compiles(spec->launch->block[i], variables);
    }
    check_compiles(spec->launch->shared_bytes, variables);
  }
  return 0;
}
