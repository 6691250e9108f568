#include "search/prior.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace ktune::search {

PriorEstimate estimate_prior(const SearchSpace& space, const Prior& prior) {
  const std::size_t n = space.size();
  PriorEstimate out;
  std::vector<double> score_sum(n, 0.0);
  std::vector<double> failure_sum(n, 0.0);
  std::vector<std::size_t> seen(n, 0);
  for (const PriorSource& source : prior) {
    std::map<std::size_t, std::optional<double>> results; // one per config, the later kept
    for (const PriorResult& r : source.results) {
      if (r.config >= n) continue;
      if (r.time_ms && !(std::isfinite(*r.time_ms) && *r.time_ms > 0)) continue;
      results[r.config] = r.time_ms;
      ++out.results;
    }
    std::vector<std::pair<double, std::size_t>> ok;
    for (const auto& [config, time] : results) {
      if (time) ok.emplace_back(*time, config);
    }
    if (ok.empty()) continue;
    ++out.sources;
    std::sort(ok.begin(), ok.end());
    const double last = static_cast<double>(std::max<std::size_t>(ok.size() - 1, 1));
    std::vector<double>& quantile = out.by_source.emplace_back(n, std::numeric_limits<double>::quiet_NaN());
    // Equal times share the quantile of the first of them.
    std::size_t rank = 0;
    for (std::size_t i = 0; i < ok.size(); ++i) {
      if (i > 0 && ok[i].first > ok[i - 1].first) rank = i;
      const std::size_t id = ok[i].second;
      quantile[id] = ok.size() == 1 ? 0.0 : static_cast<double>(rank) / last;
      score_sum[id] += quantile[id];
      ++seen[id];
    }
    for (const auto& [config, time] : results) {
      if (time) continue;
      quantile[config] = 1.0;
      score_sum[config] += 1.0;
      failure_sum[config] += 1.0;
      ++seen[config];
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out.score.assign(n, nan);
  out.failure.assign(n, nan);
  if (out.sources == 0) return out;
  std::vector<std::pair<double, std::size_t>> ranked;
  for (std::size_t id = 0; id < n; ++id) {
    if (seen[id] == 0) continue;
    const auto count = static_cast<double>(seen[id]);
    out.score[id] = score_sum[id] / count;
    out.failure[id] = failure_sum[id] / count;
    if (failure_sum[id] == 0) ranked.emplace_back(out.score[id], id);
  }
  std::sort(ranked.begin(), ranked.end());
  out.ranked.reserve(ranked.size());
  for (const auto& entry : ranked) out.ranked.push_back(entry.second);
  return out;
}

} // namespace ktune::search
