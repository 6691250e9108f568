#pragma once
// Strategy: proposes batches of valid configs from a SearchSpace and learns from each result
// (KTT's Searcher). The same objects drive live tuning (the daemon's scheduler) and replay of
// recorded spaces.
//
// Driving a strategy:
//   auto strategy = make_strategy("genetic", space, seed);      // space outlives the strategy
//   while (!stop.reached(now)) {
//     for (id : strategy->propose(n)) start evaluating id;      // n = free workers, capped by the budget
//     ... later, one by one, in any order: strategy->observe(id, time_ms or nullopt);
//   }
//
// Guarantees: every proposed id is a config of the space and is proposed at most once per
// strategy object; failures (nullopt) are learned like any other result. For a given space and
// seed the sequence of proposals is a function of the sequence of propose/observe calls and
// their arguments only (std::mt19937_64 seeded explicitly; no hash-order dependence).
// Not thread-safe: one strategy object belongs to one job.
#include "core/result.hpp"
#include "search/prior.hpp"
#include "search/search_space.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::search {

struct Observation {
  std::size_t config = 0;
  double time_ms = 0;
};

// How a strategy that was given a prior used it, for the job's record.
struct PriorUse {
  bool trusted = false;                 // the search still trusted the prior at its last model fit
  std::optional<std::size_t> favourite; // the config the prior ranked first (its first pick)
};

class Strategy {
public:
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;
  virtual ~Strategy() = default;

  [[nodiscard]] virtual std::string_view name() const = 0;

  // Up to `max_batch` configs not proposed before. While results of earlier proposals are
  // outstanding a strategy may return fewer, or none, to wait for them; with nothing outstanding
  // it returns at least one config unless every config of the space has been proposed.
  [[nodiscard]] std::vector<std::size_t> propose(std::size_t max_batch);

  // The result of a proposed config: its time in ms (finite, > 0), or nullopt when it failed.
  // Errors (code "bad_observation"): a config that is not outstanding (never proposed, or already
  // observed), a time that is not finite and positive. An error changes nothing.
  [[nodiscard]] Result<void> observe(std::size_t config, std::optional<double> time_ms);

  // Every config of the space has been proposed.
  [[nodiscard]] bool exhausted() const { return m_unproposed.empty(); }
  [[nodiscard]] std::size_t proposed_count() const { return m_proposed; }
  [[nodiscard]] std::size_t observed_count() const { return m_observed; }
  [[nodiscard]] std::size_t failed_count() const { return m_failed; }
  [[nodiscard]] std::size_t pending_count() const { return m_proposed - m_observed; }
  // The fastest observed config; nullopt while no evaluation succeeded.
  [[nodiscard]] const std::optional<Observation>& best() const { return m_best; }
  [[nodiscard]] const SearchSpace& space() const { return m_space; }
  // nullopt for a strategy without a prior (a cold search, or one that uses none).
  [[nodiscard]] virtual std::optional<PriorUse> prior_use() const { return std::nullopt; }

protected:
  Strategy(const SearchSpace& space, std::uint64_t seed);

  enum class State : std::uint8_t { unproposed, pending, ok, failed };

  // Appends up to `max_batch` unproposed configs to `out` (duplicates and configs proposed
  // before are dropped by propose(); a strategy should not rely on that). May append none.
  virtual void next(std::size_t max_batch, std::vector<std::size_t>& out) = 0;
  // Called once per observed result, after the bookkeeping (state(), time(), best()) is updated.
  virtual void learn(std::size_t config, std::optional<double> time_ms) = 0;

  [[nodiscard]] State state(std::size_t config) const { return m_state[config]; }
  [[nodiscard]] bool is_proposed(std::size_t config) const { return m_state[config] != State::unproposed; }
  // The observed time of a config in State::ok.
  [[nodiscard]] double time(std::size_t config) const { return m_time[config]; }
  [[nodiscard]] std::size_t unproposed_count() const { return m_unproposed.size(); }
  // A uniformly drawn unproposed config; nullopt when all are proposed. Does not mark it.
  [[nodiscard]] std::optional<std::size_t> random_unproposed();
  // The unproposed configs, in no particular (but deterministic) order.
  [[nodiscard]] const std::vector<std::uint32_t>& unproposed() const { return m_unproposed; }
  [[nodiscard]] std::mt19937_64& rng() { return m_rng; }
  [[nodiscard]] std::size_t uniform_index(std::size_t n); // in [0, n), n > 0
  [[nodiscard]] double uniform_real();                    // in [0, 1)

private:
  void mark_proposed(std::size_t config);

  const SearchSpace& m_space;
  std::mt19937_64 m_rng;
  std::vector<State> m_state;
  std::vector<double> m_time;
  std::vector<std::uint32_t> m_unproposed;     // unproposed ids; swap-removed
  std::vector<std::uint32_t> m_unproposed_pos; // id -> position in m_unproposed
  std::size_t m_proposed = 0;
  std::size_t m_observed = 0;
  std::size_t m_failed = 0;
  std::optional<Observation> m_best;
};

// The names a client may ask for, in the order they are documented.
[[nodiscard]] const std::vector<std::string>& strategy_names();

// The strategy of a job given its candidates (a tune's `configs`: the daemon's planner names it,
// a client cannot ask for it): every candidate, in the order given, as exhaustive runs them.
inline constexpr std::string_view k_given_configs = "configs";

// Whether the strategy of this name learns from a prior given to make_strategy().
[[nodiscard]] bool uses_prior(std::string_view name);

// exhaustive  every config in id order
// random      uniform sampling without replacement
// local       greedy first-improvement hill climbing over Hamming neighbours, random restarts
// annealing   simulated annealing over neighbours on log time, with reheating
// genetic     steady-state genetic algorithm; crossover and mutation repaired to valid configs
// bayes       Bayesian optimisation: Gaussian-process surrogate on log time, proposing by expected
//             improvement (times the estimated chance to run) over a pool of candidates
// `prior`: earlier results of the kernel (search/prior.hpp); a strategy for which uses_prior()
// is true learns from it (bayes), the others start from nothing whatever it holds. Only read
// during the call.
// k_given_configs is exhaustive by another name. Errors (code "unknown_strategy") list the valid
// names.
[[nodiscard]] Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, const SearchSpace& space,
                                                              std::uint64_t seed, const Prior& prior = {});

} // namespace ktune::search
