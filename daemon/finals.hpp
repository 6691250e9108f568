#pragma once
// The finals and the winner choice of a tune job, as pure functions of what the job measured: no
// store, no workers, no clock. The run (daemon/tune_run.hpp) measures; these decide.
//
// - Who goes to the finals (pick_finalists): the best and the rows measured in this job within
//   final_margin of its median, nearest first, at most `finalists`; none when fewer than two,
//   or when the best was not measured in this job (a reused row's time cannot be paired).
// - Who leaves them early (race_out): from round k_race_finals_after on, the finalists slower
//   than the best at 95% confidence by more than tie_margin, slowest first, keeping two.
// - The winning group (choose_winner): after finals, the finalists judge_finals ties with the
//   best of the finals; without finals, the rows a reused judgement tied when nothing was
//   measured in this job, else the fastest row and those within tie_margin of its median.
// - The winner among the ties: the incumbent (the key's winner before this job) when it is in the
//   group, else the fastest tie, the lowest config index among ties within k_same_median (1%) of
//   it (pick_winner, db/job_winner.hpp).
// - Remeasured rows: a finalist's row (raced out or not) holds its rounds pooled -- the samples of
//   every round and their figures, gflops and gbps scaled by the change of median.
#include "core/stats.hpp"
#include "db/store.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ktune::daemon {

// Rounds of the finals after which clear losers leave them (race_out).
inline constexpr int k_race_finals_after = 3;

// One finalist's measurements in the finals, round by round.
struct FinalistRounds {
  std::size_t index = 0;            // config index
  std::vector<SampleStats> rounds;  // one per round it was measured in
  std::vector<float> samples;       // every round's samples, in order (empty: a worker that sent none)
};

// The configs that go to the finals, in config order; empty for no finals. `ok_rows` are the
// job's ok rows by config index, `measured_here` the config indices measured in this job (not
// reused), `best` the job's best row.
[[nodiscard]] std::vector<std::size_t> pick_finalists(
    const std::map<std::size_t, ResultRecord>& ok_rows, const std::optional<ResultRecord>& best,
    const std::set<std::size_t>& measured_here, double final_margin, int finalists);

// judge_finals (core/stats.hpp) on the finalists' round medians, in the order given.
[[nodiscard]] FinalsVerdict judge_rounds(const std::vector<FinalistRounds>& finalists,
                                         double tie_margin);

// The positions in `finalists` that leave the finals after `rounds_done` rounds (race_finals'
// rule above), in position order. Empty before round k_race_finals_after or with two finalists.
[[nodiscard]] std::vector<std::size_t> race_out(const std::vector<FinalistRounds>& finalists,
                                                int rounds_done, double tie_margin);

// `row` with its finals pooled: stats of all samples (of the round figures when there are no
// samples), those samples, gflops and gbps scaled by the change of median, remeasured set.
void pool_rounds_into(ResultRecord& row, const FinalistRounds& finals);

// What the job measured at its end.
struct FinalsInput {
  std::map<std::size_t, ResultRecord> ok_rows;  // config index -> ok row (at least one)
  std::vector<FinalistRounds> finalists;        // still in the finals; fewer than two: no finals
  std::vector<FinalistRounds> raced_out;        // left the finals early (race_out)
  bool measured_here = true;                    // any row measured in this job (not all reused)
  double tie_margin = 0.03;
  std::string incumbent_config;                 // the key's winner before this job, "" when none
};

struct WinnerChoice {
  std::vector<ResultRecord> rows;    // the ok rows in config order: finalists pooled, `tied` set
  std::vector<std::int64_t> ties;    // config indices of the winning group, in config order
  std::size_t winner = 0;            // position of the winner in `rows`
  bool incumbent_kept = false;       // the winner is the incumbent
  std::vector<std::int64_t> remeasured; // config indices of the pooled rows (finals held only)
  FinalsVerdict verdict;             // judge_rounds of `finalists`; empty without finals
};

// The job's winning group and winner (the rules above). `input.ok_rows` must not be empty.
[[nodiscard]] WinnerChoice choose_winner(const FinalsInput& input);

} // namespace ktune::daemon
