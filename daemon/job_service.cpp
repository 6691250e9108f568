#include "daemon/job_service.hpp"

#include "daemon/compile_check.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/reply.hpp"
#include "search/strategy.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <utility>

namespace ktune::daemon {

namespace {

// The strategy and budget of a tune. Errors: bad_request.
Result<void> check_search(const protocol::TuneRequest& req) {
  const auto& strategies = search::strategy_names();
  if (std::find(strategies.begin(), strategies.end(), req.strategy) == strategies.end()) {
    std::string known;
    for (const auto& name : strategies) known += (known.empty() ? "" : ", ") + name;
    return make_error(ErrorCode::bad_request,
                      "unknown strategy '" + req.strategy + "' (expected " + known + ")");
  }
  if (req.budget && *req.budget < 1) {
    return make_error(ErrorCode::bad_request,
                      "budget must be at least 1, got " + std::to_string(*req.budget));
  }
  return {};
}

// One per-job deadline of a tune's body: absent or null leaves `deadline` unset. A client may
// shorten a deadline down to the daemon's floor or lengthen it up to its limit, never beyond: a
// hanging candidate must always be killed, and a deadline no good config can meet would only
// fill the job with timeouts ([limits], ktuned.toml).
struct DeadlineField {
  const char* name;          // "compile_timeout_s"
  double floor, limit;       // seconds
  const char* floor_source;  // where the floor comes from, for the message
  const char* limit_key;     // the [limits] key of the limit
};

Result<void> read_deadline(const nlohmann::json& body, const DeadlineField& field,
                           std::optional<double>& deadline) {
  auto it = body.find(field.name);
  if (it == body.end() || it->is_null()) return {};
  const std::string name = field.name;
  if (!it->is_number() || !(it->get<double>() > 0)) {
    return make_error(ErrorCode::bad_request, "tune: field '" + name +
                                                  "' must be a positive number of seconds, "
                                                  "found " + it->dump());
  }
  if (it->get<double>() < field.floor) {
    return make_error(ErrorCode::bad_request,
                      "tune: field '" + name + "' is " + it->dump() +
                          " s, under this ktuned's minimum of " + nlohmann::json(field.floor).dump() +
                          " s (" + field.floor_source + " in ktuned.toml)");
  }
  if (it->get<double>() > field.limit) {
    return make_error(ErrorCode::bad_request,
                      "tune: field '" + name + "' is " + it->dump() +
                          " s, over this ktuned's limit of " + nlohmann::json(field.limit).dump() +
                          " s ([limits] " + field.limit_key + " in ktuned.toml)");
  }
  deadline = it->get<double>();
  return {};
}

} // namespace

Result<JobOptions> tune_options(const protocol::TuneRequest& request, const nlohmann::json& body,
                                const DaemonConfig& config) {
  JobOptions options;
  options.remeasure = request.remeasure;
  options.priority = static_cast<int>(request.priority);
  if (auto it = body.find("retry_failed"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return make_error(ErrorCode::bad_request, std::string("tune: field 'retry_failed' must be "
                                                            "a boolean, found ") + it->type_name());
    }
    options.retry_failed = it->get<bool>();
  }
  const DeadlineField compile{"compile_timeout_s", compile_timeout_floor_s(config.compile_timeout_s),
                              compile_timeout_limit_s(config.compile_timeout_s),
                              "the smaller of 1 s and [limits] compile_timeout_s",
                              "compile_timeout_s"};
  const DeadlineField bench{"bench_timeout_s", config.bench_timeout_min_s,
                            config.bench_timeout_max_s, "[limits] bench_timeout_min_s",
                            "bench_timeout_max_s"};
  if (auto r = read_deadline(body, compile, options.compile_timeout_s); !r) return r.error();
  if (auto r = read_deadline(body, bench, options.bench_timeout_s); !r) return r.error();
  return options;
}

JobService::JobService(JobContext context)
    : m_ctx(std::move(context)), m_quota(m_ctx.store, m_ctx.config.max_queued_jobs_per_client) {}

void JobService::enumerate(std::vector<PlanRequest> plans, Enumerated then) {
  const bool big = std::any_of(plans.begin(), plans.end(), [](const PlanRequest& plan) {
    return cartesian_size(plan.kernel.spec) > k_inline_enumeration;
  });
  if (!big) {
    std::vector<Result<std::vector<Config>>> spaces;
    for (const auto& plan : plans) spaces.push_back(Planner::enumerate(plan.kernel.spec, plan.shape));
    then(std::move(plans), std::move(spaces));
    return;
  }
  // The loop goes on serving while the helper thread enumerates.
  auto shared = std::make_shared<std::vector<PlanRequest>>(std::move(plans));
  asio::post(m_ctx.offload, [this, shared, then = std::move(then)]() mutable {
    auto spaces = std::make_shared<std::vector<Result<std::vector<Config>>>>();
    for (const auto& plan : *shared) spaces->push_back(Planner::enumerate(plan.kernel.spec, plan.shape));
    asio::post(m_ctx.io, [this, shared, spaces, then = std::move(then)] {
      if (m_stopping) return;
      then(std::move(*shared), std::move(*spaces));
    });
  });
}

// What a tune reply says of the job's prior: null when the job has none (cold, a strategy that
// uses none, nothing stored), else the earlier keys it learns from.
Result<nlohmann::json> JobService::submit(PlanRequest request, Result<std::vector<Config>> configs,
                                          uid_t client) {
  auto plan = m_ctx.planner.plan(std::move(request), std::move(configs));
  if (!plan) return plan.error();
  nlohmann::json reply{{"total", plan->record.total}, {"state", "queued"},
                       {"quarantined", plan->quarantined}, {"device", plan->record.device},
                       {"prior", prior_summary(plan->prior_sources)}};
  // Identical requests share one job; asking to remeasure, for a cold search or for given
  // configs always starts a new one.
  if (auto same = plan->joinable() ? m_ctx.scheduler.find_same(plan->record) : std::nullopt) {
    KTUNE_LOG(info) << "tune " << plan->record.kernel << " " << plan->record.shape << " on "
                    << plan->record.device << " joins job " << *same;
    reply["job"] = *same;
    reply["joined"] = true;
    return reply;
  }
  if (auto r = m_ctx.planner.commit(*plan); !r) return r.error();
  const std::int64_t id = plan->record.id;
  m_quota.charge(client, id);
  reply["job"] = id;
  m_ctx.scheduler.enqueue(std::move(*plan));
  return reply;
}

Result<std::vector<std::string>> JobService::tune_devices(const protocol::TuneRequest& req) {
  if (req.device != "all") return std::vector<std::string>{req.device};
  std::vector<std::string> names;
  for (const auto& d : m_ctx.devices.all_local()) {
    const bool cuda = d.name != "cpu";
    if (m_ctx.registry.find(req.kernel, cuda ? Language::cuda : Language::cpp)) {
      names.push_back(d.name);
    }
  }
  if (!names.empty()) return names;
  auto known = m_ctx.registry.find(req.kernel);
  if (!known) return known.error();
  return make_error(ErrorCode::no_device,
                    "kernel " + req.kernel + " has no family for any device of this machine");
}

Result<std::vector<PlanRequest>> JobService::plan_requests(const protocol::TuneRequest& req,
                                                           const JobOptions& options) {
  auto devices = tune_devices(req);
  if (!devices) return devices.error();
  std::vector<PlanRequest> plans;
  for (const auto& name : *devices) {
    auto target = m_ctx.targets.resolve(req.kernel, req.shape, req.dtype, name);
    if (!target) return target.error();
    PlanRequest plan = PlanRequest::of(std::move(*target));
    plan.strategy = req.strategy;
    plan.budget = req.budget;
    plan.budget_fraction = req.budget_fraction;
    plan.budget_s = req.budget_s;
    plan.seed = req.seed.value_or(0);
    plan.cold = req.cold;
    plan.options = options;
    plan.given = req.configs;
    plans.push_back(std::move(plan));
  }
  return plans;
}

void JobService::tune(const std::shared_ptr<Client>& client, const protocol::Request& request) {
  const Reply reply(client, request.id);
  if (auto refused = m_quota.refusal(client->peer().uid)) return reply.error(*refused);
  auto req = protocol::TuneRequest::from_json(request.body);
  if (!req) return reply.error(req.error());
  if (auto r = check_search(*req); !r) return reply.error(r.error());
  auto options = tune_options(*req, request.body, m_ctx.config);
  if (!options) return reply.error(options.error());
  auto plans = plan_requests(*req, *options);
  if (!plans) return reply.error(plans.error());
  // A client gone by the time a big space is enumerated has its request dropped (no job).
  std::weak_ptr<Client> weak = client;
  enumerate(std::move(*plans), [this, weak, request, wait = req->wait, all = req->device == "all"](
                                   std::vector<PlanRequest> planned,
                                   std::vector<Result<std::vector<Config>>> spaces) {
    if (auto alive = weak.lock()) {
      submit_tunes(alive, request, wait, all, std::move(planned), std::move(spaces));
    }
  });
}

void JobService::submit_tunes(const std::shared_ptr<Client>& client,
                              const protocol::Request& request, bool wait, bool all,
                              std::vector<PlanRequest> plans,
                              std::vector<Result<std::vector<Config>>> spaces) {
  const Reply reply(client, request.id);
  nlohmann::json jobs = nlohmann::json::array();
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto submitted = submit(std::move(plans[i]), std::move(spaces[i]), reply.uid());
    if (!submitted) return reply.error(submitted.error());
    jobs.push_back(std::move(*submitted));
  }
  if (!wait) return reply.ok(all ? nlohmann::json{{"jobs", std::move(jobs)}} : jobs.front());
  if (!all) return watch_job(client, request, jobs.front().at("job").get<std::int64_t>());
  std::vector<std::int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.at("job").get<std::int64_t>());
  watch_jobs(client, request, std::move(ids));
}

void JobService::watch_jobs(const std::shared_ptr<Client>& client,
                            const protocol::Request& request, std::vector<std::int64_t> ids) {
  // Progress events of every job (each names its job); one reply once the last one ended:
  // {"jobs":[summary, ...]} in the order of `ids`.
  struct Waiting {
    std::vector<std::int64_t> ids;
    std::size_t left = 0;
  };
  auto waiting = std::make_shared<Waiting>(Waiting{ids, ids.size()});
  const Reply reply(client, request.id);
  auto answer = [this, reply, waiting] {
    if (reply.gone()) return;
    nlohmann::json summaries = nlohmann::json::array();
    for (const std::int64_t job : waiting->ids) {
      auto summary = job_summary(m_ctx.store, job, WithResults::no);
      if (!summary) return reply.error(make_error(ErrorCode::internal, summary.error().message));
      summaries.push_back(std::move(*summary));
    }
    reply.ok({{"jobs", std::move(summaries)}});
  };
  for (const std::int64_t id : ids) {
    JobWatcher watcher;
    watcher.on_progress = [reply](const nlohmann::json& progress) { reply.event("progress", progress); };
    watcher.on_finished = [waiting, answer](std::int64_t) {
      if (--waiting->left == 0) answer();
    };
    if (!m_ctx.scheduler.watch(id, std::move(watcher))) --waiting->left; // ended already
  }
  if (waiting->left == 0) answer();
}

void JobService::watch_job(const std::shared_ptr<Client>& client,
                           const protocol::Request& request, std::int64_t job_id) {
  const Reply reply(client, request.id);
  JobWatcher watcher;
  watcher.on_progress = [reply](const nlohmann::json& progress) { reply.event("progress", progress); };
  watcher.on_finished = [this, reply](std::int64_t finished) {
    if (reply.gone()) return;
    auto summary = job_summary(m_ctx.store, finished, WithResults::no);
    if (!summary) return reply.error(make_error(ErrorCode::internal, summary.error().message));
    reply.ok(*summary);
  };
  if (!m_ctx.scheduler.watch(job_id, std::move(watcher))) {
    reply.error(make_error(ErrorCode::internal,
                           "job " + std::to_string(job_id) + " vanished before it started"));
  }
}

void JobService::compile_check(const std::shared_ptr<Client>& client,
                               const protocol::Request& request) {
  const Reply reply(client, request.id);
  auto req = CompileCheckRequest::from_json(request.body);
  if (!req) return reply.error(req.error());
  auto target = resolve_check(*req, m_ctx.registry);
  if (!target) return reply.error(target.error());
  std::vector<PlanRequest> plans(1);
  plans.front().kernel = target->kernel;
  plans.front().shape = target->shape;
  // A client gone by the time a big space is enumerated has its check dropped (no job).
  std::weak_ptr<Client> weak = client;
  enumerate(std::move(plans), [this, weak, request, req = std::move(*req),
                               target = std::move(*target)](
                                  std::vector<PlanRequest>,
                                  std::vector<Result<std::vector<Config>>> spaces) {
    auto alive = weak.lock();
    if (!alive) return;
    if (!spaces.front()) return Reply(alive, request.id).error(spaces.front().error());
    start_compile_check(alive, request, req, target, std::move(*spaces.front()), m_ctx.scheduler,
                        m_ctx.planner, m_ctx.config.cache_dir);
  });
}

Result<nlohmann::json> JobService::cancel(const protocol::Request& request) {
  auto req = protocol::JobRequest::from_json(request.body);
  if (!req) return req.error();
  const bool cancelled = m_ctx.scheduler.cancel(req->job);
  auto job = m_ctx.store.get_job(req->job);
  if (!job) return internal_error(job.error());
  if (cancelled) {
    return nlohmann::json{{"job", req->job},
                          {"state", job->has_value() ? std::string(to_string((*job)->state))
                                                     : std::string("cancelled")}};
  }
  if (!job->has_value()) {
    return make_error(ErrorCode::unknown_job, "no job with id " + std::to_string(req->job));
  }
  return make_error(ErrorCode::bad_request, "job " + std::to_string(req->job) + " is " +
                                                std::string(to_string((*job)->state)) +
                                                ", not queued or running; nothing to cancel");
}

Result<nlohmann::json> JobService::job(const protocol::Request& request) {
  auto req = protocol::JobRequest::from_json(request.body);
  if (!req) return req.error();
  auto summary = job_summary(m_ctx.store, req->job, WithResults::yes);
  if (!summary && summary.error().code != ErrorCode::unknown_job) return internal_error(summary.error());
  if (summary) mark_stalled(summary->at("job"));
  return summary;
}

Result<nlohmann::json> JobService::jobs(const protocol::Request& request) {
  auto req = protocol::JobsRequest::from_json(request.body);
  if (!req) return req.error();
  auto list = m_ctx.store.list_jobs(req->limit);
  if (!list) return internal_error(list.error());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& j : *list) {
    out.push_back(job_to_json(j));
    mark_stalled(out.back());
  }
  return nlohmann::json{{"jobs", std::move(out)}};
}

void JobService::mark_stalled(nlohmann::json& job) const {
  // While the store's writes wait, a job that is not over cannot record its progress or its end.
  if (!m_ctx.writer.stall()) return;
  const std::string state = job.value("state", "");
  if (state == "queued" || state == "running") job["stalled"] = m_ctx.writer.describe_stall();
}

} // namespace ktune::daemon
