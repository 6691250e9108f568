#pragma once
// ParamSpace: the configs of a kernel family admitted at one shape.
//
// A config is one value per param, in the spec's params order. The cartesian product is indexed
// 0..cartesian_size()-1 (last param varies fastest); a config is admitted when every constraint
// evaluates non-zero with the shape dims and the config's values bound.
#include "core/kernel_spec.hpp"
#include "core/expr.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace ktune {

using Config = NamedValues;

// "BM=64,BN=64,BK=16"
[[nodiscard]] std::string config_to_string(const Config& config);

// Shape dims and config values in one binding list (shape first).
[[nodiscard]] NamedValues bind(const Shape& shape, const Config& config);

class ParamSpace {
public:
  // `shape` must already be conformed to the spec's dims. Errors: "spec_error" for constraints
  // that fail to compile.
  [[nodiscard]] static Result<ParamSpace> create(const KernelSpec& spec, const Shape& shape);

  [[nodiscard]] std::uint64_t cartesian_size() const { return m_cartesian; }
  [[nodiscard]] Config config_at(std::uint64_t index) const;

  // Whether `config` names every param with one of its declared values and passes the
  // constraints. Errors: "spec_error" when a constraint cannot be evaluated (e.g. x % 0), naming
  // the kernel, the constraint, the error, the config and the shape.
  [[nodiscard]] Result<bool> admits(const Config& config) const;

  // All admitted configs in index order. Errors: the first constraint that cannot be evaluated
  // (admits()); "space_too_large" when the cartesian product exceeds `max_cartesian`.
  [[nodiscard]] Result<std::vector<Config>> enumerate(std::uint64_t max_cartesian = 10'000'000) const;

  ParamSpace(ParamSpace&&) noexcept = default;
  ParamSpace& operator=(ParamSpace&&) noexcept = default;

private:
  ParamSpace() = default;
  std::vector<ParamSpec> m_params;
  Shape m_shape;
  std::string m_kernel;
  std::vector<Expr> m_constraints;
  std::uint64_t m_cartesian = 0;
};

} // namespace ktune
