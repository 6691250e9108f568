#include "core/ab_judge.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ktune {
namespace {

// The largest k with P(T <= k) <= tail under the null distribution of the Wilcoxon signed-rank
// statistic T of n values (every subset of the ranks 1..n equally likely), or -1 when even
// P(T = 0) = 2^-n exceeds it. Counts by dynamic programming over the ranks, in doubles: exact
// well beyond the few dozen rounds an A/B measures.
long signed_rank_critical(std::size_t n, double tail) {
  const std::size_t max_sum = n * (n + 1) / 2;
  std::vector<double> ways(max_sum + 1, 0.0);
  ways[0] = 1;
  for (std::size_t rank = 1; rank <= n; ++rank) {
    for (std::size_t s = max_sum; s >= rank; --s) ways[s] += ways[s - rank];
  }
  const double total = std::ldexp(1.0, static_cast<int>(n));
  double below = 0;
  long k = -1;
  for (std::size_t s = 0; s <= max_sum; ++s) {
    below += ways[s];
    if (below / total > tail) break;
    k = static_cast<long>(s);
  }
  return k;
}

std::string percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (ratio - 1.0) * 100.0);
  return buf;
}

std::string fixed3(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", value);
  return buf;
}

} // namespace

std::string_view to_string(AbVerdict verdict) {
  switch (verdict) {
    case AbVerdict::regressed: return "regressed";
    case AbVerdict::improved: return "improved";
    case AbVerdict::same: return "same";
    case AbVerdict::ambiguous: return "ambiguous";
  }
  return "ambiguous";
}

HodgesLehmann hodges_lehmann(const std::vector<double>& values) {
  HodgesLehmann out;
  const std::size_t n = values.size();
  if (n == 0) return out;
  std::vector<double> walsh;
  walsh.reserve(n * (n + 1) / 2);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i; j < n; ++j) walsh.push_back((values[i] + values[j]) / 2.0);
  }
  std::sort(walsh.begin(), walsh.end());
  const std::size_t m = walsh.size();
  out.estimate = m % 2 == 1 ? walsh[m / 2] : (walsh[m / 2 - 1] + walsh[m / 2]) / 2.0;
  const long k = std::max(0L, signed_rank_critical(n, 0.025));
  out.low = walsh[static_cast<std::size_t>(k)];
  out.high = walsh[m - 1 - static_cast<std::size_t>(k)];
  return out;
}

AbJudgement judge_ab(const std::vector<double>& baseline_ms, const std::vector<double>& candidate_ms,
                     double min_effect) {
  AbJudgement out;
  std::vector<double> logs;
  const std::size_t rounds = std::min(baseline_ms.size(), candidate_ms.size());
  for (std::size_t r = 0; r < rounds; ++r) {
    if (!(baseline_ms[r] > 0) || !(candidate_ms[r] > 0)) continue;
    logs.push_back(std::log(candidate_ms[r] / baseline_ms[r]));
    if (candidate_ms[r] > baseline_ms[r]) ++out.slower_rounds;
  }
  out.rounds = logs.size();
  if (logs.empty()) {
    out.why = "no round measured both sides";
    return out;
  }
  const HodgesLehmann hl = hodges_lehmann(logs);
  out.ratio = std::exp(hl.estimate);
  out.ratio_low = std::exp(hl.low);
  out.ratio_high = std::exp(hl.high);
  const std::string figures = "A/B ratio " + fixed3(out.ratio) + " [" + fixed3(out.ratio_low) +
                              ", " + fixed3(out.ratio_high) + "] over " +
                              std::to_string(out.rounds) + " interleaved rounds (" +
                              std::to_string(out.slower_rounds) + " slower)";
  const std::string effect = "minimum effect " + percent(1.0 + min_effect);
  if (out.rounds < k_min_ab_rounds) {
    out.why = figures + ": too few rounds for a verdict (need " + std::to_string(k_min_ab_rounds) + ")";
    return out;
  }
  const double limit = std::log1p(min_effect);
  if (hl.low > 0 && hl.estimate > limit) {
    out.verdict = AbVerdict::regressed;
    out.why = figures + ": slower by " + percent(out.ratio) + ", beyond the " + effect;
  } else if (hl.high < 0 && hl.estimate < -limit) {
    out.verdict = AbVerdict::improved;
    out.why = figures + ": faster by " + percent(out.ratio) + ", beyond the " + effect;
  } else if (hl.low > -limit && hl.high < limit) {
    out.verdict = AbVerdict::same;
    out.why = figures + ": within the " + effect;
  } else {
    out.why = figures + ": the A/B spread overlaps the " + effect;
  }
  return out;
}

} // namespace ktune
