#include "db/job_winner.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

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

bool oversubscribed(const ResultRecord& r) {
  if (r.conditions.find("oversubscribed") == std::string::npos) return false;
  const auto conditions = nlohmann::json::parse(r.conditions, nullptr, false);
  return conditions.is_object() && conditions.value("oversubscribed", false) == true;
}

const ResultRecord* pick_winner(const std::vector<ResultRecord>& results,
                                const std::string& incumbent_config) {
  // An oversubscribed tie (more threads than CPUs) gives way to one that is not.
  const bool fitting_tie = std::any_of(results.begin(), results.end(), [](const ResultRecord& r) {
    return r.status == CandidateStatus::ok && r.tied && !oversubscribed(r);
  });
  const auto in_group = [fitting_tie](const ResultRecord& r) {
    return r.status == CandidateStatus::ok && r.tied && !(fitting_tie && oversubscribed(r));
  };
  const ResultRecord* fastest = nullptr;
  for (const auto& r : results) {
    if (!in_group(r)) continue;
    if (!incumbent_config.empty() && r.config == incumbent_config) return &r;
    if (fastest == nullptr || better_result(r, *fastest)) fastest = &r;
  }
  if (fastest == nullptr) return fastest_result(results);
  // Medians this close are one time at the finals' precision: the lower config index decides,
  // so that two runs do not name different configs by a coin toss.
  const ResultRecord* tie = fastest;
  for (const auto& r : results) {
    if (!in_group(r)) continue;
    if (r.stats.median_ms <= fastest->stats.median_ms * (1.0 + k_same_median) &&
        r.config_index < tie->config_index) {
      tie = &r;
    }
  }
  return tie;
}

const ResultRecord* job_winner(const JobRecord& job, const std::vector<ResultRecord>& results,
                               const WinnerRecord* key_winner) {
  const auto row_with_id = [&](std::int64_t id) -> const ResultRecord* {
    for (const auto& r : results) {
      if (r.id == id && r.status == CandidateStatus::ok) return &r;
    }
    return nullptr;
  };
  if (job.winner_result) {
    if (const ResultRecord* named = row_with_id(*job.winner_result)) return named;
  }
  if (key_winner != nullptr && key_winner->job_id == job.id) {
    if (const ResultRecord* stored = row_with_id(key_winner->result_id)) return stored;
  }
  return pick_winner(results);
}

} // namespace ktune
