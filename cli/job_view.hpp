#pragma once
// How `ktune` shows a job: the `job N` view (header, candidate table, tie and finals notes), the
// candidate rows sorted and cut, and the `tune --wait` progress line.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace ktune::cli {

// `job N`: candidates in config order, or sorted; at most `top` of them (0 = all).
enum class JobSort { config, median, status };
struct JobViewOptions {
  JobSort sort = JobSort::config;
  std::int64_t top = 0;
};

// The candidate rows of a job reply sorted and cut as `view` says: median = ok candidates
// fastest first, then the others by status; status = grouped by status (ok first), fastest
// first within a group; config = config order.
[[nodiscard]] nlohmann::ordered_json arrange_results(const nlohmann::ordered_json& results, const JobViewOptions& view);

// The `job N` text of a job reply whose "results" were arranged (arrange_results); `all_results`
// are the reply's rows before that (the tie and lock notes count all of them).
void print_job(std::ostream& out, const nlohmann::ordered_json& reply,
               const nlohmann::ordered_json& all_results);

// "winner: BM=64,BN=32 median 0.123 ms, 213.5 GFLOP/s".
[[nodiscard]] std::string winner_line(const nlohmann::ordered_json& winner);
// When the winner is a tie-break's choice over a finalist with a lower median: the line that
// says so, else "".
[[nodiscard]] std::string tie_break_line(const nlohmann::ordered_json& winner,
                                         const nlohmann::ordered_json& results);
// When the progress line's best (`search_best`, a config) is not the winner because the finals
// measured the finalists again: the line that says so, with the search best's median there
// (its row in `results`, marked "remeasured"); else "".
[[nodiscard]] std::string finals_line(const nlohmann::ordered_json& search_best,
                                      const nlohmann::ordered_json& winner,
                                      const nlohmann::ordered_json& results);

// Renders `tune --wait` progress events ({"done","total","failed","best_config",
// "best_median_ms","best_gflops"}) as `[done/total] failed F  best 12.3 GFLOP/s (BM=64,...)`.
// On a terminal the line is rewritten in place; otherwise a line is printed at every further
// 10% of the total, after 2 s without one, and at the end.
class ProgressPrinter {
public:
  ProgressPrinter(std::ostream& err, bool tty) : m_err(err), m_tty(tty) {}
  void update(const nlohmann::ordered_json& data);
  // Ends an in-place line with a newline; call once the final reply arrived.
  void finish();

  [[nodiscard]] static std::string line(const nlohmann::ordered_json& data);

private:
  std::ostream& m_err;
  bool m_tty;
  bool m_open_line = false;
  bool m_printed_any = false;
  std::int64_t m_last_decile = -1;
  std::int64_t m_last_done = -1;
  std::chrono::steady_clock::time_point m_last_print{};
};

} // namespace ktune::cli
