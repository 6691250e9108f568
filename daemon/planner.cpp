#include "daemon/planner.hpp"

#include "core/file_io.hpp"

#include "core/protocol.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "jobs/source_archive.hpp"
#include "search/strategy.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace ktune::daemon {

std::uint64_t cartesian_size(const KernelSpec& spec) {
  std::uint64_t size = 1;
  for (const auto& param : spec.params) {
    const std::uint64_t n = param.values.size();
    if (n != 0 && size > std::numeric_limits<std::uint64_t>::max() / n) {
      return std::numeric_limits<std::uint64_t>::max();
    }
    size *= n;
  }
  return size;
}

namespace {

std::string read_text(const std::string& path) { return read_file(path).value_or(std::string()); }

// The given configs among `space` (the admitted configs at `shape`), in the order given, each
// once. Errors: bad_request naming the first that is not one of them, and why.
Result<std::vector<Config>> pick_given(const KernelSpec& spec, const std::string& shape,
                                       const std::vector<Config>& space,
                                       const std::vector<nlohmann::json>& given) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < space.size(); ++i) index.emplace(config_json_text(space[i]), i);
  std::vector<Config> picked;
  std::set<std::size_t> seen;
  for (std::size_t g = 0; g < given.size(); ++g) {
    const nlohmann::json& object = given[g];
    const std::string at = "configs[" + std::to_string(g) + "]";
    Config config;
    for (const ParamSpec& param : spec.params) {
      const auto it = object.find(param.name);
      if (it == object.end() || !it->is_number_integer()) {
        return make_error(ErrorCode::bad_request, at + " has no integer value of " + spec.name +
                                                 "'s param " + param.name);
      }
      const auto value = it->get<std::int64_t>();
      if (std::find(param.values.begin(), param.values.end(), value) == param.values.end()) {
        return make_error(ErrorCode::bad_request, at + "." + param.name + " = " + std::to_string(value) +
                                                 " is not one of the values " + spec.name +
                                                 " declares for it");
      }
      config.emplace_back(param.name, value);
    }
    if (object.size() != spec.params.size()) {
      for (auto it = object.begin(); it != object.end(); ++it) {
        if (!spec.find_param(it.key())) {
          return make_error(ErrorCode::bad_request, at + "." + it.key() + " is not a param of " + spec.name);
        }
      }
    }
    const auto found = index.find(config_json_text(config));
    if (found == index.end()) {
      return make_error(ErrorCode::bad_request, at + " " + config_to_string(config) + " is not admitted by " +
                                               spec.name + "'s [space].constraints at " + shape);
    }
    if (seen.insert(found->second).second) picked.push_back(space[found->second]);
  }
  return picked;
}

} // namespace

bool quarantines(CandidateStatus status) {
  return status == CandidateStatus::crash || status == CandidateStatus::timeout ||
         status == CandidateStatus::compile_timeout || status == CandidateStatus::worker_lost;
}

Result<std::size_t> drop_quarantined(const Store& store, const std::string& kernel,
                                     const std::string& source_hash,
                                     const std::string& fingerprint, std::vector<Config>& configs,
                                     std::int64_t except_job) {
  auto bad = store.quarantined_configs(kernel, source_hash, fingerprint, except_job);
  if (!bad) return bad.error();
  if (bad->empty()) return std::size_t{0};
  const std::size_t before = configs.size();
  std::erase_if(configs, [&](const Config& c) { return bad->count(config_json_text(c)) > 0; });
  return before - configs.size();
}

Result<std::vector<ResultRecord>> Planner::reusable_results(const JobRecord& record) const {
  if (record.options.remeasure) return std::vector<ResultRecord>{};
  auto rows = m_store.results_for_key(record.kernel, record.source_hash, record.shape,
                                      record.dtype, record.fingerprint);
  if (!rows) return rows.error();
  std::map<std::string, ResultRecord> newest; // rows come oldest first
  for (auto& row : *rows) {
    if (row.job_id == record.id || quarantines(row.status)) continue;
    newest[row.config] = std::move(row);
  }
  std::vector<ResultRecord> out;
  out.reserve(newest.size());
  for (auto& [config, row] : newest) out.push_back(std::move(row));
  return out;
}

Result<void> Planner::attach_prior(JobPlan& plan) const {
  const JobRecord& record = plan.record;
  if (plan.cold || !search::uses_prior(record.strategy)) return {};
  auto rows = m_store.results_for_kernel(record.kernel, record.source_hash, k_prior_rows);
  if (!rows) return rows.error();
  std::map<std::string, std::size_t> ids; // config text -> position in the job's space
  for (std::size_t i = 0; i < plan.configs.size(); ++i) ids.emplace(config_json_text(plan.configs[i]), i);
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> sources;
  for (auto it = rows->rbegin(); it != rows->rend(); ++it) { // oldest first: a newer row wins
    const ResultRecord& row = *it;
    if (row.shape == record.shape && row.dtype == record.dtype && row.fingerprint == record.fingerprint) {
      continue; // the job's own key: those rows are reused, not a prior
    }
    const auto id = ids.find(row.config);
    if (id == ids.end()) continue;
    const auto key = std::make_tuple(row.shape, row.dtype, row.fingerprint);
    auto [source, added] = sources.emplace(key, plan.prior.size());
    if (added) {
      PriorSourceInfo info{row.shape, row.dtype, row.fingerprint,
                           row.fingerprint == record.fingerprint ? record.device : std::string(), 0};
      plan.prior.push_back({row.shape + " " + row.dtype + " on " +
                                (info.device.empty() ? row.fingerprint : info.device), {}});
      plan.prior_sources.push_back(std::move(info));
    }
    const bool ok = row.status == CandidateStatus::ok && row.stats.median_ms > 0;
    plan.prior[source->second].results.push_back(
        {id->second, ok ? std::optional<double>(row.stats.median_ms) : std::nullopt});
  }
  // One result per config and source: the newest (the last pushed).
  for (std::size_t i = 0; i < plan.prior.size(); ++i) {
    auto& results = plan.prior[i].results;
    std::map<std::size_t, search::PriorResult> newest;
    for (const auto& r : results) newest[r.config] = r;
    results.clear();
    for (const auto& [config, r] : newest) results.push_back(r);
    plan.prior_sources[i].results = results.size();
  }
  if (!plan.prior.empty()) {
    std::size_t results = 0;
    for (const auto& info : plan.prior_sources) results += info.results;
    KTUNE_LOG(info) << record.kernel << " " << record.shape << " on " << record.device << ": prior of "
                    << results << " result(s) from " << plan.prior.size() << " earlier key(s)";
  }
  return {};
}

Result<void> Planner::restrict_to_given(const KernelSpec& spec, JobRecord& record,
                                        std::vector<Config>& configs,
                                        const std::vector<nlohmann::json>& given) const {
  auto picked = pick_given(spec, record.shape, configs, given);
  if (!picked) return picked.error();
  auto incumbent = m_store.find_winner(record.kernel, record.source_hash, record.shape,
                                       record.dtype, record.fingerprint);
  if (!incumbent) return internal_error(incumbent.error());
  if (*incumbent) {
    const auto is_incumbent = [&](const Config& c) { return config_json_text(c) == (*incumbent)->config; };
    const auto in_space = std::find_if(configs.begin(), configs.end(), is_incumbent);
    if (in_space != configs.end() && std::none_of(picked->begin(), picked->end(), is_incumbent)) {
      picked->push_back(*in_space);
    }
  }
  configs = std::move(*picked);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Config& c : configs) list.push_back(nlohmann::ordered_json::parse(config_json_text(c)));
  record.strategy = std::string(search::k_given_configs);
  record.configs = list.dump();
  return {};
}

Result<std::vector<Config>> Planner::enumerate(const KernelSpec& spec, const Shape& shape) {
  auto space = ParamSpace::create(spec, shape);
  if (!space) return space.error();
  const auto start = std::chrono::steady_clock::now();
  auto configs = space->enumerate();
  if (!configs) return configs.error();
  KTUNE_LOG(debug) << "enumerated " << configs->size() << " of " << space->cartesian_size()
                   << " configs of " << spec.name << " in " << log::elapsed_ms(start) << " ms";
  if (configs->empty()) {
    return make_error(ErrorCode::empty_space,
                      "kernel " + spec.name + " admits no config at " + shape.to_string() +
                          ": all " + std::to_string(space->cartesian_size()) +
                          " combinations are rejected by [space].constraints");
  }
  return configs;
}

Result<JobPlan> Planner::plan(PlanRequest request) const {
  auto configs = enumerate(request.kernel.spec, request.shape);
  return plan(std::move(request), std::move(configs));
}

Result<JobPlan> Planner::plan(PlanRequest request, Result<std::vector<Config>> configs) const {
  const KernelSpec& spec = request.kernel.spec;
  if (!configs) return configs.error();

  JobPlan plan;
  JobRecord& record = plan.record;
  record.kernel = spec.name;
  record.source_hash = request.kernel.source_hash;
  record.shape = request.shape.to_string();
  record.dtype = request.dtype;
  record.device = request.device.name;
  record.fingerprint = request.device.fingerprint;
  record.strategy = request.strategy;
  record.seed = request.seed;
  record.state = JobState::queued;
  record.options = request.options;

  if (!request.given.empty()) {
    if (request.strategy != "exhaustive") {
      return make_error(ErrorCode::bad_request, "tune: 'configs' are measured one by one, each of them "
                                           "(strategy exhaustive), not searched by " + request.strategy);
    }
    if (auto r = restrict_to_given(spec, record, *configs, request.given); !r) return r.error();
  }
  if (!record.options.retry_failed) {
    auto dropped = drop_quarantined(m_store, record.kernel, record.source_hash,
                                    record.fingerprint, *configs);
    if (!dropped) return internal_error(dropped.error());
    plan.quarantined = *dropped;
    if (plan.quarantined > 0) {
      KTUNE_LOG(info) << spec.name << " on " << record.device << ": skipping "
                      << plan.quarantined
                      << " quarantined config(s) that crashed or hung in earlier jobs";
    }
    if (configs->empty()) {
      return make_error(ErrorCode::empty_space,
                        "every config of " + spec.name + " at " + record.shape +
                            " crashed or hung in an earlier job on " + record.device + " (" +
                            std::to_string(plan.quarantined) +
                            " quarantined); tune with retry_failed to run them again");
    }
  }
  // The budget in evaluations: a count, or a share of the admitted configs (at least 1).
  std::optional<std::int64_t> budget = request.budget;
  if (request.budget_fraction) {
    budget = std::max<std::int64_t>(
        1, std::llround(*request.budget_fraction * static_cast<double>(configs->size())));
  }
  if (budget && static_cast<std::uint64_t>(*budget) >= configs->size()) budget.reset();
  record.budget = budget;
  record.budget_s = request.budget_s;
  record.total = budget ? *budget : static_cast<std::int64_t>(configs->size());

  plan.kernel = std::move(request.kernel);
  plan.device = std::move(request.device);
  plan.shape = std::move(request.shape);
  plan.configs = std::move(*configs);
  plan.cold = request.cold;
  if (auto r = attach_prior(plan); !r) return internal_error(r.error());
  return plan;
}

Result<void> Planner::commit(JobPlan& plan) const {
  JobRecord& record = plan.record;
  if (!m_source_archive.empty()) {
    if (auto kept = archive_kernel(plan.kernel, m_source_archive); !kept) {
      KTUNE_LOG(warn) << "the sources of " << record.kernel << " (" << record.source_hash
                      << ") are not kept for later A/B measurements: " << kept.error().message;
    }
  }
  const std::string spec_text = read_text(plan.kernel.spec_path);
  auto stored = write_job(record, [&](Store& store) -> Result<void> {
    if (auto r = store.upsert_kernel(record.kernel, record.source_hash, spec_text); !r) return r;
    return store.upsert_device(plan.device);
  });
  if (!stored) return stored.error();
  auto reusable = reusable_results(record);
  if (!reusable) return internal_error(reusable.error());
  plan.reusable = std::move(*reusable);
  return {};
}

Result<void> Planner::create(JobRecord& record) const { return write_job(record, nullptr); }

Result<void> Planner::write_job(JobRecord& record, const StoreWriter::Write& before) const {
  auto stored = m_writer.write_now(
      "the new job of " + record.kernel + " " + record.shape, [&](Store& store) -> Result<void> {
        if (before) {
          if (auto r = before(store); !r) return r;
        }
        auto id = store.create_job(record);
        if (!id) return id.error();
        record.id = *id;
        return {};
      });
  if (!stored) {
    record.id = 0;
    return internal_error(stored.error());
  }
  return {};
}

Result<JobPlan> Planner::resume(KernelRegistry& registry, const JobRecord& job) const {
  auto kernel = registry.find(job.kernel);
  if (!kernel) return kernel.error();
  if (kernel->source_hash != job.source_hash) {
    return make_error(ErrorCode::source_changed, "kernel " + job.kernel + " changed since the job started "
                                        "(source hash " + job.source_hash + ", now " +
                                        kernel->source_hash + ")");
  }
  auto shape = Shape::parse(job.shape);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, kernel->spec.shape_dims, kernel->spec.name);
  if (!conformed) return conformed.error();
  auto space = ParamSpace::create(kernel->spec, *conformed);
  if (!space) return space.error();
  auto configs = space->enumerate();
  if (!configs) return configs.error();
  if (!job.configs.empty()) {  // given configs: the stored list, in its order
    const auto list = nlohmann::json::parse(job.configs, nullptr, false);
    if (!list.is_array()) {
      return make_error(ErrorCode::internal, "job " + std::to_string(job.id) + ": jobs.configs is not a JSON array");
    }
    auto picked = pick_given(kernel->spec, job.shape, *configs, list.get<std::vector<nlohmann::json>>());
    if (!picked) return picked.error();
    *configs = std::move(*picked);
  }
  JobPlan plan;
  plan.record = job;
  plan.record.state = JobState::queued;
  if (!job.options.retry_failed) {
    auto dropped = drop_quarantined(m_store, job.kernel, job.source_hash, job.fingerprint,
                                    *configs, job.id);
    if (!dropped) return dropped.error();
    plan.quarantined = *dropped;
  }
  auto existing = m_store.job_results(job.id);
  if (!existing) return existing.error();
  auto reusable = reusable_results(job);
  if (!reusable) return reusable.error();
  plan.kernel = std::move(*kernel);
  plan.shape = std::move(*conformed);
  plan.configs = std::move(*configs);
  plan.existing = std::move(*existing);
  plan.reusable = std::move(*reusable);
  if (auto r = attach_prior(plan); !r) return r.error();
  return plan;
}

} // namespace ktune::daemon
