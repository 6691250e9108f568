#pragma once
// SearchSpace: the valid configs a strategy may propose, as value-index vectors over ordered
// parameter value lists.
//
// A config is identified by its id, 0..size()-1, in the order the configs were given (for a space
// built from ParamSpace::enumerate() that is index order). Every config in the space is valid:
// configs outside it are never proposed. Valid configs may still fail when evaluated; that is the
// strategy's business, not the space's.
//
// Immutable after creation; all const members are safe to call from several threads.
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ktune::search {

struct SearchParam {
  std::string name;
  // In declared order. Models use these numbers as features; for non-numeric values (recorded
  // files may hold strings) the caller passes the ordinal 0, 1, 2, ...
  std::vector<double> values;
};

// Which configs count as neighbours of a config (always valid configs of the space only).
enum class Neighbourhood {
  adjacent, // one param moved to the previous or next value in its declared order
  hamming,  // one param changed to any other of its values
};

class SearchSpace {
public:
  // The empty space: no params, no configs (every strategy over it is exhausted at once).
  SearchSpace() = default;

  // `configs[i][p]` is the index of config i's value in params[p].values.
  // Errors (code "bad_space"): no params, a param without values, a config of the wrong length or
  // with an index out of range, a duplicate config (named by its id), no configs, more than
  // 2^32-1 configs, a cartesian product over 2^63.
  [[nodiscard]] static Result<SearchSpace> create(std::vector<SearchParam> params,
                                                  const std::vector<std::vector<std::uint32_t>>& configs);

  // The space of the admitted configs of a kernel (ParamSpace::enumerate()), params in spec
  // order. Errors (code "bad_space"): a config that misses a param or holds an undeclared value,
  // plus those of create().
  [[nodiscard]] static Result<SearchSpace> from_configs(const std::vector<ParamSpec>& params,
                                                        const std::vector<Config>& configs);

  [[nodiscard]] std::size_t size() const { return m_size; }
  [[nodiscard]] std::size_t param_count() const { return m_params.size(); }
  [[nodiscard]] const std::vector<SearchParam>& params() const { return m_params; }
  // Product of the value-list lengths (the unrestricted space).
  [[nodiscard]] std::uint64_t cartesian_size() const { return m_cartesian; }

  // Value indices of `config` (one per param). `config` < size().
  [[nodiscard]] std::span<const std::uint32_t> indices(std::size_t config) const {
    return {m_indices.data() + config * m_params.size(), m_params.size()};
  }
  [[nodiscard]] double value(std::size_t config, std::size_t param) const {
    return m_params[param].values[m_indices[config * m_params.size() + param]];
  }
  // Values rounded to integers, named by the params (the daemon's Config).
  [[nodiscard]] Config to_config(std::size_t config) const;

  // The id of the config with these value indices; nullopt when it is not in the space (also for
  // a wrong length or an index out of range). O(log size).
  [[nodiscard]] std::optional<std::size_t> find(std::span<const std::uint32_t> indices) const;

  // Valid neighbours of `config`, ascending by id.
  [[nodiscard]] std::vector<std::size_t> neighbours(std::size_t config, Neighbourhood kind) const;

  // Number of params that differ between two configs.
  [[nodiscard]] std::size_t hamming_distance(std::size_t a, std::size_t b) const;

private:
  [[nodiscard]] std::optional<std::uint64_t> key_of(std::span<const std::uint32_t> indices) const;

  std::vector<SearchParam> m_params;
  std::vector<std::uint32_t> m_indices; // size() x param_count(), row-major
  std::size_t m_size = 0;
  std::uint64_t m_cartesian = 1;
  std::vector<std::uint64_t> m_radix; // mixed-radix place value of each param
  std::vector<std::pair<std::uint64_t, std::uint32_t>> m_lookup; // (cartesian key, id), sorted by key
};

} // namespace ktune::search
