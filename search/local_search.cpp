// local: greedy first-improvement hill climbing over Hamming neighbours with random restarts.
//
// From the current config, its valid neighbours are tried in random order; the first one that is
// faster becomes the current config. Neighbours evaluated before (by an earlier climb) cost
// nothing: a faster one is moved to at once. When every neighbour has been tried without
// improvement the climb is at a local optimum and restarts from a random unproposed config.
#include "search/strategies.hpp"

#include <algorithm>

namespace ktune::search {

namespace {

class LocalSearch final : public Strategy {
public:
  LocalSearch(const SearchSpace& space, std::uint64_t seed) : Strategy(space, seed) {}
  [[nodiscard]] std::string_view name() const override { return "local"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    while (out.size() < max_batch) {
      if (!m_current) {
        // A climb starts at a config that must be measured first; wait for it.
        if (m_start_pending) return;
        const auto start = random_unproposed();
        if (!start) return;
        out.push_back(*start);
        m_start = *start;
        m_start_pending = true;
        return;
      }
      if (m_next_neighbour == m_neighbours.size()) {
        if (!m_climb_pending.empty()) return; // wait: one of them may still improve
        m_current.reset();                     // local optimum: restart
        continue;
      }
      const std::size_t n = m_neighbours[m_next_neighbour++];
      switch (state(n)) {
        case State::unproposed:
          out.push_back(n);
          m_climb_pending.push_back(n);
          break;
        case State::ok:
          if (time(n) < m_current_time) {
            move_to(n);
          }
          break;
        case State::pending:
        case State::failed:
          break;
      }
    }
  }

  void learn(std::size_t config, std::optional<double> time_ms) override {
    if (m_start_pending && config == m_start) {
      m_start_pending = false;
      if (time_ms) move_to(config);
      return;
    }
    if (!m_current) return;
    const auto it = std::find(m_climb_pending.begin(), m_climb_pending.end(), config);
    if (it == m_climb_pending.end()) return; // a result from an earlier climb
    m_climb_pending.erase(it);
    if (time_ms && *time_ms < m_current_time) move_to(config);
  }

  void move_to(std::size_t config) {
    m_current = config;
    m_current_time = time(config);
    m_neighbours = space().neighbours(config, Neighbourhood::hamming);
    for (std::size_t i = m_neighbours.size(); i > 1; --i) std::swap(m_neighbours[i - 1], m_neighbours[uniform_index(i)]);
    m_next_neighbour = 0;
    m_climb_pending.clear();
  }

  std::optional<std::size_t> m_current;
  double m_current_time = 0;
  std::vector<std::size_t> m_neighbours; // of the current config, in trial order
  std::size_t m_next_neighbour = 0;
  std::vector<std::size_t> m_climb_pending; // proposed neighbours of the current config not yet observed
  std::size_t m_start = 0;
  bool m_start_pending = false;
};

} // namespace

std::unique_ptr<Strategy> make_local(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<LocalSearch>(space, seed);
}

} // namespace ktune::search
