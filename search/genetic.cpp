// genetic: a steady-state genetic algorithm whose offspring are always valid configs.
//
// The population is the k_population fastest configs measured so far. Each child takes every
// param from one of two parents (uniform crossover), each parent the fittest of k_tournament
// members drawn at random; then each tunable param mutates with probability 1/(tunable params),
// to a neighbouring value or, less often, to any value. A child outside the space (or proposed before) is repaired: it snaps to a
// random unproposed valid config that differs from it in one param; when none exists a new child
// is bred. Until k_seed_configs configs have been measured successfully, configs are drawn at
// random. Failed configs never enter the population.
#include "search/strategies.hpp"

#include <algorithm>

namespace ktune::search {

namespace {

constexpr std::size_t k_population = 16;
constexpr std::size_t k_seed_configs = 8;
constexpr std::size_t k_tournament = 3;
constexpr int k_breed_attempts = 16;

class Genetic final : public Strategy {
public:
  Genetic(const SearchSpace& space, std::uint64_t seed) : Strategy(space, seed) {
    for (std::size_t p = 0; p < space.param_count(); ++p) {
      if (space.params()[p].values.size() > 1) m_tunable.push_back(p);
    }
  }
  [[nodiscard]] std::string_view name() const override { return "genetic"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    while (out.size() < max_batch) {
      std::optional<std::size_t> pick;
      if (m_population.size() < k_seed_configs || m_tunable.empty()) {
        pick = random_unproposed();
      } else {
        for (int attempt = 0; attempt < k_breed_attempts && !pick; ++attempt) pick = breed(out);
        if (!pick) pick = random_unproposed();
      }
      if (!pick || std::find(out.begin(), out.end(), *pick) != out.end()) return;
      out.push_back(*pick);
    }
  }

  void learn(std::size_t config, std::optional<double> time_ms) override {
    if (!time_ms) return;
    const auto pos = std::lower_bound(m_population.begin(), m_population.end(), std::make_pair(*time_ms, config));
    m_population.insert(pos, {*time_ms, config});
    if (m_population.size() > k_population) m_population.pop_back();
  }

  // The fittest of k_tournament members drawn at random (the population is sorted fastest first).
  [[nodiscard]] std::size_t tournament() {
    std::size_t pick = uniform_index(m_population.size());
    for (std::size_t k = 1; k < k_tournament; ++k) pick = std::min(pick, uniform_index(m_population.size()));
    return m_population[pick].second;
  }

  [[nodiscard]] std::optional<std::size_t> breed(const std::vector<std::size_t>& taken) {
    const auto first = space().indices(tournament());
    const auto second = space().indices(tournament());
    std::vector<std::uint32_t> child(first.begin(), first.end());
    for (std::size_t p : m_tunable) {
      if (uniform_real() < 0.5) child[p] = second[p];
    }
    for (std::size_t p : m_tunable) {
      if (uniform_real() * static_cast<double>(m_tunable.size()) >= 1.0) continue;
      const auto n = static_cast<std::uint32_t>(space().params()[p].values.size());
      if (uniform_real() < 0.7) {
        if (child[p] == 0) {
          child[p] = 1;
        } else if (child[p] + 1 == n) {
          child[p] = n - 2;
        } else {
          child[p] = uniform_real() < 0.5 ? child[p] + 1 : child[p] - 1;
        }
      } else {
        child[p] = static_cast<std::uint32_t>(uniform_index(n));
      }
    }
    const auto usable = [&](std::size_t id) {
      return !is_proposed(id) && std::find(taken.begin(), taken.end(), id) == taken.end();
    };
    if (const auto id = space().find(child); id && usable(*id)) return id;
    return snap(child, usable);
  }

  // A random usable config at Hamming distance 1 from `target` (which need not be valid).
  template <class Usable>
  [[nodiscard]] std::optional<std::size_t> snap(std::vector<std::uint32_t>& target, const Usable& usable) {
    std::vector<std::size_t> found;
    for (std::size_t p : m_tunable) {
      const std::uint32_t own = target[p];
      const auto n = static_cast<std::uint32_t>(space().params()[p].values.size());
      for (std::uint32_t v = 0; v < n; ++v) {
        if (v == own) continue;
        target[p] = v;
        if (const auto id = space().find(target); id && usable(*id)) found.push_back(*id);
      }
      target[p] = own;
    }
    if (found.empty()) return std::nullopt;
    return found[uniform_index(found.size())];
  }

  std::vector<std::size_t> m_tunable;                       // params with more than one value
  std::vector<std::pair<double, std::size_t>> m_population; // (time, config), fastest first
};

} // namespace

std::unique_ptr<Strategy> make_genetic(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<Genetic>(space, seed);
}

} // namespace ktune::search
