#pragma once
// The one comparison rule of ktune: a table of winners against a baseline, key by key. Used by
// `ktune sweep --baseline`, `ktune compare` and the merge step of a sharded sweep.
//
// Per key: present in both or in one only, whether the winning config changed, the ratio
// current/baseline of the medians with its 95% interval, and a verdict:
//   - both rows carry samples (>= k_min_samples each): the rank rule. A Mann-Whitney U test on
//     the two sides' samples gives a p-value; the key regressed when p < alpha and the ratio of
//     the sample medians > 1 + min_effect, improved under the mirror condition (ratio <
//     1 / (1 + min_effect)), else same. The ratio interval comes from the order-statistics 95%
//     intervals of the two medians: [current low / baseline high, current high / baseline low].
//   - both carry samples but one has fewer than k_min_samples: unknown (too few samples).
//   - a side has no samples (a table from before samples were kept): the interval rule, said so
//     in `method`. Each row's median gets a 95% interval -- from its quartiles when known
//     (median -+ 1.58 IQR / sqrt(n), the boxplot notch: robust to outliers), else Student's t on
//     its stddev -- and the key regressed when the ratio > 1 + min_effect and the intervals do
//     not overlap (mirror for improved). Rows without statistics: the ratio alone decides.
//   - no ratio (a baseline median of 0): unknown.
//
// Against history (`--baseline last-good`: compare_with_history) the baseline is several earlier
// runs of the key, so the noise between runs -- which on a busy machine far exceeds the noise
// within one run's samples -- is part of the judgement. The ratio is current / the median of the
// baseline runs' medians. With at least k_min_history_runs runs: regressed when the current
// median is above every baseline run's median (outside the spread between runs), the ratio
// exceeds 1 + min_effect, AND (where both sides kept samples) the Mann-Whitney U test of the
// current samples against the baseline runs' pooled samples gives p < alpha; improved under the
// mirror condition (below every run, ratio < 1 / (1 + min_effect)); else same. Fewer runs: unknown.
//
// A/B confirmation (`ktune sweep`, `ktune compare` with a ktuned): whatever rule judged a key, a
// key that looks changed (needs_confirmation) is measured again as an A/B -- the baseline's build
// and the current one interleaved in one worker (daemon/ab_service.hpp) -- and apply_ab() makes
// that measurement's verdict the key's: regressed, improved, same, or ambiguous (the A/B's spread
// overlaps the minimum effect, the old build is gone, the canary moved with nothing to pair it).
// The rules above only select what to confirm.
#include "tableio/canary.hpp"
#include "tableio/junit.hpp"
#include "tableio/table.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

enum class Presence { both, current_only, baseline_only };
[[nodiscard]] std::string_view to_string(Presence presence);

// ambiguous: an A/B could not decide, or could not run (KeyComparison::ab says why); unknown: too
// little to compare with (one side only, too few samples or earlier runs).
enum class Verdict { regressed, improved, same, ambiguous, unknown };
[[nodiscard]] std::string_view to_string(Verdict verdict);

// Which rule gave a key's verdict.
enum class Method {
  rank_test,   // samples on both sides
  interval,    // a side without samples: intervals from the stored statistics
  ratio_only,  // a side without samples or statistics
  none,        // one side only, too few samples or earlier runs, or no ratio
  history,     // against the spread of several earlier runs (compare_with_history)
};
[[nodiscard]] std::string_view to_string(Method method);

// Samples each side needs for the rank rule.
inline constexpr std::size_t k_min_samples = 5;

struct CompareOptions {
  double min_effect = 0.05;  // the smallest slowdown (or speed-up) that counts, e.g. 0.05 for 5%
  double alpha = 0.01;       // the rank test's significance level
};

struct Interval {
  double low = 0, high = 0;
};

// The A/B measurement that decided a key (the daemon's confirm op, docs/protocol.md).
struct AbFigures {
  Verdict verdict = Verdict::ambiguous;  // regressed, improved, same or ambiguous
  std::optional<double> ratio;           // current / baseline over the rounds (Hodges-Lehmann)
  std::optional<Interval> ratio_ci;      // its 95% interval (signed-rank)
  std::size_t rounds = 0;
  std::optional<double> baseline_ms, current_ms; // the medians of each side's round medians
  std::string baseline_build, current_build;     // "current" or "archived" source
  std::string why;                       // what decided, or why it could not run
  bool measured = false;                 // false: the A/B could not run (why says why)
  // Tonight's winner is another config than the baseline's and the A/B of the two winners found
  // it slower, while at the baseline's config the current source is not (or is the same build):
  // tonight's tuning chose a slower config; the kernel is not slower (cli/ab_confirm.hpp).
  bool winner_slower = false;
  // The A/B of the two winners' ratio when the verdict is not theirs: winner_slower, or a second
  // A/B at the baseline's config decided (its figures are then the ones above).
  std::optional<double> winners_ratio;
};

struct KeyComparison {
  RowKey key;
  Presence presence = Presence::both;
  std::optional<TableRow> current, baseline;
  bool winner_changed = false;          // both present and the configs differ
  Verdict verdict = Verdict::unknown;   // same for a key on one side only is not given: unknown
  Method method = Method::none;
  std::optional<double> ratio;          // current / baseline median; both present, baseline > 0
  std::optional<Interval> ratio_ci;     // its 95% interval, when both medians have one
  std::optional<double> p_value;        // the rank test's, Method::rank_test only
  std::optional<Interval> current_ci, baseline_ci; // 95% intervals of the two medians (ms)
  std::size_t current_samples = 0, baseline_samples = 0;
  // Method::history (and a history comparison left unknown): the earlier runs compared with and
  // the range of their medians (ms).
  std::size_t baseline_runs = 0;
  std::optional<Interval> baseline_range;
  // The stored results compared (history: the current job's winner and the last baseline run's),
  // which an A/B measures again; nullopt for rows of table files (their source hash and config
  // name the builds instead).
  std::optional<std::int64_t> current_result, baseline_result;
  // History: the current run's source hash is not the last baseline run's (the kernel changed).
  bool source_changed = false;
  // ratio / the machine's factor (tableio/canary.hpp), when the device's canary is known.
  std::optional<double> normalized_ratio;
  // Set by apply_ab(): the A/B that gave `verdict`.
  std::optional<AbFigures> ab;

  [[nodiscard]] bool regressed() const { return verdict == Verdict::regressed; }
  [[nodiscard]] bool improved() const { return verdict == Verdict::improved; }
};

struct Comparison {
  CompareOptions options;
  std::vector<KeyComparison> keys;      // in key order
  std::vector<MachineMove> machines;    // what the canary says of each device (may be empty)

  [[nodiscard]] std::size_t regressions() const;
  [[nodiscard]] std::size_t count(Presence presence) const;
  [[nodiscard]] std::size_t count(Verdict verdict) const; // keys in both tables only
};

// One finished run of a key in the store's history (a job that ended done): the measurement of
// the winner the job named (db/job_winner.hpp's job_winner).
struct RunPoint {
  std::int64_t job_id = 0;
  std::int64_t result_id = 0;         // the winner's row
  std::int64_t started_at_ms = 0;
  std::int64_t finished_at_ms = 0;
  std::string source_hash;
  std::string config;                 // canonical JSON text
  double median_ms = 0;
  std::vector<float> samples_ms;      // empty when none were kept
};

// Earlier runs a history baseline holds, and the fewest it needs for a verdict.
inline constexpr std::size_t k_history_runs = 5;
inline constexpr std::size_t k_min_history_runs = 3;

// The two-sided 95% Student t quantile for `degrees` of freedom (>= 1): core/stats.hpp's
// t_quantile(0.975, degrees).
[[nodiscard]] double t_quantile_975(std::size_t degrees);
// The 95% interval of a row's median: from its samples (order statistics) when it has at least
// k_min_samples, else from its statistics (quartiles, else Student's t); nullopt when it has
// neither samples nor n >= 2.
[[nodiscard]] std::optional<Interval> confidence_interval(const TableRow& row);

// One key in both tables, by the rule above.
[[nodiscard]] KeyComparison compare_rows(const TableRow& current, const TableRow& baseline,
                                         const CompareOptions& options);

// The run `current` of the key of `row` (which gives the comparison its key, device and
// provenance; its median, samples and config are replaced by current's) against `baseline`,
// earlier runs of the same key, by the history rule above.
[[nodiscard]] KeyComparison compare_with_history(const TableRow& row, const RunPoint& current,
                                                 const std::vector<RunPoint>& baseline,
                                                 const CompareOptions& options);

// The last-good runs of a history: `series` holds a key's runs oldest first; a run is good when
// fewer than k_min_history_runs good runs precede it or it is not regressed against the last
// `runs` good runs before it (so a regression stays out of every later baseline, and keeps
// failing until the time comes back). Returns the indices of the last `runs` good runs, oldest
// first.
[[nodiscard]] std::vector<std::size_t> last_good_runs(const std::vector<RunPoint>& series,
                                                      const CompareOptions& options,
                                                      std::size_t runs = k_history_runs);

// Whether a key in both tables looks changed enough to be confirmed by an A/B: its kernel's source
// changed since the baseline run (a changed kernel is what a nightly judges), its rule said
// regressed or improved, or its ratio -- raw, or normalised by the machine's canary -- is beyond
// the minimum effect either way.
[[nodiscard]] bool needs_confirmation(const KeyComparison& key, const CompareOptions& options);

// Makes `ab` the key's verdict (the figures of the rule that selected it stay for the report).
void apply_ab(KeyComparison& key, AbFigures ab);

// Where tonight's winner is another config than the baseline's, the A/B of the two winners
// (key.ab) measures the configs as much as the builds; what then tells them apart:
enum class WinnerCheck {
  none,                // the winner is the baseline's, or the winners' A/B did not run
  same_source,         // one source and the winners' A/B regressed: settle_same_source()
  at_baseline_config,  // the source changed: an A/B at the baseline's config, apply_config_ab()
};
[[nodiscard]] WinnerCheck winner_check(const KeyComparison& key);

// One source: at the baseline's config tonight's build is the baseline's, so what the winners'
// A/B found slower is the config tonight's tuning chose (a busy machine, a near tie), not the
// kernel: verdict same, winner_slower, the winners' figures kept.
void settle_same_source(KeyComparison& key);

// The source changed and `at_config` is the A/B of the baseline's build against the current
// source at the baseline's config. It decides when it is ambiguous, when the winners' A/B found
// no regression and it does (a slower source hidden by tonight's better config), and when the
// winners' A/B was regressed and it is not (same or improved: winner_slower, tonight's tuning
// chose a slower config); then it is key.ab, its why naming both A/Bs, and this returns true.
// Otherwise (it agrees, or it could not run) the winners' verdict stands, its why saying what
// the A/B at the baseline's config found.
bool apply_config_ab(KeyComparison& key, AbFigures at_config);

// Sets each key's normalized_ratio from its device's factor in `comparison.machines`.
void normalize(Comparison& comparison);

// Without A/B measurements (`--no-confirm`): a key its rule found regressed or improved on a
// device whose canary moved (against the baseline, or during this run) beyond the minimum effect,
// by enough to account for the key's ratio (the ratio less the machine's largest move in that
// direction is within the minimum effect), is ambiguous, saying how the machine moved. A key
// that moved well beyond what the machine did keeps its verdict. Returns how many.
std::size_t distrust_moved_machines(Comparison& comparison);

// Both tables normalized. options.min_effect >= 0, 0 < options.alpha < 1.
[[nodiscard]] Comparison compare(const Table& current, const Table& baseline,
                                 const CompareOptions& options);

// A markdown report: a summary line and one table row per key, regressions first.
[[nodiscard]] std::string render_markdown(const Comparison& comparison);
// How JUnit reports an ambiguous key: skipped (the default: not a failure) or a failure
// (`--strict`).
enum class AmbiguousIs { skipped, failure };

// JUnit XML: one <testcase> per key; a regression is a <failure>, an ambiguous key <skipped>
// (or a <failure type="ambiguous">), a key in one table only is <skipped>; every testcase says
// the verdict, the method, ratio, interval and p-value, and the A/B's figures.
[[nodiscard]] std::string render_junit(const Comparison& comparison,
                                       std::string_view suite_name = "ktune.baseline",
                                       AmbiguousIs ambiguous = AmbiguousIs::skipped);
// JUnit XML of a run without a baseline: one passing <testcase> per row, saying its median and
// winner (CI systems that expect the file get it on every run).
[[nodiscard]] std::string render_junit(const Table& table, std::string_view suite_name);

// The same reports as suites of a larger JUnit document (tableio/junit.hpp).
[[nodiscard]] JunitSuite junit_suite(const Comparison& comparison, std::string_view suite_name,
                                     AmbiguousIs ambiguous = AmbiguousIs::skipped);
[[nodiscard]] JunitSuite junit_suite(const Table& table, std::string_view suite_name);

} // namespace ktune::tableio
