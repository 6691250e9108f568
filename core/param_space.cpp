#include "core/param_space.hpp"

#include <algorithm>
#include <limits>

namespace ktune {

std::string config_to_string(const Config& config) {
  std::string out;
  for (const auto& [name, value] : config) {
    if (!out.empty()) out += ',';
    out += name;
    out += '=';
    out += std::to_string(value);
  }
  return out;
}

NamedValues bind(const Shape& shape, const Config& config) {
  NamedValues out = shape.dims;
  out.insert(out.end(), config.begin(), config.end());
  return out;
}

Result<ParamSpace> ParamSpace::create(const KernelSpec& spec, const Shape& shape) {
  ParamSpace space;
  space.m_params = spec.params;
  space.m_shape = shape;
  space.m_kernel = spec.name;

  for (const auto& p : spec.params) {
    if (p.values.empty()) {
      return make_error(ErrorCode::spec_error, "kernel '" + spec.name + "': [params]." + p.name + ": no values declared");
    }
  }

  std::vector<std::string> variables = spec.shape_dims;
  for (const auto& p : spec.params) variables.push_back(p.name);
  for (std::size_t i = 0; i < spec.constraints.size(); ++i) {
    Result<Expr> expr = Expr::compile(spec.constraints[i], variables);
    if (!expr) {
      return make_error(ErrorCode::spec_error, "kernel '" + spec.name + "': [space].constraints[" + std::to_string(i) +
                                          "]: " + expr.error().message);
    }
    space.m_constraints.push_back(std::move(expr).value());
  }

  // Saturates at the largest uint64 so that enumerate() reports the space as too large instead
  // of wrapping around.
  std::uint64_t size = 1;
  for (const auto& p : spec.params) {
    const auto n = static_cast<std::uint64_t>(p.values.size());
    if (size > std::numeric_limits<std::uint64_t>::max() / n) {
      size = std::numeric_limits<std::uint64_t>::max();
    } else {
      size *= n;
    }
  }
  space.m_cartesian = size;
  return space;
}

Config ParamSpace::config_at(std::uint64_t index) const {
  Config config(m_params.size());
  for (std::size_t i = m_params.size(); i-- > 0;) {
    const auto n = static_cast<std::uint64_t>(m_params[i].values.size());
    config[i] = {m_params[i].name, m_params[i].values[static_cast<std::size_t>(index % n)]};
    index /= n;
  }
  return config;
}

Result<bool> ParamSpace::admits(const Config& config) const {
  if (config.size() != m_params.size()) return false;
  for (const auto& param : m_params) {
    const auto it = std::find_if(config.begin(), config.end(), [&](const auto& e) { return e.first == param.name; });
    if (it == config.end()) return false;
    if (std::find(param.values.begin(), param.values.end(), it->second) == param.values.end()) return false;
  }
  const NamedValues bindings = bind(m_shape, config);
  for (std::size_t i = 0; i < m_constraints.size(); ++i) {
    Result<double> value = m_constraints[i].eval(bindings);
    if (!value) {
      return make_error(ErrorCode::spec_error, "kernel '" + m_kernel + "': [space].constraints[" +
                                          std::to_string(i) + "]: " + value.error().message +
                                          ", at config " + config_to_string(config) +
                                          " and shape " + m_shape.to_string());
    }
    if (*value == 0) return false;
  }
  return true;
}

Result<std::vector<Config>> ParamSpace::enumerate(std::uint64_t max_cartesian) const {
  if (m_cartesian > max_cartesian) {
    return make_error(ErrorCode::space_too_large, "the cartesian product of the params has " +
                                             std::to_string(m_cartesian) + " configs, over the limit of " +
                                             std::to_string(max_cartesian));
  }
  std::vector<Config> admitted;
  for (std::uint64_t index = 0; index < m_cartesian; ++index) {
    Config config = config_at(index);
    Result<bool> ok = admits(config);
    if (!ok) return ok.error();  // an arithmetic error is the spec's, not an empty space
    if (*ok) admitted.push_back(std::move(config));
  }
  return admitted;
}

} // namespace ktune
