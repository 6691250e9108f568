#pragma once
// The verdict on an A/B measurement: a baseline (A) and a candidate (B) measured in the same
// worker, in interleaved rounds (each round one short measurement of each, the order
// alternating), so that whatever the machine does between rounds -- another build starting, a
// clock step -- moves both sides of a round together and cancels out of their ratio.
//
// Per round the log of candidate median / baseline median. The estimate is their Hodges-Lehmann
// median (the median of the pairwise means, the Walsh averages), its 95% interval the exact one of
// the Wilcoxon signed-rank test over those averages: distribution free, and one or two disturbed
// rounds (a burst of load that hit one side of a round) move it by a rank or two instead of
// widening it the way they widen a Student t interval. With m the minimum effect, L = ln(1 + m),
// interval [lo, hi] and estimate e (all in logs):
//   regressed  lo > 0 and e > L    slower beyond doubt, and by more than the minimum effect
//   improved   hi < 0 and e < -L   the mirror
//   same       -L < lo and hi < L  any change is smaller than the minimum effect
//   ambiguous  otherwise           the interval reaches across the minimum effect (the rounds
//                                  disagree), or fewer than k_min_ab_rounds rounds
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

enum class AbVerdict { regressed, improved, same, ambiguous };
[[nodiscard]] std::string_view to_string(AbVerdict verdict);

// Rounds a verdict needs: with 6 the signed-rank interval first reaches 95% coverage.
inline constexpr std::size_t k_min_ab_rounds = 6;

struct AbJudgement {
  AbVerdict verdict = AbVerdict::ambiguous;
  std::size_t rounds = 0;
  double ratio = 1;                 // candidate / baseline: exp of the estimate
  double ratio_low = 1, ratio_high = 1; // its 95% interval
  // Rounds whose candidate was slower than its baseline (a sign count, for the report).
  std::size_t slower_rounds = 0;
  std::string why;                  // one line: what decided, with the figures
};

// `baseline_ms[r]` and `candidate_ms[r]` are round r's medians (ms, > 0; rounds with a value <= 0
// on either side are skipped). `min_effect` >= 0 (0.05 for 5%).
[[nodiscard]] AbJudgement judge_ab(const std::vector<double>& baseline_ms,
                                   const std::vector<double>& candidate_ms, double min_effect);

// The exact two-sided 95% interval of the Hodges-Lehmann estimate of `values`' centre (the
// Wilcoxon signed-rank one) and the estimate. Fewer than k_min_ab_rounds values: the range of the
// Walsh averages. An empty input gives zeros.
struct HodgesLehmann {
  double estimate = 0, low = 0, high = 0;
};
[[nodiscard]] HodgesLehmann hodges_lehmann(const std::vector<double>& values);

} // namespace ktune
