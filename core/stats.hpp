#pragma once
// Summary statistics of timed samples (milliseconds).
#include <cstddef>
#include <vector>

namespace ktune {

struct SampleStats {
  std::size_t n = 0;
  double min_ms = 0, max_ms = 0, median_ms = 0, mean_ms = 0, stddev_ms = 0;
  double q1_ms = 0, q3_ms = 0;

  // Relative standard deviation (stddev / mean); 0 when n < 2 or mean == 0.
  [[nodiscard]] double rsd() const;
};

// Quartiles by linear interpolation between order statistics; stddev is the sample (n-1) one.
// An empty input gives n == 0 and zeros.
[[nodiscard]] SampleStats summarize(std::vector<double> samples_ms);

// One candidate measured in several rounds, as one summary: n, min, max, mean and stddev of all
// the samples together (stddev includes the spread between the rounds), median, q1 and q3 the
// medians of the rounds' ones. Rounds with n == 0 are skipped; none gives n == 0 and zeros.
[[nodiscard]] SampleStats pool_rounds(const std::vector<SampleStats>& rounds);

// The p-quantile (0 < p < 1) of Student's t distribution with `df` degrees of freedom (0 is taken
// as 1), from Boost.Math: t_quantile(0.975, 9) = 2.262, the factor of a two-sided 95% interval.
[[nodiscard]] double t_quantile(double p, std::size_t df);

// A 95% confidence interval of the median of `samples_ms` from its order statistics (distribution
// free: the ranks come from the binomial(n, 1/2) law, by its normal approximation). Robust to
// outliers: a few preempted samples move it by a few ranks at most. n < 6 gives [min, max] (then
// its coverage is below 95%); an empty input gives {0, 0}.
struct MedianInterval {
  double low_ms = 0, high_ms = 0;
};
[[nodiscard]] MedianInterval median_interval(std::vector<double> samples_ms);

// The Mann-Whitney U test of two independent samples: U of `a` (the number of pairs a_i > b_j,
// ties counting 1/2) and the two-sided p-value of "neither tends to be larger", from the normal
// approximation with the tie correction and a continuity correction. Either side empty gives
// p_value 1.
struct RankTest {
  double u = 0;
  double p_value = 1;
};
[[nodiscard]] RankTest mann_whitney(const std::vector<double>& a, const std::vector<double>& b);

// The verdict on a job's finals: every finalist measured once per round, all in the same rounds.
struct FinalsVerdict {
  std::size_t best = 0;           // lowest median of its round medians (lower index on a tie)
  std::vector<double> ratio;      // median over rounds of median / best's median that round
  std::vector<double> ratio_low;  // lower end of the 95% confidence interval of their geometric
                                  // mean (Student t)
  std::vector<bool> tied;         // ties the best (the best itself included)
};

// Judges finalists from their round medians, `round_ms[finalist][round]` (every row the same
// length, at least one round, all times > 0). Comparing within a round pairs each finalist with
// the best under the same machine conditions, so drift between rounds cancels out. A finalist
// ties the best when it may, at 95% confidence, be within `tie_margin` of it (ratio_low <= 1 +
// tie_margin) and its median ratio is within 2 x tie_margin (however noisy the machine, a tie
// never costs more; the median, so that one disturbed round does not decide). With one round
// there is no interval: ratio_low is the ratio of that round.
// An empty input gives an empty verdict.
[[nodiscard]] FinalsVerdict judge_finals(const std::vector<std::vector<double>>& round_ms,
                                         double tie_margin);

} // namespace ktune
