#include "daemon/handlers.hpp"

#include "daemon/log.hpp"
#include "daemon/replies.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

namespace ktune::daemon {

namespace code = protocol::code;

namespace {

// Requests slower than this are logged with their duration.
constexpr double k_slow_request_ms = 100.0;

// Store failures are the daemon's problem, not the request's: reply "internal".
Error internal_error(const Error& error) {
  return make_error(code::internal, error.code + ": " + error.message);
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

bool is_cuda_device(const std::string& device) {
  if (device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  return std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json kernel_to_json(const LoadedKernel& kernel) {
  const KernelSpec& spec = kernel.spec;
  nlohmann::json params = nlohmann::json::object();
  for (const auto& param : spec.params) params[param.name] = param.values;
  return {{"name", spec.name},
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

RequestHandler::RequestHandler(HandlerContext context) : m_ctx(std::move(context)) {}

const std::vector<BrokenKernel>& RequestHandler::load_kernels() {
  KernelRegistry fresh;
  fresh.load(m_ctx.config.kernel_dirs);
  m_registry = std::move(fresh);
  return m_registry.broken();
}

void RequestHandler::handle(const std::shared_ptr<Session>& session, std::string_view line) {
  const auto start = std::chrono::steady_clock::now();
  if (m_stopping) {
    session->send(protocol::encode_error(protocol::decode_id(line), code::shutting_down,
                                         "ktuned is shutting down"));
    return;
  }
  auto request = protocol::decode_request(line);
  if (!request) {
    KTUNE_LOG(debug) << "rejected request (" << request.error().code
                     << "): " << request.error().message;
    session->send(protocol::encode_error(protocol::decode_id(line), request.error().code,
                                         request.error().message));
    return;
  }
  if (request->op == "tune") {
    tune(session, *request);
  } else {
    const auto reply = answer(*request);
    session->send(reply ? protocol::encode_ok(request->id, *reply)
                        : protocol::encode_error(request->id, reply.error().code,
                                                 reply.error().message));
  }
  const double ms = log::elapsed_ms(start);
  if (ms >= k_slow_request_ms) KTUNE_LOG(info) << "op " << request->op << " took " << ms << " ms";
}

Result<nlohmann::json> RequestHandler::answer(const protocol::Request& request) {
  const std::string& op = request.op;
  if (op == "lookup") return lookup(request);
  if (op == "job") return job(request);
  if (op == "jobs") return jobs(request);
  if (op == "kernels") return kernels();
  if (op == "stats") return stats();
  if (op == "shutdown") {
    KTUNE_LOG(info) << "shutdown requested by a client";
    m_ctx.request_stop();
    return nlohmann::json{{"stopping", true}};
  }
  return make_error(code::unknown_op, "unknown op '" + op +
                                          "' (expected lookup, tune, job, jobs, kernels, stats "
                                          "or shutdown)");
}

Result<RequestHandler::Target> RequestHandler::resolve(const std::string& kernel_name,
                                                       const std::string& shape_text,
                                                       const std::string& dtype,
                                                       const std::string& device) {
  auto kernel = m_registry.find(kernel_name);
  if (!kernel) return kernel.error();
  const KernelSpec& spec = kernel->spec;

  auto shape = Shape::parse(shape_text);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, spec.shape_dims, spec.name);
  if (!conformed) return conformed.error();

  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), dtype) == spec.dtypes.end()) {
    return make_error(code::bad_dtype, "kernel " + spec.name + " does not declare dtype '" +
                                           dtype + "' (declared: " + join(spec.dtypes, ", ") + ")");
  }

  if (is_cuda_device(device)) {
    return make_error(code::no_device, "device " + device + ": this ktuned has no CUDA backend");
  }
  if (device != "cpu") {
    return make_error(code::unknown_device,
                      "unknown device '" + device + "' (expected cpu or cuda:N)");
  }
  if (spec.language != Language::cpp) {
    return make_error(code::no_device, "kernel " + spec.name + " is written in " +
                                           std::string(to_string(spec.language)) +
                                           " and cannot run on device cpu; this ktuned has no "
                                           "CUDA backend");
  }
  if (auto c_type = dtype_c_type(dtype); !c_type) {
    return make_error(code::bad_dtype,
                      "dtype '" + dtype + "' cannot run on device cpu: " + c_type.error().message);
  }
  return Target{std::move(*kernel), std::move(*conformed), dtype};
}

void RequestHandler::tune(const std::shared_ptr<Session>& session, const protocol::Request& request) {
  auto fail = [&](const Error& error) {
    session->send(protocol::encode_error(request.id, error.code, error.message));
  };
  auto tune_request = protocol::TuneRequest::from_json(request.body);
  if (!tune_request) return fail(tune_request.error());
  const auto& req = *tune_request;

  auto target = resolve(req.kernel, req.shape, req.dtype, req.device);
  if (!target) return fail(target.error());
  if (req.strategy != "exhaustive") {
    return fail(make_error(code::bad_request, "unknown strategy '" + req.strategy +
                                                  "' (this ktuned supports: exhaustive)"));
  }
  if (req.budget && *req.budget < 1) {
    return fail(make_error(code::bad_request,
                           "budget must be at least 1, got " + std::to_string(*req.budget)));
  }
  const KernelSpec& spec = target->kernel.spec;
  auto space = ParamSpace::create(spec, target->shape);
  if (!space) return fail(space.error());
  const auto start = std::chrono::steady_clock::now();
  auto configs = space->enumerate();
  if (!configs) return fail(configs.error());
  KTUNE_LOG(debug) << "enumerated " << configs->size() << " of " << space->cartesian_size()
                   << " configs of " << spec.name << " in " << log::elapsed_ms(start) << " ms";
  if (configs->empty()) {
    return fail(make_error(code::empty_space,
                           "kernel " + spec.name + " admits no config at " +
                               target->shape.to_string() + ": all " +
                               std::to_string(space->cartesian_size()) +
                               " combinations are rejected by [space].constraints"));
  }
  if (req.budget && static_cast<std::uint64_t>(*req.budget) < configs->size()) {
    configs->resize(static_cast<std::size_t>(*req.budget));
  }

  const DeviceInfo& device = m_ctx.cpu;
  if (auto r = m_ctx.store.upsert_kernel(spec.name, target->kernel.source_hash,
                                         read_text(target->kernel.spec_path));
      !r) {
    return fail(internal_error(r.error()));
  }
  if (auto r = m_ctx.store.upsert_device(device); !r) return fail(internal_error(r.error()));

  JobRecord record;
  record.kernel = spec.name;
  record.source_hash = target->kernel.source_hash;
  record.shape = target->shape.to_string();
  record.dtype = target->dtype;
  record.device = device.name;
  record.fingerprint = device.fingerprint;
  record.strategy = req.strategy;
  record.budget = req.budget;
  record.state = JobState::queued;
  record.total = static_cast<std::int64_t>(configs->size());
  auto id = m_ctx.store.create_job(record);
  if (!id) return fail(internal_error(id.error()));
  record.id = *id;

  const std::int64_t total = record.total;
  m_ctx.scheduler.enqueue(JobPlan{std::move(record), std::move(target->kernel),
                                  std::move(target->shape), std::move(*configs)});
  if (!req.wait) {
    session->send(protocol::encode_ok(request.id,
                                      {{"job", *id}, {"total", total}, {"state", "queued"}}));
    return;
  }

  std::weak_ptr<Session> weak = session;
  JobWatcher watcher;
  watcher.on_progress = [weak, request_id = request.id](const nlohmann::json& progress) {
    if (auto s = weak.lock()) s->send(protocol::encode_event(request_id, "progress", progress));
  };
  watcher.on_finished = [this, weak, request_id = request.id](std::int64_t job_id) {
    auto s = weak.lock();
    if (!s) return;
    auto summary = job_summary(m_ctx.store, job_id, WithResults::no);
    s->send(summary ? protocol::encode_ok(request_id, *summary)
                    : protocol::encode_error(request_id, code::internal, summary.error().message));
  };
  if (!m_ctx.scheduler.watch(*id, std::move(watcher))) {
    fail(make_error(code::internal, "job " + std::to_string(*id) + " vanished before it started"));
  }
}

Result<nlohmann::json> RequestHandler::lookup(const protocol::Request& request) {
  auto req = protocol::LookupRequest::from_json(request.body);
  if (!req) return req.error();
  auto target = resolve(req->kernel, req->shape, req->dtype, req->device);
  if (!target) return target.error();

  const std::string& kernel = target->kernel.spec.name;
  const std::string& source_hash = target->kernel.source_hash;
  const std::string shape = target->shape.to_string();
  const std::string& fingerprint = m_ctx.cpu.fingerprint;
  auto winner = m_ctx.store.find_winner(kernel, source_hash, shape, target->dtype, fingerprint);
  if (!winner) return internal_error(winner.error());
  if (winner->has_value()) {
    const WinnerRecord& w = **winner;
    return nlohmann::json{{"rung", "exact"},
                          {"exact", true},
                          {"config", stored_config_to_json(w.config)},
                          {"median_ms", w.median_ms},
                          {"gflops", w.gflops},
                          {"job", w.job_id}};
  }

  auto all = m_ctx.store.all_winners();
  if (!all) return internal_error(all.error());
  const bool source_changed = std::any_of(all->begin(), all->end(), [&](const WinnerRecord& w) {
    return w.kernel == kernel && w.shape == shape && w.dtype == target->dtype &&
           w.fingerprint == fingerprint && w.source_hash != source_hash;
  });
  return nlohmann::json{{"rung", "default"},
                        {"exact", false},
                        {"config", config_to_json(target->kernel.spec.default_config)},
                        {"reason", source_changed ? "source_changed" : "not_tuned"}};
}

Result<nlohmann::json> RequestHandler::job(const protocol::Request& request) {
  auto req = protocol::JobRequest::from_json(request.body);
  if (!req) return req.error();
  auto summary = job_summary(m_ctx.store, req->job, WithResults::yes);
  if (!summary && summary.error().code != code::unknown_job) return internal_error(summary.error());
  return summary;
}

Result<nlohmann::json> RequestHandler::jobs(const protocol::Request& request) {
  auto req = protocol::JobsRequest::from_json(request.body);
  if (!req) return req.error();
  auto list = m_ctx.store.list_jobs(req->limit);
  if (!list) return internal_error(list.error());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& j : *list) out.push_back(job_to_json(j));
  return nlohmann::json{{"jobs", std::move(out)}};
}

Result<nlohmann::json> RequestHandler::kernels() {
  load_kernels();
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& name : m_registry.names()) {
    // find() re-reads the family and keeps the registry's broken list current.
    if (auto kernel = m_registry.find(name)) listed.push_back(kernel_to_json(*kernel));
  }
  nlohmann::json broken = nlohmann::json::array();
  for (const auto& b : m_registry.broken()) {
    broken.push_back({{"path", b.spec_path}, {"error", b.error.message}});
  }
  return nlohmann::json{{"kernels", std::move(listed)}, {"broken", std::move(broken)}};
}

Result<nlohmann::json> RequestHandler::stats() const {
  using namespace std::chrono;
  const double uptime_s = duration<double>(steady_clock::now() - m_ctx.started).count();
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
        {"compile_limit", m_ctx.workers.limit(WorkerRole::compile)}}},
      {"device", {{"name", m_ctx.cpu.name}, {"fingerprint", m_ctx.cpu.fingerprint}}},
      {"db", m_ctx.config.db},
      {"socket", m_ctx.config.socket},
      {"kernel_dirs", m_ctx.config.kernel_dirs},
  };
}

} // namespace ktune::daemon
