#include "daemon/handlers.hpp"

#include "daemon/reply.hpp"

#include "core/quote.hpp"
#include "search/strategy.hpp"

#include "daemon/compile_check.hpp"
#include "daemon/devices.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/table_import.hpp"
#include "tableio/formats.hpp"

#include <boost/asio/post.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ktune::daemon {

namespace {

// Rows of an import written in one step: one transaction, ~3 ms of the loop.
constexpr std::size_t k_import_step_rows = 32;
// A step the database does not take (busy, full) is tried again every k_import_retry, for up to
// k_import_wait in all; then the import fails with the cause.
constexpr std::chrono::milliseconds k_import_retry{100};
constexpr std::chrono::milliseconds k_import_wait{60'000};

// Requests slower than this are logged with their duration.
constexpr double k_slow_request_ms = 100.0;

nlohmann::json kernel_to_json(const LoadedKernel& kernel) {
  const KernelSpec& spec = kernel.spec;
  nlohmann::json params = nlohmann::json::object();
  nlohmann::json names = nlohmann::json::array();  // spec order (an object's may be sorted)
  for (const auto& param : spec.params) {
    params[param.name] = param.values;
    names.push_back(param.name);
  }
  return {{"name", spec.name},
          {"param_names", std::move(names)},
          {"language", std::string(to_string(spec.language))},
          {"shape", spec.shape_dims},
          {"dtypes", spec.dtypes},
          {"params", std::move(params)},
          {"space_size", cartesian_size(spec)},
          {"default", config_to_json(spec.default_config)},
          {"source_hash", kernel.source_hash},
          {"path", kernel.spec_path}};
}

} // namespace

RequestHandler::RequestHandler(HandlerContext context)
    : m_ctx(std::move(context)), m_quota(m_ctx.store, m_ctx.config.max_queued_jobs_per_client) {
  for (const auto& warning : m_kernel_dirs.warnings()) KTUNE_LOG(warn) << "kernel dirs: " << warning;
  m_ctx.scheduler.set_job_end_hook(
      [this](std::int64_t job_id, JobState state) { m_lookup.job_ended(job_id, state); });
  m_canary.start();
}

const std::vector<BrokenKernel>& RequestHandler::load_kernels() {
  KernelRegistry fresh;
  fresh.load(m_kernel_dirs.all());
  m_registry = std::move(fresh);
  return m_registry.broken();
}

void RequestHandler::handle(const std::shared_ptr<Client>& client, std::string_view line) {
  const auto start = std::chrono::steady_clock::now();
  if (m_stopping) {
    client->send(protocol::encode_error(protocol::decode_id(line), ErrorCode::shutting_down,
                                        "ktuned is shutting down"));
    return;
  }
  if (m_lookup.answer_line(*client, line)) return;
  auto request = protocol::decode_request(line);
  if (!request) {
    KTUNE_LOG(debug) << "rejected request (" << request.error().code
                     << "): " << request.error().message;
    client->send(protocol::encode_error(protocol::decode_id(line), request.error()));
    return;
  }
  const auto op = parse_op(request->op);
  if (!op) {
    client->send(protocol::encode_error(
        request->id, ErrorCode::unknown_op,
        "unknown op '" + request->op + "' (expected " + op_list() + ")"));
    return;
  }
  dispatch(*op, std::move(*request), client);
  const double ms = log::elapsed_ms(start);
  if (ms >= k_slow_request_ms) KTUNE_LOG(info) << "op " << to_string(*op) << " took " << ms << " ms";
}

void RequestHandler::dispatch(Op op, protocol::Request request,
                              const std::shared_ptr<Client>& client) {
  const Reply reply(client, request.id);
  const uid_t uid = client->peer().uid;
  switch (op) {
    case Op::lookup: return reply.answer(m_lookup.lookup(request, uid));
    case Op::tune: return tune(client, request);
    case Op::job: return reply.answer(job(request));
    case Op::jobs: return reply.answer(jobs(request));
    case Op::cancel: return reply.answer(cancel(request));
    case Op::import: return start_import(client, std::move(request));
    case Op::kernels: return reply.answer(kernels());
    case Op::add_kernel_dir:
    case Op::remove_kernel_dir:
      return reply.answer(
          kernel_dir_request(request, uid, m_kernel_dirs, [this] { return kernels(); }));
    case Op::stats: return reply.answer(stats());
    case Op::top: return reply.answer(top());
    case Op::devices:
      // Asked again each time: a driver installed or a GPU added since start shows up.
      return m_ctx.devices.probe(m_ctx.workers, [this, reply] { reply.ok(m_ctx.devices.to_json()); });
    case Op::compile_check:
      return start_compile_check(client, request, m_registry, m_ctx.scheduler, m_planner,
                                 m_ctx.config.cache_dir);
    case Op::confirm: return m_ab.confirm(client, request);
    case Op::canary: return m_canary.request(client, request);
    case Op::shutdown:
      KTUNE_LOG(info) << "shutdown requested by a client";
      m_ctx.request_stop();
      return reply.ok(nlohmann::json{{"stopping", true}});
  }
}

Result<nlohmann::json> RequestHandler::cancel(const protocol::Request& request) {
  auto req = protocol::JobRequest::from_json(request.body);
  if (!req) return req.error();
  if (m_ctx.scheduler.cancel(req->job)) {
    auto job = m_ctx.store.get_job(req->job);
    if (!job) return internal_error(job.error());
    return nlohmann::json{{"job", req->job},
                          {"state", job->has_value() ? std::string(to_string((*job)->state))
                                                     : std::string("cancelled")}};
  }
  auto job = m_ctx.store.get_job(req->job);
  if (!job) return internal_error(job.error());
  if (!job->has_value()) {
    return make_error(ErrorCode::unknown_job, "no job with id " + std::to_string(req->job));
  }
  return make_error(ErrorCode::bad_request, "job " + std::to_string(req->job) + " is " +
                                           std::string(to_string((*job)->state)) +
                                           ", not queued or running; nothing to cancel");
}


// What a tune reply says of the job's prior: null when the job has none (cold, a strategy that
// uses none, nothing stored), else the earlier keys it learns from.
Result<nlohmann::json> RequestHandler::submit_tune(PlanRequest request,
                                                   Result<std::vector<Config>> configs,
                                                   uid_t client) {
  auto plan = m_planner.plan(std::move(request), std::move(configs));
  if (!plan) return plan.error();
  const std::int64_t total = plan->record.total;
  const std::size_t quarantined = plan->quarantined;
  const nlohmann::json prior = prior_summary(plan->prior_sources);
  // Identical requests share one job; asking to remeasure, for a cold search or for given
  // configs always starts a new one.
  if (auto same = plan->joinable() ? m_ctx.scheduler.find_same(plan->record) : std::nullopt) {
    KTUNE_LOG(info) << "tune " << plan->record.kernel << " " << plan->record.shape << " on "
                    << plan->record.device << " joins job " << *same;
    return nlohmann::json{{"job", *same}, {"total", total}, {"state", "queued"},
                          {"joined", true}, {"quarantined", quarantined},
                          {"device", plan->record.device}, {"prior", prior}};
  }
  if (auto r = m_planner.commit(*plan); !r) return r.error();
  const std::int64_t id = plan->record.id;
  m_quota.charge(client, id);
  nlohmann::json reply{{"job", id}, {"total", total}, {"state", "queued"},
                       {"quarantined", quarantined}, {"device", plan->record.device},
                       {"prior", prior}};
  m_ctx.scheduler.enqueue(std::move(*plan));
  return reply;
}

void RequestHandler::tune(const std::shared_ptr<Client>& session, const protocol::Request& request) {
  auto fail = [&](const Error& error) {
    session->send(protocol::encode_error(request.id, error.code, error.message));
  };
  const uid_t client = session->peer().uid;
  if (auto refused = m_quota.refusal(client)) return fail(*refused);
  auto tune_request = protocol::TuneRequest::from_json(request.body);
  if (!tune_request) return fail(tune_request.error());
  const auto& req = *tune_request;

  const auto& strategies = search::strategy_names();
  if (std::find(strategies.begin(), strategies.end(), req.strategy) == strategies.end()) {
    std::string known;
    for (const auto& name : strategies) known += (known.empty() ? "" : ", ") + name;
    return fail(make_error(ErrorCode::bad_request,
                           "unknown strategy '" + req.strategy + "' (expected " + known + ")"));
  }
  if (req.budget && *req.budget < 1) {
    return fail(make_error(ErrorCode::bad_request,
                           "budget must be at least 1, got " + std::to_string(*req.budget)));
  }
  JobOptions options;
  options.remeasure = req.remeasure;
  options.priority = static_cast<int>(req.priority);
  // Lifecycle fields: "retry_failed" (run quarantined configs again) and per-job deadlines.
  if (auto it = request.body.find("retry_failed"); it != request.body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return fail(make_error(ErrorCode::bad_request, std::string("tune: field 'retry_failed' must be "
                                                            "a boolean, found ") + it->type_name()));
    }
    options.retry_failed = it->get<bool>();
  }
  std::optional<double>* deadlines[2] = {&options.compile_timeout_s, &options.bench_timeout_s};
  const char* deadline_fields[2] = {"compile_timeout_s", "bench_timeout_s"};
  for (int i = 0; i < 2; ++i) {
    auto it = request.body.find(deadline_fields[i]);
    if (it == request.body.end() || it->is_null()) continue;
    if (!it->is_number() || !(it->get<double>() > 0)) {
      return fail(make_error(ErrorCode::bad_request, std::string("tune: field '") + deadline_fields[i] +
                                                    "' must be a positive number of seconds, "
                                                    "found " + it->dump()));
    }
    // A client may shorten a deadline down to the daemon's floor or lengthen it up to its
    // limit, never beyond: a hanging candidate must always be killed, and a deadline no good
    // config can meet would only fill the job with timeouts ([limits], ktuned.toml).
    const double floor = i == 0 ? compile_timeout_floor_s(m_ctx.config.compile_timeout_s)
                                : m_ctx.config.bench_timeout_min_s;
    if (it->get<double>() < floor) {
      return fail(make_error(ErrorCode::bad_request,
                             std::string("tune: field '") + deadline_fields[i] + "' is " +
                                 it->dump() + " s, under this ktuned's minimum of " +
                                 nlohmann::json(floor).dump() + " s (" +
                                 (i == 0 ? "the smaller of 1 s and [limits] compile_timeout_s"
                                         : "[limits] bench_timeout_min_s") +
                                 " in ktuned.toml)"));
    }
    const double limit = i == 0 ? compile_timeout_limit_s(m_ctx.config.compile_timeout_s)
                                : m_ctx.config.bench_timeout_max_s;
    if (it->get<double>() > limit) {
      return fail(make_error(ErrorCode::bad_request,
                             std::string("tune: field '") + deadline_fields[i] + "' is " +
                                 it->dump() + " s, over this ktuned's limit of " +
                                 nlohmann::json(limit).dump() + " s ([limits] " +
                                 (i == 0 ? "compile_timeout_s" : "bench_timeout_max_s") +
                                 " in ktuned.toml)"));
    }
    *deadlines[i] = it->get<double>();
  }

  // The devices to tune on: one, or with "all" every local device with a family of the kernel.
  std::vector<std::string> device_names;
  if (req.device == "all") {
    for (const auto& d : m_ctx.devices.all_local()) {
      const bool cuda = d.name != "cpu";
      if (m_registry.find(req.kernel, cuda ? Language::cuda : Language::cpp)) {
        device_names.push_back(d.name);
      }
    }
    if (device_names.empty()) {
      auto known = m_registry.find(req.kernel);
      return fail(known ? make_error(ErrorCode::no_device, "kernel " + req.kernel +
                                                          " has no family for any device of this "
                                                          "machine")
                        : known.error());
    }
  } else {
    device_names.push_back(req.device);
  }
  std::vector<PlanRequest> plans;
  bool big = false;
  for (const auto& name : device_names) {
    auto target = m_targets.resolve(req.kernel, req.shape, req.dtype, name);
    if (!target) return fail(target.error());
    PlanRequest plan;
    plan.kernel = std::move(target->kernel);
    plan.shape = std::move(target->shape);
    plan.dtype = target->dtype;
    plan.device = std::move(target->device);
    plan.strategy = req.strategy;
    plan.budget = req.budget;
    plan.budget_fraction = req.budget_fraction;
    plan.budget_s = req.budget_s;
    plan.seed = req.seed.value_or(0);
    plan.cold = req.cold;
    plan.options = options;
    plan.given = req.configs;
    big = big || cartesian_size(plan.kernel.spec) > k_inline_enumeration;
    plans.push_back(std::move(plan));
  }
  const bool all = req.device == "all";
  if (!big) {
    std::vector<Result<std::vector<Config>>> spaces;
    for (const auto& plan : plans) spaces.push_back(Planner::enumerate(plan.kernel.spec, plan.shape));
    return submit_tunes(session, request, req.wait, all, std::move(plans), std::move(spaces));
  }
  // A big space is enumerated on the helper thread; the loop goes on serving meanwhile. A client
  // gone by then has its request dropped (no job is created).
  std::weak_ptr<Client> weak = session;
  auto shared = std::make_shared<std::vector<PlanRequest>>(std::move(plans));
  asio::post(m_offload, [this, weak, request, wait = req.wait, all, shared] {
    auto spaces = std::make_shared<std::vector<Result<std::vector<Config>>>>();
    for (const auto& plan : *shared) spaces->push_back(Planner::enumerate(plan.kernel.spec, plan.shape));
    asio::post(m_ctx.io, [this, weak, request, wait, all, shared, spaces] {
      auto session = weak.lock();
      if (!session || m_stopping) return;
      submit_tunes(session, request, wait, all, std::move(*shared), std::move(*spaces));
    });
  });
}

void RequestHandler::submit_tunes(const std::shared_ptr<Client>& session,
                                  const protocol::Request& request, bool wait, bool all,
                                  std::vector<PlanRequest> plans,
                                  std::vector<Result<std::vector<Config>>> spaces) {
  const uid_t client = session->peer().uid;
  nlohmann::json jobs = nlohmann::json::array();
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto submitted = submit_tune(std::move(plans[i]), std::move(spaces[i]), client);
    if (!submitted) {
      session->send(protocol::encode_error(request.id, submitted.error().code,
                                           submitted.error().message));
      return;
    }
    jobs.push_back(std::move(*submitted));
  }
  if (all) {
    if (!wait) {
      session->send(protocol::encode_ok(request.id, {{"jobs", std::move(jobs)}}));
      return;
    }
    std::vector<std::int64_t> ids;
    for (const auto& j : jobs) ids.push_back(j.at("job").get<std::int64_t>());
    return watch_jobs(session, request, std::move(ids));
  }
  if (!wait) {
    session->send(protocol::encode_ok(request.id, jobs.front()));
    return;
  }
  watch_job(session, request, jobs.front().at("job").get<std::int64_t>());
}

void RequestHandler::start_import(const std::shared_ptr<Client>& session,
                                  protocol::Request request) {
  // Reading a table of thousands of rows takes a while: it runs on the helper thread (it touches
  // nothing but the request), the store is written back on the io thread.
  std::weak_ptr<Client> weak = session;
  ImportDone done = [weak, id = request.id](Result<nlohmann::json> reply) {
    auto session = weak.lock();
    if (!session) return;
    session->send(reply ? protocol::encode_ok(id, *reply)
                        : protocol::encode_error(id, reply.error().code, reply.error().message));
  };
  asio::post(m_offload, [this, done = std::move(done), body = std::move(request.body)]() mutable {
    auto run = decode_import(body);
    body = nlohmann::json();
    asio::post(m_ctx.io, [this, run = std::move(run), done = std::move(done)]() mutable {
      import_run(std::move(run), std::move(done));
    });
  });
}

void RequestHandler::import_text(std::string text, std::string where, tableio::Policy policy,
                                 ImportDone done) {
  asio::post(m_offload, [this, text = std::move(text), where = std::move(where), policy,
                         done = std::move(done)]() mutable {
    auto table = tableio::read_table(text, where);
    Result<ImportRun> run = table ? Result<ImportRun>(ImportRun(std::move(*table), policy))
                                  : Result<ImportRun>(table.error());
    asio::post(m_ctx.io, [this, run = std::move(run), done = std::move(done)]() mutable {
      import_run(std::move(run), std::move(done));
    });
  });
}

void RequestHandler::import_run(Result<ImportRun> run, ImportDone done) {
  if (m_stopping) return;
  if (!run) {
    done(run.error());
    return;
  }
  auto state = std::make_shared<ImportRun>(std::move(*run));
  if (auto r = m_ctx.writer.write_now("the start of an import",
                                      [&](Store& store) { return state->prepare(store); });
      !r) {
    done(internal_error(r.error()));
    return;
  }
  import_step(std::move(state), std::move(done));
}

void RequestHandler::import_step(std::shared_ptr<ImportRun> run, ImportDone done) {
  std::vector<WinnerRecord> upserted;
  auto stored = m_ctx.writer.write_now("a step of an import", [&](Store& store) {
    return run->step(store, k_import_step_rows, &upserted);
  });
  if (!stored) upserted.clear(); // the step was rolled back
  // A database that takes no writes for now (locked by another process, a full disk): the step
  // is tried again later, for up to k_import_wait; the loop goes on serving meanwhile.
  if (!stored && is_transient(stored.error()) && run->waited() < k_import_wait) {
    auto timer = std::make_shared<asio::steady_timer>(m_ctx.io, k_import_retry);
    run->wait(k_import_retry);
    timer->async_wait([this, timer, run = std::move(run),
                       done = std::move(done)](const boost::system::error_code& ec) mutable {
      if (ec || m_stopping) return;
      import_step(std::move(run), std::move(done));
    });
    return;
  }
  std::set<std::string> fingerprints;
  for (const auto& winner : upserted) {
    m_lookup.learn(winner);
    fingerprints.insert(winner.fingerprint);
  }
  // Imported devices can be named by fingerprint in lookups from now on.
  for (const auto& fingerprint : fingerprints) {
    if (auto device = m_ctx.store.get_device(fingerprint); device && device->has_value()) {
      m_ctx.devices.remember(**device);
    }
  }
  if (!stored) {
    KTUNE_LOG(warn) << "import stopped after " << run->rows_done() << " rows: "
                    << stored.error().message;
    done(make_error(ErrorCode::internal, stored.error().message + " (the rows before this step of " +
                                        std::to_string(k_import_step_rows) + " are imported)"));
    return;
  }
  if (run->done()) {
    done(run->reply());
    return;
  }
  asio::post(m_ctx.io, [this, run = std::move(run), done = std::move(done)]() mutable {
    if (m_stopping) return;
    import_step(std::move(run), std::move(done));
  });
}

void RequestHandler::watch_jobs(const std::shared_ptr<Client>& session,
                                const protocol::Request& request, std::vector<std::int64_t> ids) {
  // Progress events of every job (each names its job); one reply once the last one ended:
  // {"jobs":[summary, ...]} in the order of `ids`.
  struct Waiting {
    std::vector<std::int64_t> ids;
    std::size_t left = 0;
  };
  auto waiting = std::make_shared<Waiting>(Waiting{ids, ids.size()});
  std::weak_ptr<Client> weak = session;
  auto reply = [this, weak, waiting, request_id = request.id] {
    auto s = weak.lock();
    if (!s) return;
    nlohmann::json summaries = nlohmann::json::array();
    for (const std::int64_t job : waiting->ids) {
      auto summary = job_summary(m_ctx.store, job, WithResults::no);
      if (!summary) {
        s->send(protocol::encode_error(request_id, ErrorCode::internal, summary.error().message));
        return;
      }
      summaries.push_back(std::move(*summary));
    }
    s->send(protocol::encode_ok(request_id, {{"jobs", std::move(summaries)}}));
  };
  for (const std::int64_t id : ids) {
    JobWatcher watcher;
    watcher.on_progress = [weak, request_id = request.id](const nlohmann::json& progress) {
      if (auto s = weak.lock()) s->send(protocol::encode_event(request_id, "progress", progress));
    };
    watcher.on_finished = [waiting, reply](std::int64_t) {
      if (--waiting->left == 0) reply();
    };
    if (!m_ctx.scheduler.watch(id, std::move(watcher))) --waiting->left; // ended already
  }
  if (waiting->left == 0) reply();
}

void RequestHandler::watch_job(const std::shared_ptr<Client>& session,
                               const protocol::Request& request, std::int64_t job_id) {
  std::weak_ptr<Client> weak = session;
  JobWatcher watcher;
  watcher.on_progress = [weak, request_id = request.id](const nlohmann::json& progress) {
    if (auto s = weak.lock()) s->send(protocol::encode_event(request_id, "progress", progress));
  };
  watcher.on_finished = [this, weak, request_id = request.id](std::int64_t finished) {
    auto s = weak.lock();
    if (!s) return;
    auto summary = job_summary(m_ctx.store, finished, WithResults::no);
    s->send(summary ? protocol::encode_ok(request_id, *summary)
                    : protocol::encode_error(request_id, ErrorCode::internal, summary.error().message));
  };
  if (!m_ctx.scheduler.watch(job_id, std::move(watcher))) {
    session->send(protocol::encode_error(
        request.id, ErrorCode::internal, "job " + std::to_string(job_id) + " vanished before it started"));
  }
}


Result<nlohmann::json> RequestHandler::job(const protocol::Request& request) {
  auto req = protocol::JobRequest::from_json(request.body);
  if (!req) return req.error();
  auto summary = job_summary(m_ctx.store, req->job, WithResults::yes);
  if (!summary && summary.error().code != ErrorCode::unknown_job) return internal_error(summary.error());
  if (summary) mark_stalled(*summary);
  return summary;
}

void RequestHandler::mark_stalled(nlohmann::json& job) const {
  // While the store's writes wait, a job that is not over cannot record its progress or its end.
  const StoreWriter& writer = m_ctx.writer;
  if (!writer.stall()) return;
  const std::string state = job.value("state", "");
  if (state == "queued" || state == "running") job["stalled"] = writer.describe_stall();
}

Result<nlohmann::json> RequestHandler::jobs(const protocol::Request& request) {
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

Result<nlohmann::json> RequestHandler::kernels() {
  load_kernels();
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& [name, language] : m_registry.families()) {
    // find() re-reads the family and keeps the registry's broken list current.
    if (auto kernel = m_registry.find(name, language)) listed.push_back(kernel_to_json(*kernel));
  }
  nlohmann::json broken = nlohmann::json::array();
  for (const auto& b : m_registry.broken()) {
    broken.push_back({{"path", b.spec_path}, {"error", b.error.message}});
  }
  return nlohmann::json{{"kernels", std::move(listed)},
                        {"broken", std::move(broken)},
                        {"missing_dirs", m_registry.missing_dirs()},
                        {"cuda_backend", m_ctx.devices.cuda_backend()}};
}

nlohmann::json RequestHandler::store_state() const {
  const auto stall = m_ctx.writer.stall();
  if (!stall) return {{"stalled", false}};
  return {{"stalled", true},
          {"reason", stall->reason},
          {"waiting", stall->waiting},
          {"spilling", stall->spilling},
          {"description", m_ctx.writer.describe_stall()}};
}

namespace {

// A lane's machine-wide measurement lock in `stats`: its file, and whether measurements ran
// without it (how many, and the latest reason).
nlohmann::json measure_lock_json(const WorkerPool& workers, const std::string& lane) {
  const std::string path = workers.measure_lock_path(lane);
  const WorkerPool::Unlocked unlocked = workers.unlocked(lane);
  return {{"path", path.empty() ? nlohmann::json() : nlohmann::json(path)},
          {"unlocked_measurements", unlocked.measurements},
          {"unlocked", unlocked.why.empty() ? nlohmann::json() : nlohmann::json(unlocked.why)}};
}

} // namespace

Result<nlohmann::json> RequestHandler::stats() const {
  using namespace std::chrono;
  const double uptime_s = duration<double>(steady_clock::now() - m_ctx.started).count();
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& lane : m_ctx.workers.lanes()) {
    const std::int64_t job = m_ctx.scheduler.running_on(lane);
    nlohmann::json entry = {{"device", lane},
                            {"job", job != 0 ? nlohmann::json(job) : nlohmann::json()},
                            {"busy", m_ctx.workers.busy(lane) > 0},
                            {"waiting", m_ctx.workers.waiting(lane)}};
    if (lane == "cpu") {
      const auto cpu = m_ctx.workers.bench_cpu();
      entry["bench_cpu"] = cpu ? nlohmann::json(*cpu) : nlohmann::json();
      entry["bench_cpu_claimed"] = m_ctx.workers.bench_cpu_claimed();
      const std::string& problem = m_ctx.workers.claim_problem();
      entry["bench_cpu_claim_problem"] = problem.empty() ? nlohmann::json() : nlohmann::json(problem);
    }
    entry["measure_lock"] = measure_lock_json(m_ctx.workers, lane);
    lanes.push_back(std::move(entry));
  }
  const std::string metrics = m_ctx.metrics_address ? m_ctx.metrics_address() : std::string();
  return nlohmann::json{
      {"pid", ::getpid()},
      {"version", KTUNE_VERSION},
      {"uptime_s", uptime_s},
      {"connections", m_ctx.connections()},
      {"jobs_queued", m_ctx.scheduler.queued()},
      {"jobs_running", m_ctx.scheduler.running()},
      {"workers",
       {{"compile", m_ctx.workers.alive(WorkerRole::compile)},
        {"bench", m_ctx.workers.alive(WorkerRole::bench)},
        {"compile_limit", m_ctx.workers.compile_limit()},
        {"compile_waiting", m_ctx.workers.waiting("")}}},
      {"lanes", std::move(lanes)},
      {"store", store_state()},
      {"device", {{"name", m_ctx.devices.cpu().name},
                  {"fingerprint", m_ctx.devices.cpu().fingerprint}}},
      {"max_message_bytes", m_ctx.config.max_message_bytes},
      {"db", m_ctx.config.db},
      {"socket", m_ctx.config.socket},
      {"kernel_dirs", m_kernel_dirs.all()},
      {"measure", m_ctx.config.measure.to_json()},
      {"limits", {{"compile_timeout_s", m_ctx.config.compile_timeout_s},
                  {"bench_timeout_s", m_ctx.config.bench_timeout_s},
                  {"bench_timeout_min_s", m_ctx.config.bench_timeout_min_s},
                  {"bench_timeout_max_s", m_ctx.config.bench_timeout_max_s},
                  {"worker_memory_mb", m_ctx.config.worker_memory_mb},
                  {"compile_memory_mb", m_ctx.config.compile_memory_mb}}},
      {"metrics", metrics.empty() ? nlohmann::json() : nlohmann::json(metrics)},
      {"table", table_status_json(m_publisher.status())},
  };
}

Result<nlohmann::json> RequestHandler::top() const {
  const double uptime_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m_ctx.started).count();
  return top_view(DaemonView{m_ctx.scheduler, m_ctx.workers, m_lookup.counters(), uptime_s,
                             m_ctx.connections()});
}

} // namespace ktune::daemon
