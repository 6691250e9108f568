#include "daemon/replies.hpp"

#include "core/protocol.hpp"

#include <sstream>

namespace ktune::daemon {

namespace {

nlohmann::json optional_int(std::int64_t value) {
  return value == 0 ? nlohmann::json(nullptr) : nlohmann::json(value);
}

nlohmann::json optional_number(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

} // namespace

nlohmann::json config_to_json(const Config& config) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : config) out[name] = value;
  return out;
}

std::string config_json_text(const Config& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, value] : config) out[name] = value;
  return out.dump();
}

nlohmann::json stored_config_to_json(const std::string& text) {
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::json(text) : parsed;
}

nlohmann::json param_order(const std::string& config_text) {
  nlohmann::json names = nlohmann::json::array();
  const auto parsed = nlohmann::ordered_json::parse(config_text, nullptr, false);
  if (!parsed.is_object()) return names;
  for (auto it = parsed.begin(); it != parsed.end(); ++it) names.push_back(it.key());
  return names;
}

nlohmann::json prior_summary(const std::vector<PriorSourceInfo>& sources) {
  if (sources.empty()) return nullptr;
  nlohmann::json list = nlohmann::json::array();
  std::size_t results = 0;
  for (const auto& source : sources) {
    list.push_back({{"shape", source.shape},
                    {"dtype", source.dtype},
                    {"fingerprint", source.fingerprint},
                    {"device", source.device.empty() ? nlohmann::json(nullptr) : nlohmann::json(source.device)},
                    {"results", source.results}});
    results += source.results;
  }
  return {{"sources", std::move(list)}, {"results", results}};
}

nlohmann::json job_to_json(const JobRecord& job) {
  return {
      {"id", job.id},
      {"kernel", job.kernel},
      {"shape", job.shape},
      {"dtype", job.dtype},
      {"device", job.device},
      {"strategy", job.strategy},
      {"budget", job.budget ? nlohmann::json(*job.budget) : nlohmann::json(nullptr)},
      {"budget_s", job.budget_s ? nlohmann::json(*job.budget_s) : nlohmann::json(nullptr)},
      {"state", std::string(to_string(job.state))},
      {"total", job.total},
      {"done", job.done},
      {"failed", job.failed},
      {"error", job.error},
      {"created_at", optional_int(job.created_at)},
      {"started_at", optional_int(job.started_at)},
      {"finished_at", optional_int(job.finished_at)},
      {"seed", job.seed ? nlohmann::json(*job.seed) : nlohmann::json(nullptr)},
      {"timing",
       {{"queue_ms", job.timing.queue_ms},
        {"compile_ms", job.timing.compile_ms},
        {"bench_ms", job.timing.bench_ms},
        {"overhead_ms", job.timing.overhead_ms},
        {"compile_sum_ms", job.timing.compile_sum_ms},
        {"bench_sum_ms", job.timing.bench_sum_ms},
        {"compiles", job.timing.compiles}}},
      {"options",
       {{"remeasure", job.options.remeasure},
        {"retry_failed", job.options.retry_failed},
        {"priority", job.options.priority},
        {"compile_timeout_s", optional_number(job.options.compile_timeout_s)},
        {"bench_timeout_s", optional_number(job.options.bench_timeout_s)}}},
      {"best_at", optional_int(job.search.best_at)},
      {"prior", job.search.prior.empty() ? nlohmann::json(nullptr)
                                         : nlohmann::json::parse(job.search.prior, nullptr, false)},
  };
}

nlohmann::json result_to_json(const ResultRecord& r) {
  nlohmann::json out{
      {"id", r.id},
      {"config", stored_config_to_json(r.config)},
      {"config_index", r.config_index},
      {"status", std::string(to_string(r.status))},
      {"reason", r.reason},
      {"n", r.stats.n},
      {"median_ms", r.stats.median_ms},
      {"min_ms", r.stats.min_ms},
      {"mean_ms", r.stats.mean_ms},
      {"stddev_ms", r.stats.stddev_ms},
      {"gflops", r.gflops},
      {"gbps", r.gbps},
      {"compile_ms", r.compile_ms},
      {"q1_ms", r.stats.q1_ms},
      {"q3_ms", r.stats.q3_ms},
      {"pruned", r.pruned},
      {"remeasured", r.remeasured},
      {"tied", r.tied},
      {"unlocked", r.unlocked.empty() ? nlohmann::json() : nlohmann::json(r.unlocked)},
  };
  // The measurement's conditions (CUDA: timing plan, spin, clocks), where they were recorded.
  if (!r.conditions.empty()) {
    auto conditions = nlohmann::json::parse(r.conditions, nullptr, false);
    if (conditions.is_object()) out["conditions"] = std::move(conditions);
  }
  return out;
}

nlohmann::json winner_to_json(const ResultRecord* winner, const std::vector<ResultRecord>& results) {
  if (winner == nullptr) return nullptr;
  nlohmann::json group = nlohmann::json::array();
  for (const auto& r : results) {
    if (r.status == CandidateStatus::ok && r.tied) group.push_back(r.config_index);
  }
  return {{"config", stored_config_to_json(winner->config)},
          {"config_index", winner->config_index},
          {"median_ms", winner->stats.median_ms},
          {"gflops", winner->gflops},
          {"tie_group", std::move(group)}};
}

Result<nlohmann::json> job_summary(const Store& store, std::int64_t job_id, WithResults with_results) {
  auto job = store.get_job(job_id);
  if (!job) return job.error();
  if (!job->has_value()) {
    return make_error(ErrorCode::unknown_job, "no job with id " + std::to_string(job_id));
  }
  auto results = store.job_results(job_id);
  if (!results) return results.error();
  // The winner the job named (db/job_winner.hpp); the key's stored winner stands in for it in
  // jobs of stores older than schema v10.
  const JobRecord& rec = **job;
  auto stored = store.find_winner(rec.kernel, rec.source_hash, rec.shape, rec.dtype, rec.fingerprint);
  if (!stored) return stored.error();
  const ResultRecord* winner =
      job_winner(rec, *results, stored->has_value() ? &**stored : nullptr);
  nlohmann::json out = {{"job", job_to_json(rec)}, {"winner", winner_to_json(winner, *results)}};
  if (!results->empty()) out["params"] = param_order(results->front().config);
  if (with_results == WithResults::yes) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : *results) rows.push_back(result_to_json(r));
    out["results"] = std::move(rows);
  }
  return out;
}

std::string first_error_line(const std::string& log) {
  std::istringstream lines(log);
  std::string line;
  std::string first;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos) {
      first = line;
      break;
    }
  }
  while (!first.empty() && (first.back() == '\r' || first.back() == ' ')) first.pop_back();
  if (first.size() > 300) first = first.substr(0, 297) + "...";
  return first;
}

Error internal_error(const Error& error) {
  if (is_transient(error)) {
    return make_error(ErrorCode::store_busy,
                      error.message + " (the database takes no writes right now; nothing was "
                                      "started: try again)");
  }
  return make_error(ErrorCode::internal, describe(error));
}

} // namespace ktune::daemon
