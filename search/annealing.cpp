// annealing: simulated annealing over Hamming neighbours, on the log of the time.
//
// Working on log time makes the temperature a relative slowdown: at temperature T a move to a
// config 10% slower is accepted with probability exp(-ln(1.1)/T), whatever the kernel's scale.
// The temperature falls geometrically with every evaluation; when it reaches k_t_min the search
// reheats and continues from the best config found. A neighbour measured before costs no
// evaluation; a failed one is never accepted. Without an unproposed neighbour the walk jumps to a
// random unproposed config.
#include "search/strategies.hpp"

#include <algorithm>
#include <cmath>

namespace ktune::search {

namespace {

constexpr double k_t_start = 0.2;
constexpr double k_t_min = 0.002;
constexpr double k_cooling = 0.97; // per evaluation: start to min in about 150 evaluations
constexpr int k_free_moves = 64;   // moves over already measured configs per proposal

class Annealing final : public Strategy {
public:
  Annealing(const SearchSpace& space, std::uint64_t seed) : Strategy(space, seed) {}
  [[nodiscard]] std::string_view name() const override { return "annealing"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    if (!m_current) {
      if (pending_count() > 0) return; // the first measured config becomes the current one
      if (const auto start = random_unproposed()) out.push_back(*start);
      return;
    }
    int free_moves = 0;
    std::vector<std::size_t> candidates;
    while (out.size() < max_batch) {
      const auto& nb = neighbours();
      candidates.clear();
      for (std::size_t n : nb) {
        if (state(n) == State::unproposed && std::find(out.begin(), out.end(), n) == out.end()) candidates.push_back(n);
      }
      // Now and then walk over an already measured neighbour instead: it costs nothing.
      if (!nb.empty() && free_moves < k_free_moves) {
        const std::size_t n = nb[uniform_index(nb.size())];
        if (state(n) == State::ok || state(n) == State::failed) {
          ++free_moves;
          consider(n, state(n) == State::ok ? std::optional<double>(time(n)) : std::nullopt);
          continue;
        }
      }
      if (candidates.empty()) {
        if (out.empty() && pending_count() == 0) {
          if (const auto jump = random_unproposed()) {
            out.push_back(*jump);
            m_jump = *jump;
          }
        }
        return;
      }
      out.push_back(candidates[uniform_index(candidates.size())]);
    }
  }

  void learn(std::size_t config, std::optional<double> time_ms) override {
    if (!m_current) {
      if (time_ms) set_current(config);
      return;
    }
    m_temperature *= k_cooling;
    if (m_temperature < k_t_min) {
      m_temperature = k_t_start;
      if (best()) set_current(best()->config);
    }
    if (m_jump == config) {
      m_jump.reset();
      if (time_ms) set_current(config); // the walk continues from where it jumped to
      return;
    }
    consider(config, time_ms);
  }

  // The Metropolis step from the current config to `config`.
  void consider(std::size_t config, std::optional<double> time_ms) {
    if (!time_ms || config == *m_current) return;
    const double delta = std::log(*time_ms) - std::log(time(*m_current));
    if (delta <= 0 || uniform_real() < std::exp(-delta / m_temperature)) set_current(config);
  }

  void set_current(std::size_t config) {
    if (m_current == config) return;
    m_current = config;
    m_neighbours.reset();
  }

  const std::vector<std::size_t>& neighbours() {
    if (!m_neighbours) m_neighbours = space().neighbours(*m_current, Neighbourhood::hamming);
    return *m_neighbours;
  }

  std::optional<std::size_t> m_current;
  std::optional<std::vector<std::size_t>> m_neighbours; // of m_current, computed on demand
  double m_temperature = k_t_start;
  std::optional<std::size_t> m_jump; // a random config proposed because the walk was stuck
};

} // namespace

std::unique_ptr<Strategy> make_annealing(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<Annealing>(space, seed);
}

} // namespace ktune::search
