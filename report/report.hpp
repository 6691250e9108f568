#pragma once
// The HTML report of tuning jobs (`ktune report`): one self-contained file, with the charting
// library (Chart.js, pinned in report/package-lock.json) and the page template compiled into the
// binary, so a report is written and viewed without any network.
//
// The data comes from the store opened READ-ONLY (ktuned keeps the only read-write connection).
// For each job the page shows a header table (kernel, shape, dtype, device, strategy, state,
// winner, the job's timing breakdown) and four charts: the best time so far against the number
// of evaluations (results in insertion order), the distribution of candidate times, the median
// time per value of each parameter, and the candidates per status; a table of the failed
// candidates; and, for several jobs, the winners against shape per device.
#include "core/result.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::report {

// At most this many jobs in one report (a range like 1-100000 is refused, not truncated).
inline constexpr std::size_t k_max_report_jobs = 1000;

// Parses a job list: "12", "3,5,9", "10-14" or a mix ("1-3,8"); ids >= 1, a range low-high with
// low <= high. Duplicates are dropped; the order of first appearance is kept. Errors (code
// "bad_job_list") name the offending item and what was expected.
[[nodiscard]] Result<std::vector<std::int64_t>> parse_job_list(std::string_view text);

// One job as read from the store.
struct JobData {
  JobRecord job;
  std::vector<ResultRecord> results;        // any order; the report sorts them by id
  std::optional<WinnerRecord> key_winner;   // the winner table's row for the job's key, if any
  std::optional<DeviceInfo> device;         // the device stored under the job's fingerprint
};

// Reads each job, its results, its key's winner and its device from `store`. A job id that is
// not in the store is an "unknown_job" error naming the id and the database path.
[[nodiscard]] Result<std::vector<JobData>> load_jobs(const Store& store,
                                                     const std::vector<std::int64_t>& job_ids);

// The winner of a job as docs/protocol.md § job defines it: db/job_winner.hpp's job_winner (the
// result the job named), so the report names what `ktune job`, `history`, sweeps, `query` and
// `export` name. nullopt when no candidate succeeded. Returns an index into `data.results`.
[[nodiscard]] std::optional<std::size_t> job_winner(const JobData& data);

// The page's data for the jobs, everything the charts draw already computed (the page only
// draws): per job "job" (the header fields and "timing"), "winner" (or null), "progress"
// (per evaluation in insertion order: "status", "median_ms" (null unless ok), "best_ms" (the
// lowest ok median so far, null before the first)), "histogram" ("edges", "measured", "pruned"
// counts of ok medians, "log" when the bins are log-spaced), "sensitivity" (per parameter in
// config order: each value with the median of its ok medians, its ok and failed counts; values
// sorted numerically when all are numbers, with "best_ms", the lowest of its ok medians),
// "heatmap" (the best ok median per pair of values of the two parameters with the most values,
// "cells" by row ("y_values") then column ("x_values"); null with fewer than two such
// parameters), "statuses" (count per status, ok first, then the failures in the order of
// core/status.hpp, only those that occurred) and "failures" (every result whose status is not
// ok, in insertion order: its result id, config, status, reason, log excerpt and the
// `ktune repro <id> -o repro-<id>` command line that rebuilds it).
// `written_at_ms` is the Unix time written into the page.
[[nodiscard]] nlohmann::ordered_json report_data(const std::vector<JobData>& jobs,
                                                 std::int64_t written_at_ms);

// The histogram bins for positive times: log-spaced when max/min > 20, else linear; the bin
// count follows Freedman-Diaconis on that scale (Sturges' rule when the IQR is 0), 5..40.
// `pruned[i]` says whether times_ms[i] was pruned (missing = not). Exposed for tests.
struct Histogram {
  std::vector<double> edges;                 // bins + 1 edges, increasing
  std::vector<std::int64_t> measured, pruned;
  bool log = false;
};
[[nodiscard]] Histogram histogram(const std::vector<double>& times_ms,
                                  const std::vector<bool>& pruned);

// The full HTML page for `data` (from report_data), with Chart.js inlined. Text inside the data
// cannot close the script element holding it ("<" is written as \u003c). Throws std::logic_error
// only when the compiled-in template lacks its two slots (a build mistake, caught by the tests).
[[nodiscard]] std::string render_html(const nlohmann::ordered_json& data);

// The version of the embedded Chart.js (from its package.json at build time).
[[nodiscard]] std::string_view chart_library_version();

} // namespace ktune::report
