#pragma once
// The `ktune` commands: each talks to ktuned through client/client.hpp, prints tables (or, with
// --json, the daemon's result object as one JSON document) and returns the process exit code.
//
// Exit codes: 0 ok, 1 error (daemon not running, an error reply, an I/O failure, a failed job),
// 2 usage error (bad command line), 3 not tuned (`query` answered with a fallback config).
// Errors go to `err` as "ktune: <code>: <message>"; results go to `out`. With --json every
// result is one JSON document on `out`, and an error is {"error":{"code":...,"message":...}}
// on `out` with a non-zero exit.
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::cli {

inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_error = 1;
inline constexpr int k_exit_usage = 2;
inline constexpr int k_exit_not_tuned = 3;

// Where a command writes. `err_is_tty` selects a progress line rewritten in place with '\r'
// over periodic progress lines.
struct Output {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
  bool json = false;           // --json: errors too are one JSON object on `out`
  bool error_reported = false; // report() printed an error (the JSON error object, once)
};

struct GlobalOptions {
  std::string socket;  // "" = resolve_paths(path_env_from_process()).socket
  bool json = false;   // print the daemon's result object instead of tables
};

struct DaemonStartOptions {
  std::string config;                 // "" = ktuned's default
  std::vector<std::string> kernel_dirs;       // added to the shipped families
  std::vector<std::string> only_kernel_dirs;  // instead of them
};

struct TuneOptions {
  std::string kernel;
  std::string shape;
  std::string dtype = "f32";
  std::string device = "cpu";
  std::string strategy = "exhaustive";
  std::optional<std::int64_t> budget;        // evaluations ...
  std::optional<double> budget_fraction;     // ... or a share of the admitted configs
  std::optional<double> budget_s;            // ... or seconds of the job's run time
  std::optional<std::int64_t> seed;          // the strategy's seed
  bool remeasure = false;                    // measure configs that already have a result again
  bool wait = false;
  bool retry_failed = false;                 // run quarantined configs again
  bool cold = false;                         // search without the store's earlier results
  std::optional<double> compile_timeout_s;   // per-job deadlines; unset = ktuned's settings
  std::optional<double> bench_timeout_s;
};

// "--budget" text: "30" (evaluations), "10%" (share of the admitted configs) or "60s" (seconds of
// the job's compile and bench time). Errors (code "bad_budget") say what was expected.
[[nodiscard]] Result<void> parse_budget_option(const std::string& text, TuneOptions& options);

struct QueryOptions {
  std::string kernel;
  std::string shape;
  std::string dtype = "f32";
  std::string device = "cpu";
};

// `daemon start`: returns 0 when a daemon answers (already running or started and ready).
// The daemon binary is $KTUNE_DAEMON, else `ktuned` next to this executable.
[[nodiscard]] int daemon_start(const GlobalOptions& global, const DaemonStartOptions& options,
                               Output& io);
// `daemon stop`: 0 once the socket stops answering (or nothing was running), 1 after 10 s.
[[nodiscard]] int daemon_stop(const GlobalOptions& global, Output& io);
// `daemon status`: 1 when ktuned is not running.
[[nodiscard]] int daemon_status(const GlobalOptions& global, Output& io);
[[nodiscard]] int list_kernels(const GlobalOptions& global, Output& io);
// `tune`: with `wait`, 0 only when the job finished with a winner.
[[nodiscard]] int tune(const GlobalOptions& global, const TuneOptions& options, Output& io);
// `job N`: candidates in config order, or sorted; at most `top` of them (0 = all).
enum class JobSort { config, median, status };
struct JobViewOptions {
  JobSort sort = JobSort::config;
  std::int64_t top = 0;
};
[[nodiscard]] int show_job(const GlobalOptions& global, std::int64_t job_id, Output& io,
                           const JobViewOptions& view = {});
// The candidate rows of a job reply sorted and cut as `view` says: median = ok candidates
// fastest first, then the others by status; status = grouped by status (ok first), fastest
// first within a group; config = config order.
[[nodiscard]] nlohmann::ordered_json arrange_results(const nlohmann::ordered_json& results, const JobViewOptions& view);
// `daemon log`: the last `lines` lines of the instance's ktuned.log; `follow` keeps printing
// what is appended until interrupted.
[[nodiscard]] int daemon_log(const GlobalOptions& global, std::int64_t lines, bool follow,
                             Output& io);
// `cancel N`: cancels a queued or running job (results measured so far are kept).
[[nodiscard]] int cancel_job(const GlobalOptions& global, std::int64_t job_id, Output& io);
[[nodiscard]] int list_jobs(const GlobalOptions& global, std::int64_t limit, Output& io);
// `query`: 0 for an exact (tuned) winner, 3 for a fallback answer.
[[nodiscard]] int query(const GlobalOptions& global, const QueryOptions& options, Output& io);

// Parses the command line with CLI11 and runs the chosen command. --help prints to `io.out`
// and returns 0; a usage error prints to `io.err` and returns 2. With KTUNE_PARSE_ONLY=1 in the
// environment a command line that parses returns 0 without running (tests/cli/check_readme.py
// checks the README's command lines this way).
[[nodiscard]] int run(int argc, const char* const* argv, Output& io);

// --- formatting, shared by the commands (and tested directly) ---------------------------------

// {"BM":64,"BN":32} -> "BM=64<sep>BN=32"; null or empty -> "-".
[[nodiscard]] std::string format_config(const nlohmann::ordered_json& config, std::string_view separator);
// Seconds as "12.3 s", "4m 05s" or "2h 03m 04s".
[[nodiscard]] std::string format_duration(double seconds);
// Milliseconds with 3 decimals from 1 ms up, 3 significant digits below.
[[nodiscard]] std::string format_ms(double ms);
// GFLOP/s with one decimal from 1 up, 3 significant digits below; 0 (unknown) -> "-".
[[nodiscard]] std::string format_gflops(double gflops);
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
