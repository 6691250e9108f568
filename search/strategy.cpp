#include "search/strategy.hpp"

#include "search/strategies.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune::search {

Strategy::Strategy(const SearchSpace& space, std::uint64_t seed)
    : m_space(space), m_rng(seed), m_state(space.size(), State::unproposed), m_time(space.size(), 0.0) {
  m_unproposed.resize(space.size());
  m_unproposed_pos.resize(space.size());
  for (std::size_t i = 0; i < space.size(); ++i) {
    m_unproposed[i] = static_cast<std::uint32_t>(i);
    m_unproposed_pos[i] = static_cast<std::uint32_t>(i);
  }
}

std::vector<std::size_t> Strategy::propose(std::size_t max_batch) {
  std::vector<std::size_t> out;
  if (max_batch == 0 || exhausted()) return out;
  std::vector<std::size_t> wanted;
  next(max_batch, wanted);
  for (std::size_t id : wanted) {
    if (out.size() == max_batch) break;
    if (id >= m_space.size() || is_proposed(id)) continue;
    mark_proposed(id);
    out.push_back(id);
  }
  // Liveness: a strategy that has nothing to say while nothing is outstanding would stall its
  // driver forever; it gets a random config instead.
  if (out.empty() && pending_count() == 0) {
    if (const auto id = random_unproposed()) {
      mark_proposed(*id);
      out.push_back(*id);
    }
  }
  return out;
}

Result<void> Strategy::observe(std::size_t config, std::optional<double> time_ms) {
  if (config >= m_space.size()) {
    return make_error(ErrorCode::bad_observation, "observe: config " + std::to_string(config) +
                                             " is not in the search space (size " + std::to_string(m_space.size()) + ")");
  }
  if (m_state[config] != State::pending) {
    return make_error(ErrorCode::bad_observation, "observe: config " + std::to_string(config) + " is not outstanding (" +
                                             (m_state[config] == State::unproposed ? "never proposed" : "already observed") +
                                             ")");
  }
  if (time_ms && !(std::isfinite(*time_ms) && *time_ms > 0)) {
    return make_error(ErrorCode::bad_observation, "observe: config " + std::to_string(config) +
                                             ": expected a finite time > 0 ms, found " + std::to_string(*time_ms));
  }
  ++m_observed;
  if (time_ms) {
    m_state[config] = State::ok;
    m_time[config] = *time_ms;
    if (!m_best || *time_ms < m_best->time_ms) m_best = Observation{config, *time_ms};
  } else {
    m_state[config] = State::failed;
    ++m_failed;
  }
  learn(config, time_ms);
  return {};
}

void Strategy::mark_proposed(std::size_t config) {
  m_state[config] = State::pending;
  ++m_proposed;
  const std::uint32_t pos = m_unproposed_pos[config];
  const std::uint32_t last = m_unproposed.back();
  m_unproposed[pos] = last;
  m_unproposed_pos[last] = pos;
  m_unproposed.pop_back();
}

std::optional<std::size_t> Strategy::random_unproposed() {
  if (m_unproposed.empty()) return std::nullopt;
  return m_unproposed[uniform_index(m_unproposed.size())];
}

std::size_t Strategy::uniform_index(std::size_t n) {
  // std::uniform_int_distribution differs between standard libraries; drawing by rejection from
  // the raw engine keeps a seed's proposals the same everywhere.
  const std::uint64_t range = static_cast<std::uint64_t>(n);
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t x = 0;
  do {
    x = m_rng();
  } while (x >= limit);
  return static_cast<std::size_t>(x % range);
}

double Strategy::uniform_real() { return static_cast<double>(m_rng() >> 11) * 0x1.0p-53; }

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names{"exhaustive", "random", "local", "annealing", "genetic", "bayes"};
  return names;
}

bool uses_prior(std::string_view name) { return name == "bayes"; }

Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, const SearchSpace& space, std::uint64_t seed,
                                                const Prior& prior) {
  if (name == "exhaustive" || name == k_given_configs) return make_exhaustive(space, seed);
  if (name == "random") return make_random(space, seed);
  if (name == "local") return make_local(space, seed);
  if (name == "annealing") return make_annealing(space, seed);
  if (name == "genetic") return make_genetic(space, seed);
  if (name == "bayes") return make_bayes(space, seed, prior);
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error(ErrorCode::unknown_strategy, "unknown strategy '" + std::string(name) + "'; expected one of: " + known);
}

} // namespace ktune::search
