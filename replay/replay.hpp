#pragma once
// Replay: runs a strategy against a RecordedSpace, answering every proposed config from the
// recorded times instead of compiling and measuring it. The strategy code is the one live tuning
// runs (search/strategy.hpp); no device, no files, no clock.
//
// Fraction of optimum after k evaluations = optimum time in the file / time of the best config
// found within the first k evaluations (0 while no evaluation succeeded); 1.0 = optimum found.
#include "core/result.hpp"
#include "replay/recorded_space.hpp"
#include "search/prior.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ktune::replay {

struct ReplayOptions {
  std::string strategy;       // a name of search::strategy_names()
  std::size_t budget = 0;     // evaluations per run, >= 1; capped at the space size
  std::size_t repeats = 1;    // independent runs, >= 1
  std::uint64_t seed = 0;     // run r uses repeat_seed(seed, r)
  std::size_t batch = 1;      // configs asked of the strategy at a time, >= 1
  // Evaluation counts to report, ascending, each in [1, budget]; empty = {budget}.
  std::vector<std::size_t> checkpoints;
  search::Prior prior;        // earlier results the strategy starts from (prior_source())
  // With a time budget (then `budget` is not used) a run ends once its simulated time (each
  // evaluation charged its recorded cost_ms) reaches it, the evaluation that crosses it
  // included, or when the space is exhausted; the checkpoints are then time_checkpoints.
  std::optional<std::chrono::milliseconds> time_budget;
  // Simulated times to report, ascending, each in (0, time_budget]; empty = {time_budget}. An
  // evaluation counts at time T when it started before T.
  std::vector<std::chrono::milliseconds> time_checkpoints;
};

struct CheckpointStats {
  std::size_t evaluations = 0;      // evaluation budgets: the count; time budgets: 0
  std::chrono::milliseconds simulated{0}; // time budgets: the simulated time; else 0
  double mean_evaluations = 0;      // evaluations made by then, averaged over the repeats
  double mean_fraction = 0; // over the repeats
  double min_fraction = 0;
  double max_fraction = 0;
  double optimum_rate = 0;  // share of the repeats that found the optimum
};

struct ReplayReport {
  std::string strategy;
  std::size_t budget = 0; // after capping at the space size; the space size with a time budget
  std::optional<std::chrono::milliseconds> time_budget;
  std::size_t repeats = 0;
  std::vector<CheckpointStats> checkpoints;
  double mean_evaluations = 0; // evaluations per run, averaged
  std::size_t min_evaluations = 0, max_evaluations = 0;
  double mean_failed = 0; // failed evaluations per run, averaged
  // Failed evaluations uniform random sampling would make on average with the same evaluations:
  // the share of the file's configs that failed times mean_evaluations (exact, no sampling).
  double random_expected_failed = 0;
};

// The failures uniform sampling without replacement of `evaluations` configs of `recorded` makes
// on average: evaluations * failed / configs.
[[nodiscard]] double random_expected_failures(const RecordedSpace& recorded, double evaluations);

// The seed of run `repeat` (splitmix64 of both): runs differ, and are reproducible one by one.
[[nodiscard]] std::uint64_t repeat_seed(std::uint64_t seed, std::size_t repeat);

struct ReplayRun {
  std::vector<std::size_t> proposals; // config ids in the order they were evaluated
  std::vector<double> best_after;     // best time after each evaluation; +infinity until one succeeds
  // Simulated time (ms) when each evaluation ended: the recorded costs summed, one evaluation
  // after the other. Empty when the file records no costs.
  std::vector<double> elapsed_ms;
  std::size_t failed = 0;             // evaluations of configs recorded as failed
};

// One run of at most `budget` evaluations. Errors: "unknown_strategy".
[[nodiscard]] Result<ReplayRun> replay_run(const RecordedSpace& recorded, const std::string& strategy,
                                           std::size_t budget, std::uint64_t seed, std::size_t batch = 1,
                                           const search::Prior& prior = {});

// One run that proposes while its simulated time is below `simulated` (search::StopCondition's
// wall_time, on the simulated clock); a batch proposed in time is evaluated whole. Errors:
// "unknown_strategy"; "no_cost" when the file records no cost (naming the file, the config and
// the field missing).
[[nodiscard]] Result<ReplayRun> replay_run_for(const RecordedSpace& recorded, const std::string& strategy,
                                               std::chrono::milliseconds simulated, std::uint64_t seed,
                                               std::size_t batch = 1, const search::Prior& prior = {});

// The results recorded in `source` as a prior for a search of `target` (another device, another
// problem size of the same kernel): configs matched by parameter name and value text; those not
// in target's space are left out. Errors (code "bad_prior"): the files do not have the same
// parameter names (another kernel), naming both.
[[nodiscard]] Result<search::PriorSource> prior_source(const RecordedSpace& target, const RecordedSpace& source);

// `repeats` runs, summarised at the checkpoints. Errors: "unknown_strategy", "bad_budget"
// (budget 0, repeats 0, batch 0, checkpoints not ascending within [1, budget] or (0, time_budget]),
// "no_cost" (a time budget on a file without costs).
[[nodiscard]] Result<ReplayReport> run_replay(const RecordedSpace& recorded, const ReplayOptions& options);

// Evaluation counts at which a convergence table shows progress: `steps` (>= 1) points spread
// evenly up to `budget`, ascending, without duplicates, always ending with `budget`.
[[nodiscard]] std::vector<std::size_t> even_checkpoints(std::size_t budget, std::size_t steps);

} // namespace ktune::replay
