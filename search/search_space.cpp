#include "search/search_space.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune::search {

namespace {

Error space_error(std::string message) { return make_error(ErrorCode::bad_space, std::move(message)); }

} // namespace

Result<SearchSpace> SearchSpace::create(std::vector<SearchParam> params,
                                        const std::vector<std::vector<std::uint32_t>>& configs) {
  if (params.empty()) return space_error("search space: expected at least one parameter, found none");
  constexpr std::uint64_t k_max_cartesian = std::uint64_t{1} << 63;
  SearchSpace space;
  space.m_radix.assign(params.size(), 1);
  std::uint64_t cartesian = 1;
  for (std::size_t p = params.size(); p-- > 0;) {
    const auto n = static_cast<std::uint64_t>(params[p].values.size());
    if (n == 0) return space_error("search space: parameter '" + params[p].name + "' has no values");
    space.m_radix[p] = cartesian;
    if (cartesian > k_max_cartesian / n) {
      return space_error("search space: the cartesian product of the parameter values exceeds 2^63");
    }
    cartesian *= n;
  }
  space.m_cartesian = cartesian;
  if (configs.empty()) return space_error("search space: expected at least one config, found none");
  if (configs.size() >= std::numeric_limits<std::uint32_t>::max()) {
    return space_error("search space: more than 2^32-1 configs");
  }

  const std::size_t d = params.size();
  space.m_params = std::move(params);
  space.m_size = configs.size();
  space.m_indices.reserve(configs.size() * d);
  space.m_lookup.reserve(configs.size());
  for (std::size_t id = 0; id < configs.size(); ++id) {
    const auto& config = configs[id];
    if (config.size() != d) {
      return space_error("search space: config " + std::to_string(id) + " has " + std::to_string(config.size()) +
                         " values, expected " + std::to_string(d));
    }
    for (std::size_t p = 0; p < d; ++p) {
      if (config[p] >= space.m_params[p].values.size()) {
        return space_error("search space: config " + std::to_string(id) + ": value index " + std::to_string(config[p]) +
                           " of parameter '" + space.m_params[p].name + "' is out of range (it has " +
                           std::to_string(space.m_params[p].values.size()) + " values)");
      }
    }
    space.m_indices.insert(space.m_indices.end(), config.begin(), config.end());
    space.m_lookup.emplace_back(*space.key_of(config), static_cast<std::uint32_t>(id));
  }
  std::sort(space.m_lookup.begin(), space.m_lookup.end());
  for (std::size_t i = 1; i < space.m_lookup.size(); ++i) {
    if (space.m_lookup[i].first == space.m_lookup[i - 1].first) {
      return space_error("search space: config " + std::to_string(space.m_lookup[i].second) +
                         " duplicates config " + std::to_string(space.m_lookup[i - 1].second));
    }
  }
  return space;
}

Result<SearchSpace> SearchSpace::from_configs(const std::vector<ParamSpec>& params,
                                              const std::vector<Config>& configs) {
  std::vector<SearchParam> search_params;
  search_params.reserve(params.size());
  for (const auto& p : params) {
    SearchParam sp{p.name, {}};
    sp.values.reserve(p.values.size());
    for (std::int64_t v : p.values) sp.values.push_back(static_cast<double>(v));
    search_params.push_back(std::move(sp));
  }
  std::vector<std::vector<std::uint32_t>> indices;
  indices.reserve(configs.size());
  for (std::size_t id = 0; id < configs.size(); ++id) {
    const Config& config = configs[id];
    std::vector<std::uint32_t> row(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto it = std::find_if(config.begin(), config.end(),
                                   [&](const auto& e) { return e.first == params[p].name; });
      if (it == config.end()) {
        return space_error("search space: config " + std::to_string(id) + " (" + config_to_string(config) +
                           ") has no value for parameter '" + params[p].name + "'");
      }
      const auto& values = params[p].values;
      const auto v = std::find(values.begin(), values.end(), it->second);
      if (v == values.end()) {
        return space_error("search space: config " + std::to_string(id) + ": " + params[p].name + "=" +
                           std::to_string(it->second) + " is not one of the parameter's declared values");
      }
      row[p] = static_cast<std::uint32_t>(v - values.begin());
    }
    indices.push_back(std::move(row));
  }
  return create(std::move(search_params), indices);
}

Config SearchSpace::to_config(std::size_t config) const {
  Config out;
  out.reserve(m_params.size());
  for (std::size_t p = 0; p < m_params.size(); ++p) {
    out.emplace_back(m_params[p].name, static_cast<std::int64_t>(std::llround(value(config, p))));
  }
  return out;
}

std::optional<std::uint64_t> SearchSpace::key_of(std::span<const std::uint32_t> indices) const {
  if (indices.size() != m_params.size()) return std::nullopt;
  std::uint64_t key = 0;
  for (std::size_t p = 0; p < indices.size(); ++p) {
    if (indices[p] >= m_params[p].values.size()) return std::nullopt;
    key += m_radix[p] * indices[p];
  }
  return key;
}

std::optional<std::size_t> SearchSpace::find(std::span<const std::uint32_t> indices) const {
  const auto key = key_of(indices);
  if (!key) return std::nullopt;
  const auto it = std::lower_bound(m_lookup.begin(), m_lookup.end(), std::make_pair(*key, std::uint32_t{0}));
  if (it == m_lookup.end() || it->first != *key) return std::nullopt;
  return it->second;
}

std::vector<std::size_t> SearchSpace::neighbours(std::size_t config, Neighbourhood kind) const {
  std::vector<std::size_t> out;
  const std::size_t d = m_params.size();
  std::vector<std::uint32_t> probe(indices(config).begin(), indices(config).end());
  auto try_probe = [&] {
    if (const auto id = find(probe)) out.push_back(*id);
  };
  for (std::size_t p = 0; p < d; ++p) {
    const std::uint32_t own = probe[p];
    const auto n = static_cast<std::uint32_t>(m_params[p].values.size());
    if (kind == Neighbourhood::adjacent) {
      if (own > 0) {
        probe[p] = own - 1;
        try_probe();
      }
      if (own + 1 < n) {
        probe[p] = own + 1;
        try_probe();
      }
    } else {
      for (std::uint32_t v = 0; v < n; ++v) {
        if (v == own) continue;
        probe[p] = v;
        try_probe();
      }
    }
    probe[p] = own;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t SearchSpace::hamming_distance(std::size_t a, std::size_t b) const {
  const auto x = indices(a);
  const auto y = indices(b);
  std::size_t distance = 0;
  for (std::size_t p = 0; p < x.size(); ++p) distance += x[p] != y[p] ? 1 : 0;
  return distance;
}

} // namespace ktune::search
