#pragma once
// Budget and StopCondition: when a search ends (KTT's StopCondition).
//
// A Budget combines any of: a number of evaluations, a fraction of the space, a wall time, and a
// patience (stop after K evaluations without a new best). The search stops as soon as one limit
// is reached; a Budget with no limit set stops when the space is exhausted.
//
// The driver reports every finished evaluation to record() and asks proposals_left() how many
// more configs it may hand out, so that batches never overshoot the evaluation limits. Time is
// passed in, never read from a clock here, so that replay and tests are deterministic.
#include "core/result.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ktune::search {

struct Budget {
  std::optional<std::size_t> max_evaluations;
  std::optional<double> space_fraction; // (0, 1]: fraction * space size evaluations, rounded, at least 1
  std::optional<std::chrono::milliseconds> wall_time;
  std::optional<std::size_t> patience; // stop after this many evaluations without a new best
};

// "200" -> 200 evaluations; "2%" or "2.5%" -> that share of `valid_configs`, rounded, at least 1.
// Errors (code "bad_budget"): empty text, not a positive number, a percentage outside (0, 100].
[[nodiscard]] Result<std::size_t> parse_evaluation_budget(std::string_view text, std::size_t valid_configs);

// A budget in time ends in 's': "60s", "1.5s" (seconds, compile + benchmark time).
[[nodiscard]] bool is_time_budget(std::string_view text);
// "60s" -> 60000 ms, rounded up to a whole millisecond. Errors (code "bad_budget"): no 's' suffix,
// not a number, not positive, or more than a year.
[[nodiscard]] Result<std::chrono::milliseconds> parse_time_budget(std::string_view text);

class StopCondition {
public:
  using Clock = std::chrono::steady_clock;

  // `space_size` bounds the evaluations in any case.
  StopCondition(const Budget& budget, std::size_t space_size, Clock::time_point start);

  // One evaluation finished; `time_ms` nullopt when it failed.
  void record(std::optional<double> time_ms);

  [[nodiscard]] bool reached(Clock::time_point now) const;
  // How many more configs may be proposed while `pending` are being evaluated: 0 once reached
  // (the wall-time limit is checked by reached(), not here).
  [[nodiscard]] std::size_t proposals_left(std::size_t pending) const;
  // The evaluation limit implied by max_evaluations, space_fraction and the space size.
  [[nodiscard]] std::size_t evaluation_limit() const { return m_limit; }
  [[nodiscard]] std::size_t evaluations() const { return m_evaluations; }
  // Why the search stopped: "budget of 30 evaluations", "no improvement in 50 evaluations",
  // "wall time of 60000 ms", "search space exhausted"; "" while not reached.
  [[nodiscard]] std::string reason(Clock::time_point now) const;

private:
  Budget m_budget;
  std::size_t m_space_size;
  std::size_t m_limit;
  Clock::time_point m_start;
  std::size_t m_evaluations = 0;
  std::size_t m_since_improvement = 0;
  std::optional<double> m_best_ms;
};

} // namespace ktune::search
