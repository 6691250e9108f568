#include "tableio/history.hpp"

#include "db/job_winner.hpp"

namespace ktune::tableio {

std::optional<RunPoint> run_point(const JobRecord& job, const std::vector<ResultRecord>& results) {
  const ResultRecord* winner = job_winner(job, results);
  if (winner == nullptr) return std::nullopt;
  RunPoint point;
  point.job_id = job.id;
  point.result_id = winner->id;
  point.started_at_ms = job.started_at;
  point.finished_at_ms = job.finished_at;
  point.source_hash = job.source_hash;
  point.config = winner->config;
  point.median_ms = winner->stats.median_ms;
  point.samples_ms = winner->samples_ms;
  return point;
}

Result<std::vector<RunPoint>> load_history(const Store& store, const HistoryKey& key) {
  auto jobs = store.jobs_for_key(key.kernel, key.shape, key.dtype, key.fingerprint, JobState::done);
  if (!jobs) return jobs.error();
  std::vector<RunPoint> series;
  for (const auto& job : *jobs) {
    auto results = store.job_results(job.id);
    if (!results) return results.error();
    if (auto point = run_point(job, *results)) series.push_back(std::move(*point));
  }
  return series;
}

} // namespace ktune::tableio
