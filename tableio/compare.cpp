#include "tableio/compare.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace ktune::tableio {

namespace {

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string ms_text(double ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", ms);
  return buf;
}

std::string percent(double fraction) { return fixed(fraction * 100.0, 1) + "%"; }

std::string device_label(const KeyComparison& k) {
  const TableRow& row = k.current ? *k.current : *k.baseline;
  std::string fp = row.fingerprint.substr(0, 12);
  return row.device_name.empty() ? fp : row.device_name + " (" + fp + ")";
}

std::string markdown_cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

std::string status_of(const KeyComparison& k) {
  if (k.presence == Presence::current_only) return "new";
  if (k.presence == Presence::baseline_only) return "missing";
  switch (k.verdict) {
    case Verdict::regressed: return "REGRESSED";
    case Verdict::improved: return "improved";
    case Verdict::same: return "same";
    case Verdict::ambiguous: return "ambiguous";
    case Verdict::unknown: return "unknown";
  }
  return "unknown";
}

std::string interval_text(const Interval& interval, int decimals) {
  return "[" + fixed(interval.low, decimals) + ", " + fixed(interval.high, decimals) + "]";
}

std::string ms_interval_text(const Interval& interval) {
  return "[" + ms_text(interval.low) + ", " + ms_text(interval.high) + "]";
}

std::string p_text(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, p < 0.001 ? "%.1e" : "%.3f", p);
  return buf;
}

// Why a key got its verdict, one line.
std::string explanation(const KeyComparison& k, const CompareOptions& options) {
  if (k.presence == Presence::current_only) return "only in the current table";
  if (k.presence == Presence::baseline_only) return "only in the baseline";
  if (k.method == Method::none && k.baseline_runs < k_min_history_runs && k.baseline_range) {
    return std::to_string(k.baseline_runs) + " earlier good run(s) of the key, need " +
           std::to_string(k_min_history_runs);
  }
  if (!k.ratio) return "baseline median is 0: no ratio";
  std::string text = "current " + ms_text(k.current->median_ms) + " ms vs baseline " +
                     ms_text(k.baseline->median_ms) + " ms: ratio " + fixed(*k.ratio, 3);
  if (k.ratio_ci) text += " " + interval_text(*k.ratio_ci, 3);
  text += " (min effect " + percent(options.min_effect) + ")";
  switch (k.method) {
    case Method::rank_test:
      text += ", Mann-Whitney p " + p_text(*k.p_value) + " (alpha " + p_text(options.alpha) +
              ") on " + std::to_string(k.current_samples) + " vs " +
              std::to_string(k.baseline_samples) + " samples";
      break;
    case Method::interval:
      text += ", no samples on " +
              std::string(k.current_samples == 0 ? "the current side" : "the baseline side") +
              ": 95% intervals of the medians " + ms_interval_text(*k.current_ci) + " vs " +
              ms_interval_text(*k.baseline_ci);
      break;
    case Method::ratio_only: text += ", no samples or statistics: ratio alone"; break;
    case Method::history:
      text += ", baseline the median of the last " + std::to_string(k.baseline_runs) +
              " good runs, whose medians span " + ms_interval_text(*k.baseline_range) + " ms";
      if (k.p_value) {
        text += ", Mann-Whitney p " + p_text(*k.p_value) + " (alpha " + p_text(options.alpha) +
                ") on " + std::to_string(k.current_samples) + " vs " +
                std::to_string(k.baseline_samples) + " pooled samples";
      } else {
        text += ", no rank test (samples missing on a side)";
      }
      break;
    case Method::none:
      text += ", too few samples (" + std::to_string(k.current_samples) + " vs " +
              std::to_string(k.baseline_samples) + ", need " + std::to_string(k_min_samples) + ")";
      break;
  }
  if (k.winner_changed) text += "; winner changed";
  if (k.normalized_ratio) text += "; normalised by the machine's canary " + fixed(*k.normalized_ratio, 3);
  return text;
}

// The A/B part of a key's explanation; "" without one.
std::string ab_text(const KeyComparison& k) {
  if (!k.ab) return {};
  const AbFigures& ab = *k.ab;
  if (!ab.measured) return "A/B not measured: " + ab.why;
  std::string text = "A/B " + std::string(to_string(ab.verdict)) + ": " + ab.why;
  if (ab.baseline_ms && ab.current_ms) {
    text += " (baseline " + ms_text(*ab.baseline_ms) + " ms, " + ab.baseline_build + " source; current " +
            ms_text(*ab.current_ms) + " ms, " + ab.current_build + " source)";
  }
  return text;
}

// The whole explanation: what selected the key, then what decided it.
std::string full_explanation(const KeyComparison& k, const CompareOptions& options) {
  const std::string selected = explanation(k, options);
  if (!k.ab) return selected;
  return ab_text(k) + "; selected by: " + selected;
}

std::vector<double> widened(const std::vector<float>& samples) {
  return {samples.begin(), samples.end()};
}

double median_of(std::vector<double> samples) { return summarize(std::move(samples)).median_ms; }

// The interval of a median from stored statistics: the boxplot notch when the quartiles are
// known, else Student's t on the stddev; nullopt when n < 2.
std::optional<Interval> interval_from_stats(const TableRow& row) {
  if (row.stats.n < 2) return std::nullopt;
  const double n = static_cast<double>(row.stats.n);
  if (row.stats.q3_ms > row.stats.q1_ms) {
    const double half = 1.58 * (row.stats.q3_ms - row.stats.q1_ms) / std::sqrt(n);
    return Interval{row.median_ms - half, row.median_ms + half};
  }
  const double half = t_quantile_975(row.stats.n - 1) * row.stats.stddev_ms / std::sqrt(n);
  return Interval{row.median_ms - half, row.median_ms + half};
}

} // namespace

std::string_view to_string(Presence presence) {
  switch (presence) {
    case Presence::both: return "both";
    case Presence::current_only: return "current_only";
    case Presence::baseline_only: return "baseline_only";
  }
  return "unknown";
}

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::regressed: return "regressed";
    case Verdict::improved: return "improved";
    case Verdict::same: return "same";
    case Verdict::ambiguous: return "ambiguous";
    case Verdict::unknown: return "unknown";
  }
  return "unknown";
}

std::string_view to_string(Method method) {
  switch (method) {
    case Method::rank_test: return "rank_test";
    case Method::interval: return "interval";
    case Method::ratio_only: return "ratio_only";
    case Method::none: return "none";
    case Method::history: return "history";
  }
  return "none";
}

std::size_t Comparison::regressions() const { return count(Verdict::regressed); }

std::size_t Comparison::count(Verdict verdict) const {
  return static_cast<std::size_t>(std::count_if(keys.begin(), keys.end(), [&](const KeyComparison& k) {
    return k.presence == Presence::both && k.verdict == verdict;
  }));
}

std::size_t Comparison::count(Presence presence) const {
  return static_cast<std::size_t>(std::count_if(
      keys.begin(), keys.end(), [&](const KeyComparison& k) { return k.presence == presence; }));
}

double t_quantile_975(std::size_t degrees) { return t_quantile(0.975, degrees); }

std::optional<Interval> confidence_interval(const TableRow& row) {
  if (row.samples_ms.size() >= k_min_samples) {
    const MedianInterval m = median_interval(widened(row.samples_ms));
    return Interval{m.low_ms, m.high_ms};
  }
  return interval_from_stats(row);
}

KeyComparison compare_rows(const TableRow& current, const TableRow& baseline,
                           const CompareOptions& options) {
  KeyComparison k;
  k.key = current.key();
  k.presence = Presence::both;
  k.current = current;
  k.baseline = baseline;
  k.winner_changed = !same_config(current.config, baseline.config);
  k.current_samples = current.samples_ms.size();
  k.baseline_samples = baseline.samples_ms.size();
  const bool both_sampled = k.current_samples > 0 && k.baseline_samples > 0;
  // With samples on both sides the medians compared are the samples' own.
  const double current_ms = both_sampled ? median_of(widened(current.samples_ms)) : current.median_ms;
  const double baseline_ms = both_sampled ? median_of(widened(baseline.samples_ms)) : baseline.median_ms;
  if (baseline_ms > 0) k.ratio = current_ms / baseline_ms;
  k.current_ci = confidence_interval(current);
  k.baseline_ci = confidence_interval(baseline);
  if (k.ratio && k.current_ci && k.baseline_ci && k.baseline_ci->low > 0) {
    k.ratio_ci = Interval{k.current_ci->low / k.baseline_ci->high,
                          k.current_ci->high / k.baseline_ci->low};
  }
  if (!k.ratio) return k; // unknown, Method::none
  const bool slower = *k.ratio > 1 + options.min_effect;
  const bool faster = *k.ratio < 1 / (1 + options.min_effect);
  if (both_sampled) {
    if (k.current_samples < k_min_samples || k.baseline_samples < k_min_samples) return k;
    k.method = Method::rank_test;
    k.p_value = mann_whitney(widened(current.samples_ms), widened(baseline.samples_ms)).p_value;
    const bool significant = *k.p_value < options.alpha;
    k.verdict = significant && slower   ? Verdict::regressed
                : significant && faster ? Verdict::improved
                                        : Verdict::same;
    return k;
  }
  const auto current_stats = interval_from_stats(current);
  const auto baseline_stats = interval_from_stats(baseline);
  bool apart = true;
  if (current_stats && baseline_stats) {
    k.method = Method::interval;
    k.current_ci = current_stats;
    k.baseline_ci = baseline_stats;
    apart = current_stats->low > baseline_stats->high || baseline_stats->low > current_stats->high;
  } else {
    k.method = Method::ratio_only;
  }
  k.verdict = slower && apart ? Verdict::regressed : faster && apart ? Verdict::improved : Verdict::same;
  return k;
}

KeyComparison compare_with_history(const TableRow& row, const RunPoint& current,
                                   const std::vector<RunPoint>& baseline,
                                   const CompareOptions& options) {
  KeyComparison k;
  k.key = row.key();
  k.presence = Presence::both;
  TableRow now = row;
  now.median_ms = current.median_ms;
  now.samples_ms = current.samples_ms;
  now.config = nlohmann::ordered_json::parse(current.config, nullptr, false);
  if (now.config.is_discarded()) now.config = row.config;
  k.current_samples = now.samples_ms.size();
  k.current_ci = confidence_interval(now);
  k.baseline_runs = baseline.size();
  TableRow before = row;
  before.samples_ms.clear();
  before.stats = {};
  before.median_ms = 0;
  k.baseline_range = Interval{0, 0};
  std::vector<double> medians;
  for (const auto& run : baseline) {
    medians.push_back(run.median_ms);
    before.samples_ms.insert(before.samples_ms.end(), run.samples_ms.begin(), run.samples_ms.end());
  }
  k.baseline_samples = before.samples_ms.size();
  if (!baseline.empty()) {
    before.median_ms = median_of(medians);
    before.config = nlohmann::ordered_json::parse(baseline.back().config, nullptr, false);
    if (before.config.is_discarded()) before.config = row.config;
    before.time_ms = baseline.back().finished_at_ms;
    k.baseline_range = Interval{*std::min_element(medians.begin(), medians.end()),
                                *std::max_element(medians.begin(), medians.end())};
    k.winner_changed = !same_config(now.config, before.config);
  }
  k.current = now;
  k.baseline = before;
  if (current.result_id != 0) k.current_result = current.result_id;
  if (!baseline.empty() && baseline.back().result_id != 0) k.baseline_result = baseline.back().result_id;
  k.source_changed = !baseline.empty() && !current.source_hash.empty() &&
                     baseline.back().source_hash != current.source_hash;
  if (baseline.size() < k_min_history_runs || before.median_ms <= 0 || k.baseline_range->low <= 0) {
    return k; // unknown, Method::none
  }
  k.method = Method::history;
  k.ratio = now.median_ms / before.median_ms;
  if (k.current_ci) {
    k.ratio_ci = Interval{k.current_ci->low / k.baseline_range->high,
                          k.current_ci->high / k.baseline_range->low};
  }
  // Outside the spread between runs (slower than every one of them) and by more than the minimum
  // effect (relative to their median run).
  const bool slower = now.median_ms > k.baseline_range->high && *k.ratio > 1 + options.min_effect;
  const bool faster = now.median_ms < k.baseline_range->low && *k.ratio < 1 / (1 + options.min_effect);
  bool significant = true; // without samples on a side the step over every run decides alone
  if (k.current_samples >= k_min_samples && k.baseline_samples >= k_min_samples) {
    k.p_value = mann_whitney(widened(now.samples_ms), widened(before.samples_ms)).p_value;
    significant = *k.p_value < options.alpha;
  }
  k.verdict = significant && slower   ? Verdict::regressed
              : significant && faster ? Verdict::improved
                                      : Verdict::same;
  return k;
}

std::vector<std::size_t> last_good_runs(const std::vector<RunPoint>& series,
                                        const CompareOptions& options, std::size_t runs) {
  std::vector<std::size_t> good;
  std::vector<RunPoint> baseline;
  const TableRow row;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::size_t first = good.size() > runs ? good.size() - runs : 0;
    baseline.clear();
    for (std::size_t g = first; g < good.size(); ++g) baseline.push_back(series[good[g]]);
    if (baseline.size() < k_min_history_runs ||
        !compare_with_history(row, series[i], baseline, options).regressed()) {
      good.push_back(i);
    }
  }
  if (good.size() > runs) good.erase(good.begin(), good.end() - static_cast<std::ptrdiff_t>(runs));
  return good;
}

bool needs_confirmation(const KeyComparison& k, const CompareOptions& options) {
  if (k.presence != Presence::both) return false;
  if (k.source_changed) return true;
  if (k.verdict == Verdict::regressed || k.verdict == Verdict::improved) return true;
  const auto beyond = [&](const std::optional<double>& ratio) {
    return ratio && (*ratio > 1 + options.min_effect || *ratio < 1 / (1 + options.min_effect));
  };
  return beyond(k.ratio) || beyond(k.normalized_ratio);
}

void apply_ab(KeyComparison& k, AbFigures ab) {
  k.verdict = ab.verdict;
  k.ab = std::move(ab);
}

WinnerCheck winner_check(const KeyComparison& k) {
  if (!k.ab || !k.ab->measured || !k.winner_changed || !k.baseline || !k.current) return WinnerCheck::none;
  if (k.source_changed || k.current->source_hash != k.baseline->source_hash) {
    return WinnerCheck::at_baseline_config;
  }
  return k.verdict == Verdict::regressed ? WinnerCheck::same_source : WinnerCheck::none;
}

namespace {

std::string winners_text(const AbFigures& winners) {
  return "tonight's winner against the baseline's: A/B ratio " +
         (winners.ratio ? fixed(*winners.ratio, 3) : std::string("-")) + " (" +
         std::string(to_string(winners.verdict)) + ")";
}

} // namespace

void settle_same_source(KeyComparison& k) {
  AbFigures ab = *k.ab;
  ab.verdict = Verdict::same;
  ab.why = "the source is unchanged, so at the baseline's config tonight's build is the "
           "baseline's; " + winners_text(*k.ab) + ": the config tonight's tuning chose is slower, "
           "not the kernel";
  ab.winner_slower = true;
  ab.winners_ratio = ab.ratio;
  apply_ab(k, std::move(ab));
}

bool apply_config_ab(KeyComparison& k, AbFigures at_config) {
  if (!at_config.measured) return false;
  const std::string at = "at the baseline's config the current source: ";
  const bool hidden = k.verdict != Verdict::regressed;
  const bool decides = at_config.verdict == Verdict::ambiguous ||
                       (hidden ? at_config.verdict == Verdict::regressed
                               : at_config.verdict != Verdict::regressed);
  if (!decides) {
    // It agrees: the winners' verdict stands, and says what the second A/B found.
    k.ab->why += "; " + at + std::string(to_string(at_config.verdict)) + ": " + at_config.why;
    return false;
  }
  at_config.why = at + at_config.why + "; " + winners_text(*k.ab);
  if (!hidden && at_config.verdict != Verdict::ambiguous) {
    at_config.why += ": the config tonight's tuning chose is slower, not the source";
    at_config.winner_slower = true;
  }
  at_config.winners_ratio = k.ab->ratio;
  apply_ab(k, std::move(at_config));
  return true;
}

void normalize(Comparison& comparison) {
  for (auto& k : comparison.keys) {
    k.normalized_ratio.reset();
    if (!k.ratio) continue;
    for (const auto& m : comparison.machines) {
      if (m.fingerprint == k.key.fingerprint && m.factor && *m.factor > 0) {
        k.normalized_ratio = *k.ratio / *m.factor;
      }
    }
  }
}

namespace {

// Whether how `m` moved could account for `k`'s verdict: its ratio, less the machine's largest
// move in the verdict's direction (its factor against the baseline, or its drift during this run
// either way: where in the run the key was measured is not known), within `effect`.
bool machine_explains(const KeyComparison& k, const MachineMove& m, double effect) {
  if (!k.ratio) return true;
  double slower = std::max(1.0, m.factor.value_or(1.0));
  double faster = std::min(1.0, m.factor.value_or(1.0));
  if (m.drift && *m.drift > 0) {
    const double swing = std::max(*m.drift, 1.0 / *m.drift);
    slower = std::max(slower, swing);
    faster = std::min(faster, 1.0 / swing);
  }
  return k.verdict == Verdict::regressed ? *k.ratio / slower <= 1 + effect
                                         : *k.ratio / faster >= 1 / (1 + effect);
}

} // namespace

std::size_t distrust_moved_machines(Comparison& comparison) {
  std::size_t changed = 0;
  const double effect = comparison.options.min_effect;
  for (auto& k : comparison.keys) {
    if (k.ab || (k.verdict != Verdict::regressed && k.verdict != Verdict::improved)) continue;
    for (const auto& m : comparison.machines) {
      if (m.fingerprint != k.key.fingerprint || !(m.moved(effect) || m.drifted(effect))) continue;
      if (!machine_explains(k, m, effect)) continue;
      AbFigures ab;
      ab.why = "no A/B, and " + m.text(effect) + ": the " + std::string(to_string(k.verdict)) +
               " time may be the machine's";
      apply_ab(k, std::move(ab));
      ++changed;
      break;
    }
  }
  return changed;
}

Comparison compare(const Table& current, const Table& baseline, const CompareOptions& options) {
  Comparison out;
  out.options = options;
  auto c = current.rows.begin();
  auto b = baseline.rows.begin();
  while (c != current.rows.end() || b != baseline.rows.end()) {
    if (b == baseline.rows.end() || (c != current.rows.end() && c->key() < b->key())) {
      KeyComparison k;
      k.key = c->key();
      k.presence = Presence::current_only;
      k.current = *c++;
      out.keys.push_back(std::move(k));
    } else if (c == current.rows.end() || b->key() < c->key()) {
      KeyComparison k;
      k.key = b->key();
      k.presence = Presence::baseline_only;
      k.baseline = *b++;
      out.keys.push_back(std::move(k));
    } else {
      out.keys.push_back(compare_rows(*c++, *b++, options));
    }
  }
  return out;
}

std::string render_markdown(const Comparison& comparison) {
  std::string out = "## ktune baseline comparison\n\n";
  out += std::to_string(comparison.keys.size()) + " key(s): " +
         std::to_string(comparison.count(Presence::both)) + " in both, " +
         std::to_string(comparison.count(Presence::current_only)) + " only current, " +
         std::to_string(comparison.count(Presence::baseline_only)) + " only baseline; **" +
         std::to_string(comparison.regressions()) + " regressed**, " +
         std::to_string(comparison.count(Verdict::improved)) + " improved, " +
         std::to_string(comparison.count(Verdict::ambiguous)) + " ambiguous, " +
         std::to_string(comparison.count(Verdict::unknown)) + " unknown (min effect " +
         percent(comparison.options.min_effect) + ", Mann-Whitney alpha " +
         p_text(comparison.options.alpha) + ").\n\n";
  for (const auto& machine : comparison.machines) {
    out += "- " + markdown_cell(machine.text(comparison.options.min_effect)) + "\n";
  }
  if (!comparison.machines.empty()) out += "\n";
  out += "| status | kernel | shape | dtype | device | current ms | baseline ms | ratio | 95% interval | p | method | A/B | winner |\n";
  out += "|---|---|---|---|---|---:|---:|---:|---|---:|---|---|---|\n";
  std::vector<const KeyComparison*> order;
  for (const auto& k : comparison.keys) order.push_back(&k);
  std::stable_partition(order.begin(), order.end(),
                        [](const KeyComparison* k) { return k->regressed(); });
  for (const KeyComparison* k : order) {
    const std::string winner = k->presence != Presence::both ? "-"
                               : k->winner_changed
                                   ? "changed: " + k->baseline->config_text() + " -> " +
                                         k->current->config_text()
                                   : "same";
    std::string ab = "-";
    if (k->ab && k->ab->measured && k->ab->ratio) {
      ab = fixed(*k->ab->ratio, 3) + (k->ab->ratio_ci ? " " + interval_text(*k->ab->ratio_ci, 3) : "") +
           ", " + std::to_string(k->ab->rounds) + " rounds";
    } else if (k->ab) {
      ab = "not measured: " + k->ab->why;
    }
    out += "| " + status_of(*k) + " | " + markdown_cell(k->key.kernel) + " | " +
           markdown_cell(k->key.shape) + " | " + markdown_cell(k->key.dtype) + " | " +
           markdown_cell(device_label(*k)) + " | " +
           (k->current ? ms_text(k->current->median_ms) : "-") + " | " +
           (k->baseline ? ms_text(k->baseline->median_ms) : "-") + " | " +
           (k->ratio ? fixed(*k->ratio, 3) : "-") + " | " +
           (k->ratio_ci ? interval_text(*k->ratio_ci, 3) : "-") + " | " +
           (k->p_value ? p_text(*k->p_value) : "-") + " | " +
           (k->presence == Presence::both ? std::string(to_string(k->method)) : "-") + " | " +
           markdown_cell(ab) + " | " + markdown_cell(winner) + " |\n";
  }
  const auto ambiguous = std::count_if(order.begin(), order.end(), [](const KeyComparison* k) {
    return k->verdict == Verdict::ambiguous;
  });
  if (ambiguous > 0) {
    out += "\nAmbiguous:\n";
    for (const KeyComparison* k : order) {
      if (k->verdict != Verdict::ambiguous) continue;
      out += "- " + markdown_cell(k->key.kernel + " " + k->key.shape + " " + k->key.dtype) + ": " +
             markdown_cell(k->ab ? k->ab->why : std::string("no A/B")) + "\n";
    }
  }
  return out;
}

JunitSuite junit_suite(const Comparison& comparison, std::string_view suite_name,
                       AmbiguousIs ambiguous) {
  std::vector<JunitCase> cases;
  for (const auto& k : comparison.keys) {
    JunitCase c;
    c.classname = std::string(suite_name) + "." + k.key.kernel;
    c.name = k.key.kernel + " " + k.key.shape + " " + k.key.dtype + " " + device_label(k) +
             " source " + k.key.source_hash.substr(0, 12);
    const std::string why = full_explanation(k, comparison.options);
    const auto ratio = k.ab && k.ab->ratio ? k.ab->ratio : k.ratio;
    if (k.regressed()) {
      c.failure_type = "regression";
      c.failure = "regressed: ratio " + fixed(*ratio, 3) +
                  (k.ab ? std::string(" (A/B, ") + std::to_string(k.ab->rounds) + " rounds)"
                        : (k.p_value ? ", p " + p_text(*k.p_value) : std::string()) + " (" +
                              std::string(to_string(k.method)) + ")");
      c.text = why;
    } else if (k.verdict == Verdict::ambiguous && ambiguous == AmbiguousIs::failure) {
      c.failure_type = "ambiguous";
      c.failure = "ambiguous: " + (k.ab ? k.ab->why : std::string("no A/B"));
      c.text = why;
    } else if (k.verdict == Verdict::ambiguous) {
      c.skipped = "ambiguous: " + why;
    } else if (k.presence != Presence::both) {
      c.skipped = why;
    } else {
      c.text = std::string(to_string(k.verdict)) + ": " + why;
    }
    cases.push_back(std::move(c));
  }
  return junit_suite(suite_name, cases);
}

JunitSuite junit_suite(const Table& table, std::string_view suite_name) {
  std::vector<JunitCase> cases;
  for (const auto& row : table.rows) {
    const std::string device = row.device_name.empty()
                                   ? row.fingerprint.substr(0, 12)
                                   : row.device_name + " (" + row.fingerprint.substr(0, 12) + ")";
    cases.push_back({.classname = std::string(suite_name) + "." + row.kernel,
                     .name = row.kernel + " " + row.shape + " " + row.dtype + " " + device +
                             " source " + row.source_hash.substr(0, 12),
                     .text = "tuned, no baseline: median " + ms_text(row.median_ms) + " ms over " +
                             std::to_string(row.samples_ms.size()) + " kept samples, winner " +
                             row.config_text()});
  }
  return junit_suite(suite_name, cases);
}

std::string render_junit(const Comparison& comparison, std::string_view suite_name,
                         AmbiguousIs ambiguous) {
  return render_junit(std::vector<JunitSuite>{junit_suite(comparison, suite_name, ambiguous)});
}

std::string render_junit(const Table& table, std::string_view suite_name) {
  return render_junit(std::vector<JunitSuite>{junit_suite(table, suite_name)});
}

} // namespace ktune::tableio
