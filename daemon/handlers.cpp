#include "daemon/handlers.hpp"

#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/reply.hpp"

#include <chrono>

namespace ktune::daemon {

namespace {

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

RequestHandler::RequestHandler(HandlerContext context) : m_ctx(std::move(context)) {
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
    case Op::tune: return m_jobs.tune(client, request);
    case Op::job: return reply.answer(m_jobs.job(request));
    case Op::jobs: return reply.answer(m_jobs.jobs(request));
    case Op::cancel: return reply.answer(m_jobs.cancel(request));
    case Op::import: return m_imports.request(client, std::move(request));
    case Op::kernels: return reply.answer(kernels());
    case Op::add_kernel_dir:
    case Op::remove_kernel_dir:
      return reply.answer(
          kernel_dir_request(request, uid, m_kernel_dirs, [this] { return kernels(); }));
    case Op::stats:
      return reply.ok(stats_view(
          view(), StatsSources{m_ctx.config, m_ctx.devices, m_kernel_dirs.all(),
                               table_status_json(m_publisher.status()),
                               m_ctx.metrics_address ? m_ctx.metrics_address() : std::string()}));
    case Op::top: return reply.ok(top_view(view()));
    case Op::devices:
      // Asked again each time: a driver installed or a GPU added since start shows up.
      return m_ctx.devices.probe(m_ctx.workers, [this, reply] { reply.ok(m_ctx.devices.to_json()); });
    case Op::compile_check: return m_jobs.compile_check(client, request);
    case Op::confirm: return m_ab.confirm(client, request);
    case Op::canary: return m_canary.request(client, request);
    case Op::revalidate: return reply.answer(m_lookup.revalidate_all(request, uid));
    case Op::shutdown:
      KTUNE_LOG(info) << "shutdown requested by a client";
      m_ctx.request_stop();
      return reply.ok(nlohmann::json{{"stopping", true}});
  }
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

DaemonView RequestHandler::view() const {
  const double uptime_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m_ctx.started).count();
  return DaemonView{m_ctx.scheduler, m_ctx.workers, m_ctx.writer, m_lookup.counters(), uptime_s,
                    m_ctx.connections()};
}

} // namespace ktune::daemon
