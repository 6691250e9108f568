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

std::string xml_escape(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') out += ' ';
        else out += static_cast<char>(c);
    }
  }
  return out;
}

std::string status_of(const KeyComparison& k) {
  if (k.presence == Presence::current_only) return "new";
  if (k.presence == Presence::baseline_only) return "missing";
  if (k.regressed) return "REGRESSED";
  if (k.improved) return "improved";
  return "ok";
}

// Why a key regressed (or not), one line.
std::string explanation(const KeyComparison& k, double max_regression) {
  if (k.presence == Presence::current_only) return "only in the current table";
  if (k.presence == Presence::baseline_only) return "only in the baseline";
  if (!k.ratio) return "baseline median is 0: no ratio";
  std::string text = "current " + ms_text(k.current->median_ms) + " ms vs baseline " +
                     ms_text(k.baseline->median_ms) + " ms: ratio " + fixed(*k.ratio, 3) +
                     " (limit " + fixed(1 + max_regression, 3) + ")";
  if (k.noise_checked) {
    text += k.intervals_overlap ? ", 95% intervals overlap" : ", 95% intervals apart";
    text += " [" + ms_text(k.current_ci->low) + ", " + ms_text(k.current_ci->high) + "] vs [" +
            ms_text(k.baseline_ci->low) + ", " + ms_text(k.baseline_ci->high) + "]";
  } else {
    text += ", no statistics: ratio alone";
  }
  if (k.winner_changed) text += "; winner changed";
  return text;
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

std::size_t Comparison::regressions() const {
  return static_cast<std::size_t>(
      std::count_if(keys.begin(), keys.end(), [](const KeyComparison& k) { return k.regressed; }));
}

std::size_t Comparison::count(Presence presence) const {
  return static_cast<std::size_t>(std::count_if(
      keys.begin(), keys.end(), [&](const KeyComparison& k) { return k.presence == presence; }));
}

double t_quantile_975(std::size_t degrees) {
  static constexpr std::array<double, 30> k_table{
      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (degrees == 0) degrees = 1;
  if (degrees <= k_table.size()) return k_table[degrees - 1];
  // Between the tabulated points the larger (earlier) quantile is used: never too narrow.
  if (degrees <= 40) return 2.042;
  if (degrees <= 60) return 2.021;
  if (degrees <= 120) return 2.000;
  return 1.980;
}

std::optional<Interval> confidence_interval(const TableRow& row) {
  if (row.stats.n < 2) return std::nullopt;
  const double n = static_cast<double>(row.stats.n);
  const double half = t_quantile_975(row.stats.n - 1) * row.stats.stddev_ms / std::sqrt(n);
  return Interval{row.median_ms - half, row.median_ms + half};
}

Comparison compare(const Table& current, const Table& baseline, double max_regression) {
  Comparison out;
  out.max_regression = max_regression;
  auto c = current.rows.begin();
  auto b = baseline.rows.begin();
  while (c != current.rows.end() || b != baseline.rows.end()) {
    KeyComparison k;
    if (b == baseline.rows.end() || (c != current.rows.end() && c->key() < b->key())) {
      k.key = c->key();
      k.presence = Presence::current_only;
      k.current = *c++;
    } else if (c == current.rows.end() || b->key() < c->key()) {
      k.key = b->key();
      k.presence = Presence::baseline_only;
      k.baseline = *b++;
    } else {
      k.key = c->key();
      k.presence = Presence::both;
      k.current = *c++;
      k.baseline = *b++;
      k.winner_changed = !same_config(k.current->config, k.baseline->config);
      if (k.baseline->median_ms > 0) k.ratio = k.current->median_ms / k.baseline->median_ms;
      k.current_ci = confidence_interval(*k.current);
      k.baseline_ci = confidence_interval(*k.baseline);
      k.noise_checked = k.current_ci && k.baseline_ci;
      if (k.noise_checked) {
        k.intervals_overlap = k.current_ci->low <= k.baseline_ci->high &&
                              k.baseline_ci->low <= k.current_ci->high;
      }
      const bool apart = !k.noise_checked || !k.intervals_overlap;
      if (k.ratio) {
        k.regressed = *k.ratio > 1 + max_regression && apart;
        k.improved = *k.ratio < 1 - max_regression && apart;
      }
    }
    out.keys.push_back(std::move(k));
  }
  return out;
}

std::string render_markdown(const Comparison& comparison) {
  std::string out = "## ktune baseline comparison\n\n";
  out += std::to_string(comparison.keys.size()) + " key(s): " +
         std::to_string(comparison.count(Presence::both)) + " in both, " +
         std::to_string(comparison.count(Presence::current_only)) + " only current, " +
         std::to_string(comparison.count(Presence::baseline_only)) + " only baseline; **" +
         std::to_string(comparison.regressions()) + " regressed** (limit +" +
         percent(comparison.max_regression) + ", outside the 95% intervals).\n\n";
  out += "| status | kernel | shape | dtype | device | current ms | baseline ms | ratio | winner |\n";
  out += "|---|---|---|---|---|---:|---:|---:|---|\n";
  std::vector<const KeyComparison*> order;
  for (const auto& k : comparison.keys) order.push_back(&k);
  std::stable_partition(order.begin(), order.end(),
                        [](const KeyComparison* k) { return k->regressed; });
  for (const KeyComparison* k : order) {
    const std::string winner = k->presence != Presence::both ? "-"
                               : k->winner_changed
                                   ? "changed: " + k->baseline->config_text() + " -> " +
                                         k->current->config_text()
                                   : "same";
    out += "| " + status_of(*k) + " | " + markdown_cell(k->key.kernel) + " | " +
           markdown_cell(k->key.shape) + " | " + markdown_cell(k->key.dtype) + " | " +
           markdown_cell(device_label(*k)) + " | " +
           (k->current ? ms_text(k->current->median_ms) : "-") + " | " +
           (k->baseline ? ms_text(k->baseline->median_ms) : "-") + " | " +
           (k->ratio ? fixed(*k->ratio, 3) : "-") + " | " + markdown_cell(winner) + " |\n";
  }
  return out;
}

std::string render_junit(const Comparison& comparison, std::string_view suite_name) {
  const std::size_t tests = comparison.keys.size();
  const std::size_t failures = comparison.regressions();
  const std::size_t skipped = tests - comparison.count(Presence::both);
  const std::string counts = " tests=\"" + std::to_string(tests) + "\" failures=\"" +
                             std::to_string(failures) + "\" errors=\"0\"";
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites name=\"ktune\"" + counts + ">\n";
  out += "  <testsuite name=\"" + xml_escape(suite_name) + "\"" + counts + " skipped=\"" +
         std::to_string(skipped) + "\">\n";
  for (const auto& k : comparison.keys) {
    const std::string name = k.key.kernel + " " + k.key.shape + " " + k.key.dtype + " " +
                             device_label(k) + " source " + k.key.source_hash.substr(0, 12);
    out += "    <testcase classname=\"" + xml_escape(std::string(suite_name) + "." + k.key.kernel) +
           "\" name=\"" + xml_escape(name) + "\" time=\"0\">\n";
    const std::string why = explanation(k, comparison.max_regression);
    if (k.regressed) {
      out += "      <failure type=\"regression\" message=\"" +
             xml_escape("regressed: ratio " + fixed(*k.ratio, 3) + " > " +
                        fixed(1 + comparison.max_regression, 3)) +
             "\">" + xml_escape(why) + "</failure>\n";
    } else if (k.presence != Presence::both) {
      out += "      <skipped message=\"" + xml_escape(why) + "\"/>\n";
    } else {
      out += "      <system-out>" + xml_escape(why) + "</system-out>\n";
    }
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

} // namespace ktune::tableio
