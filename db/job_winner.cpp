#include "db/job_winner.hpp"

namespace ktune {

bool better_result(const ResultRecord& candidate, const ResultRecord& best) {
  if (candidate.stats.median_ms != best.stats.median_ms) {
    return candidate.stats.median_ms < best.stats.median_ms;
  }
  return candidate.config_index < best.config_index;
}

const ResultRecord* fastest_result(const std::vector<ResultRecord>& results) {
  for (const bool with_pruned : {false, true}) {
    const ResultRecord* best = nullptr;
    for (const auto& r : results) {
      if (r.status != CandidateStatus::ok || (r.pruned && !with_pruned)) continue;
      if (best == nullptr || better_result(r, *best)) best = &r;
    }
    if (best != nullptr) return best;
  }
  return nullptr;
}

const ResultRecord* pick_winner(const std::vector<ResultRecord>& results,
                                const std::string& incumbent_config) {
  const ResultRecord* tie = nullptr;
  for (const auto& r : results) {
    if (r.status != CandidateStatus::ok || !r.tied) continue;
    if (!incumbent_config.empty() && r.config == incumbent_config) return &r;
    if (tie == nullptr || better_result(r, *tie)) tie = &r;
  }
  return tie != nullptr ? tie : fastest_result(results);
}

} // namespace ktune
