#include "daemon/handlers.hpp"

#include "search/strategy.hpp"

#include "daemon/compile_check.hpp"
#include "daemon/devices.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/table_import.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
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

// A tune for a CUDA device runs twice through tune(): first the workers are asked for the
// device, then tune() runs again with the device's identity under this key. Clients cannot set
// it: handle() removes it from every request.
constexpr const char* k_resolved_device = "resolved_device";

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

RequestHandler::RequestHandler(HandlerContext context)
    : m_ctx(std::move(context)), m_quota(m_ctx.store, m_ctx.config.max_queued_jobs_per_client) {
  const char* policy = std::getenv("KTUNE_TUNE_ON_MISS");
  m_tune_on_miss_policy = policy && std::string_view(policy) == "1";
  auto winners = m_ctx.store.all_winners();
  if (winners) {
    for (const auto& w : *winners) m_index.put(w);
    KTUNE_LOG(info) << "winner index: " << m_index.size() << " winner(s) loaded";
  } else {
    KTUNE_LOG(error) << "cannot load the winners; lookups start from an empty index: "
                     << winners.error().message;
  }
  m_ctx.scheduler.set_job_end_hook(
      [this](std::int64_t job_id, JobState state) { on_job_end(job_id, state); });
}

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
  if (fast_lookup(session, line)) return;
  auto request = protocol::decode_request(line);
  if (!request) {
    KTUNE_LOG(debug) << "rejected request (" << request.error().code
                     << "): " << request.error().message;
    session->send(protocol::encode_error(protocol::decode_id(line), request.error().code,
                                         request.error().message));
    return;
  }
  if (request->op == "tune") {
    request->body.erase(k_resolved_device);
    tune(session, *request);
  } else if (request->op == "devices") {
    std::weak_ptr<Session> weak = session;
    query_cuda_devices(m_ctx.workers, [weak, id = request->id, cpu = m_ctx.cpu](
                                          Result<std::vector<DeviceInfo>> cuda) {
      if (auto s = weak.lock()) s->send(protocol::encode_ok(id, devices_reply(cpu, cuda)));
    });
  } else if (request->op == "compile_check") {
    start_compile_check(session, *request, m_registry, m_ctx.workers, m_ctx.config.cache_dir);
  } else {
    const auto reply = answer(*request, session->peer().uid);
    session->send(reply ? protocol::encode_ok(request->id, *reply)
                        : protocol::encode_error(request->id, reply.error().code,
                                                 reply.error().message));
  }
  const double ms = log::elapsed_ms(start);
  if (ms >= k_slow_request_ms) KTUNE_LOG(info) << "op " << request->op << " took " << ms << " ms";
}

Result<nlohmann::json> RequestHandler::answer(const protocol::Request& request, uid_t client) {
  const std::string& op = request.op;
  if (op == "lookup") return lookup(request, client);
  if (op == "job") return job(request);
  if (op == "jobs") return jobs(request);
  if (op == "kernels") return kernels();
  if (op == "stats") return stats();
  if (op == "cancel") return cancel(request);
  if (op == "import") {
    std::vector<WinnerRecord> upserted;
    auto reply = import_op(m_ctx.store, request.body, &upserted);
    for (const auto& winner : upserted) m_index.put(winner);
    return reply;
  }
  if (op == "shutdown") {
    KTUNE_LOG(info) << "shutdown requested by a client";
    m_ctx.request_stop();
    return nlohmann::json{{"stopping", true}};
  }
  return make_error(code::unknown_op, "unknown op '" + op +
                                          "' (expected lookup, tune, job, jobs, cancel, import, "
                                          "kernels, stats, devices, compile_check or shutdown)");
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
    return make_error(code::unknown_job, "no job with id " + std::to_string(req->job));
  }
  return make_error(code::bad_request, "job " + std::to_string(req->job) + " is " +
                                           std::string(to_string((*job)->state)) +
                                           ", not queued or running; nothing to cancel");
}

Result<RequestHandler::Target> RequestHandler::resolve(const std::string& kernel_name,
                                                       const std::string& shape_text,
                                                       const std::string& dtype,
                                                       const std::string& device) {
  const bool cuda = is_cuda_device(device);
  if (!cuda && device != "cpu") {
    return make_error(code::unknown_device,
                      "unknown device '" + device + "' (expected cpu or cuda:N)");
  }
  auto kernel = m_registry.find(kernel_name, cuda ? Language::cuda : Language::cpp);
  if (!kernel && !cuda && kernel.error().code == code::unknown_kernel) {
    if (auto other = m_registry.find(kernel_name)) kernel = std::move(other); // rejected below
  }
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

  if (cuda) return Target{std::move(*kernel), std::move(*conformed), dtype};
  if (spec.language != Language::cpp) {
    return make_error(code::no_device, "kernel " + spec.name + " is written in " +
                                           std::string(to_string(spec.language)) +
                                           " and cannot run on device cpu (tune it with "
                                           "--device cuda:N)");
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
  const uid_t client = session->peer().uid;
  if (auto refused = m_quota.refusal(client)) return fail(*refused);
  auto tune_request = protocol::TuneRequest::from_json(request.body);
  if (!tune_request) return fail(tune_request.error());
  const auto& req = *tune_request;

  const auto resolved = request.body.find(k_resolved_device);
  if (is_cuda_device(req.device) && resolved == request.body.end()) {
    // The workers, not the daemon, load the CUDA driver: ask one for the device first (without
    // a usable device every CUDA request is no_device, whatever else it names).
    std::weak_ptr<Session> weak = session;
    query_cuda_devices(m_ctx.workers, [this, weak, request, device = req.device](
                                          Result<std::vector<DeviceInfo>> devices) {
      auto s = weak.lock();
      if (!s) return;
      auto found = devices ? find_cuda_device(*devices, device) : Result<DeviceInfo>(devices.error());
      if (!found) {
        KTUNE_LOG(info) << "tune on " << device << " refused (" << found.error().code
                        << "): " << found.error().message;
        s->send(protocol::encode_error(request.id, found.error().code,
                                       "device " + device + ": " + found.error().message));
        return;
      }
      protocol::Request again = request;
      again.body[k_resolved_device] = {
          {"name", found->name}, {"fingerprint", found->fingerprint}, {"details", found->details}};
      tune(s, again);
    });
    return;
  }

  auto target = resolve(req.kernel, req.shape, req.dtype, req.device);
  if (!target) return fail(target.error());
  const auto& strategies = search::strategy_names();
  if (std::find(strategies.begin(), strategies.end(), req.strategy) == strategies.end()) {
    std::string known;
    for (const auto& name : strategies) known += (known.empty() ? "" : ", ") + name;
    return fail(make_error(code::bad_request,
                           "unknown strategy '" + req.strategy + "' (expected " + known + ")"));
  }
  if (req.budget && *req.budget < 1) {
    return fail(make_error(code::bad_request,
                           "budget must be at least 1, got " + std::to_string(*req.budget)));
  }
  // Lifecycle fields: "retry_failed" (run quarantined configs again) and per-job deadlines.
  bool retry_failed = false;
  if (auto it = request.body.find("retry_failed"); it != request.body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return fail(make_error(code::bad_request, std::string("tune: field 'retry_failed' must be "
                                                            "a boolean, found ") + it->type_name()));
    }
    retry_failed = it->get<bool>();
  }
  std::optional<double> deadlines[2];
  const char* deadline_fields[2] = {"compile_timeout_s", "bench_timeout_s"};
  for (int i = 0; i < 2; ++i) {
    auto it = request.body.find(deadline_fields[i]);
    if (it == request.body.end() || it->is_null()) continue;
    if (!it->is_number() || !(it->get<double>() > 0)) {
      return fail(make_error(code::bad_request, std::string("tune: field '") + deadline_fields[i] +
                                                    "' must be a positive number of seconds, "
                                                    "found " + it->dump()));
    }
    deadlines[i] = it->get<double>();
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
  const DeviceInfo device =
      resolved == request.body.end()
          ? m_ctx.cpu
          : DeviceInfo{resolved->value("name", ""), resolved->value("fingerprint", ""),
                       resolved->value("details", nlohmann::json::object())};
  std::size_t quarantined = 0;
  if (!retry_failed) {
    auto dropped = drop_quarantined(m_ctx.store, spec.name, target->kernel.source_hash,
                                    device.fingerprint, *configs);
    if (!dropped) return fail(internal_error(dropped.error()));
    quarantined = *dropped;
    if (quarantined > 0) {
      KTUNE_LOG(info) << spec.name << ": skipping " << quarantined
                      << " quarantined config(s) that crashed or hung in earlier jobs";
    }
    if (configs->empty()) {
      return fail(make_error(code::empty_space,
                             "every config of " + spec.name + " at " + target->shape.to_string() +
                                 " crashed or hung in an earlier job (" +
                                 std::to_string(quarantined) +
                                 " quarantined); tune with retry_failed to run them again"));
    }
  }
  // The budget in evaluations: a count, or a share of the admitted configs (at least 1).
  std::optional<std::int64_t> budget = req.budget;
  if (req.budget_fraction) {
    budget = std::max<std::int64_t>(
        1, std::llround(*req.budget_fraction * static_cast<double>(configs->size())));
  }
  if (budget && static_cast<std::uint64_t>(*budget) >= configs->size()) budget.reset();

  JobRecord record;
  record.kernel = spec.name;
  record.source_hash = target->kernel.source_hash;
  record.shape = target->shape.to_string();
  record.dtype = target->dtype;
  record.device = device.name;
  record.fingerprint = device.fingerprint;
  record.strategy = req.strategy;
  record.budget = budget;
  record.seed = req.seed.value_or(0);
  record.state = JobState::queued;
  record.total = budget ? *budget : static_cast<std::int64_t>(configs->size());
  record.options.remeasure = req.remeasure;
  record.options.retry_failed = retry_failed;
  record.options.priority = static_cast<int>(req.priority);
  record.options.compile_timeout_s = deadlines[0];
  record.options.bench_timeout_s = deadlines[1];

  // Identical requests share one job; asking to remeasure always starts a new one.
  if (auto same = req.remeasure ? std::nullopt : m_ctx.scheduler.find_same(record)) {
    KTUNE_LOG(info) << "tune " << spec.name << " " << record.shape << " joins job " << *same;
    if (!req.wait) {
      session->send(protocol::encode_ok(request.id, {{"job", *same},
                                                     {"total", record.total},
                                                     {"state", "queued"},
                                                     {"joined", true},
                                                     {"quarantined", quarantined}}));
      return;
    }
    return watch_job(session, request, *same);
  }
  auto reusable = reusable_results(m_ctx.store, record);
  if (!reusable) return fail(internal_error(reusable.error()));

  if (auto r = m_ctx.store.upsert_kernel(spec.name, target->kernel.source_hash,
                                         read_text(target->kernel.spec_path));
      !r) {
    return fail(internal_error(r.error()));
  }
  if (auto r = m_ctx.store.upsert_device(device); !r) return fail(internal_error(r.error()));

  auto id = m_ctx.store.create_job(record);
  if (!id) return fail(internal_error(id.error()));
  record.id = *id;
  m_quota.charge(client, *id);

  const std::int64_t total = record.total;
  JobPlan plan;
  plan.record = std::move(record);
  plan.kernel = std::move(target->kernel);
  plan.shape = std::move(target->shape);
  plan.configs = std::move(*configs);
  plan.reusable = std::move(*reusable);
  m_ctx.scheduler.enqueue(std::move(plan));
  if (!req.wait) {
    session->send(protocol::encode_ok(request.id, {{"job", *id},
                                                   {"total", total},
                                                   {"state", "queued"},
                                                   {"quarantined", quarantined}}));
    return;
  }

  watch_job(session, request, *id);
}

void RequestHandler::watch_job(const std::shared_ptr<Session>& session,
                               const protocol::Request& request, std::int64_t job_id) {
  std::weak_ptr<Session> weak = session;
  JobWatcher watcher;
  watcher.on_progress = [weak, request_id = request.id](const nlohmann::json& progress) {
    if (auto s = weak.lock()) s->send(protocol::encode_event(request_id, "progress", progress));
  };
  watcher.on_finished = [this, weak, request_id = request.id](std::int64_t finished) {
    auto s = weak.lock();
    if (!s) return;
    auto summary = job_summary(m_ctx.store, finished, WithResults::no);
    s->send(summary ? protocol::encode_ok(request_id, *summary)
                    : protocol::encode_error(request_id, code::internal, summary.error().message));
  };
  if (!m_ctx.scheduler.watch(job_id, std::move(watcher))) {
    session->send(protocol::encode_error(
        request.id, code::internal, "job " + std::to_string(job_id) + " vanished before it started"));
  }
}

namespace {

// One member of a flat JSON object: `raw` is the value's text (a string without its quotes).
struct FlatField {
  std::string_view key;
  std::string_view raw;
  bool is_string = false;
};
constexpr int k_max_flat_fields = 12;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Scans `text` as a JSON object whose members are plain ASCII strings without escapes, integers,
// true, false or null. Returns the member count, or -1 for anything else (the caller then takes
// the general path, which parses and reports errors).
int scan_flat_object(std::string_view text, FlatField* fields, int max_fields) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto skip = [&] {
    while (i < n && is_space(text[i])) ++i;
  };
  auto string_at = [&](std::string_view& out) {
    if (i >= n || text[i] != '"') return false;
    const std::size_t begin = ++i;
    while (i < n && text[i] != '"') {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '\\' || c < 0x20 || c > 0x7e) return false;
      ++i;
    }
    if (i >= n) return false;
    out = text.substr(begin, i - begin);
    ++i;
    return true;
  };
  skip();
  if (i >= n || text[i] != '{') return -1;
  ++i;
  skip();
  int count = 0;
  if (i < n && text[i] == '}') {
    ++i;
  } else {
    while (true) {
      if (count == max_fields) return -1;
      FlatField& field = fields[count++];
      skip();
      if (!string_at(field.key)) return -1;
      skip();
      if (i >= n || text[i] != ':') return -1;
      ++i;
      skip();
      if (i < n && text[i] == '"') {
        if (!string_at(field.raw)) return -1;
        field.is_string = true;
      } else {
        const std::size_t begin = i;
        if (i < n && text[i] == '-') ++i;
        const std::size_t digits = i;
        while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
        if (i == digits) {
          while (i < n && text[i] >= 'a' && text[i] <= 'z') ++i;
          const auto word = text.substr(begin, i - begin);
          if (word != "true" && word != "false" && word != "null") return -1;
        } else if (i - digits > 1 && text[digits] == '0') {
          return -1; // JSON has no leading zeros
        }
        field.raw = text.substr(begin, i - begin);
        field.is_string = false;
      }
      skip();
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < n && text[i] == '}') {
        ++i;
        break;
      }
      return -1;
    }
  }
  skip();
  return i == n ? count : -1;
}

std::string lookup_key(const std::string& kernel, const std::string& source_hash,
                       const std::string& shape, const std::string& dtype) {
  return kernel + '\x1f' + source_hash + '\x1f' + shape + '\x1f' + dtype;
}

} // namespace

bool RequestHandler::fast_lookup(const std::shared_ptr<Session>& session, std::string_view line) {
  FlatField fields[k_max_flat_fields];
  const int count = scan_flat_object(line, fields, k_max_flat_fields);
  if (count < 0) return false;
  std::string_view id = "null";
  std::string_view op;
  std::string kernel, shape, dtype = "f32", device = "cpu";
  bool has_kernel = false, has_shape = false, tune_on_miss = false;
  for (int f = 0; f < count; ++f) {
    const FlatField& field = fields[f];
    if (field.key == "v") {
      if (field.is_string || field.raw != "1") return false;
    } else if (field.key == "id") {
      if (field.raw == "true" || field.raw == "false") return false;
      id = field.is_string ? std::string_view(field.raw.data() - 1, field.raw.size() + 2)
                           : field.raw;
    } else if (field.key == "tune_on_miss") {
      if (field.is_string || (field.raw != "true" && field.raw != "false")) return false;
      tune_on_miss = field.raw == "true";
    } else {
      if (!field.is_string) return false;
      if (field.key == "op") {
        op = field.raw;
      } else if (field.key == "kernel") {
        kernel = field.raw;
        has_kernel = true;
      } else if (field.key == "shape") {
        shape = field.raw;
        has_shape = true;
      } else if (field.key == "dtype") {
        dtype = field.raw;
      } else if (field.key == "device") {
        device = field.raw;
      } else {
        return false;
      }
    }
  }
  if (op != "lookup" || !has_kernel || !has_shape) return false;

  auto result = lookup_result(kernel, shape, dtype, device, tune_on_miss, session->peer().uid);
  if (!result) {
    const auto id_json = nlohmann::json::parse(id.begin(), id.end(), nullptr, false);
    session->send(protocol::encode_error(id_json.is_discarded() ? nlohmann::json() : id_json,
                                         result.error().code, result.error().message));
    return true;
  }
  std::string reply;
  reply.reserve(result->size() + id.size() + 40);
  reply += "{\"v\":1,\"id\":";
  reply += id;
  reply += ",\"ok\":true,\"result\":";
  reply += *result;
  reply += "}\n";
  session->send(std::move(reply));
  return true;
}

Result<std::string> RequestHandler::lookup_result(const std::string& kernel_name,
                                                  const std::string& shape_text,
                                                  const std::string& dtype,
                                                  const std::string& device, bool tune_on_miss,
                                                  uid_t client) {
  // The common case is checked against the cached kernel; anything that does not pass goes
  // through resolve(), which owns the error messages.
  auto cached = m_kernel_cache.get(kernel_name, std::chrono::steady_clock::now());
  const CachedKernel* kernel = cached ? *cached : nullptr;
  std::optional<Shape> shape;
  if (kernel) {
    if (auto parsed = Shape::parse(shape_text)) {
      if (auto conformed = conform_shape(*parsed, kernel->dims, kernel->name)) {
        shape = std::move(*conformed);
      }
    }
  }
  const bool valid = kernel && shape && device == "cpu" && kernel->runs_on_cpu &&
                     std::find(kernel->dtypes.begin(), kernel->dtypes.end(), dtype) !=
                         kernel->dtypes.end() &&
                     static_cast<bool>(dtype_c_type(dtype));
  if (!valid) {
    auto target = resolve(kernel_name, shape_text, dtype, device);
    if (!target) return target.error();
    if (is_cuda_device(device)) {
      return make_error(code::no_device, "lookup on " + device +
                                             ": this ktuned answers lookups for device cpu only");
    }
    return make_error(code::internal, "lookup of " + kernel_name + " " + shape_text +
                                          ": the kernel cache disagrees with the registry");
  }

  const std::string canonical = shape->to_string();
  const LadderAnswer answer =
      climb_ladder(m_index, *kernel, canonical, dtype, m_ctx.cpu.fingerprint);
  std::optional<std::int64_t> tune_job;
  if (answer.rung != Rung::exact && (tune_on_miss || m_tune_on_miss_policy) && !m_stopping) {
    auto queued = queue_background_tune(*kernel, canonical, dtype, client);
    if (queued) {
      tune_job = *queued;
    } else if (queued.error().code == code::too_many_jobs) {
      KTUNE_LOG(debug) << "tune-on-miss for " << kernel->name << " " << canonical << " " << dtype
                       << " not queued: " << queued.error().message;
    } else {
      KTUNE_LOG(warn) << "tune-on-miss for " << kernel->name << " " << canonical << " " << dtype
                      << " not queued: " << queued.error().message;
    }
  }
  std::string out;
  out.reserve(160 + (answer.config ? answer.config->size() : 0));
  append_lookup_result(out, answer, tune_job);
  return out;
}

Result<std::int64_t> RequestHandler::queue_background_tune(const CachedKernel& kernel,
                                                           const std::string& shape,
                                                           const std::string& dtype,
                                                           uid_t client) {
  const std::string key = lookup_key(kernel.name, kernel.source_hash, shape, dtype);
  if (const auto it = m_pending_tunes.find(key); it != m_pending_tunes.end()) return it->second;
  if (auto refused = m_quota.refusal(client)) return *refused;

  auto target = resolve(kernel.name, shape, dtype, "cpu");
  if (!target) return target.error();
  const KernelSpec& spec = target->kernel.spec;
  auto space = ParamSpace::create(spec, target->shape);
  if (!space) return space.error();
  auto configs = space->enumerate();
  if (!configs) return configs.error();
  const DeviceInfo& device = m_ctx.cpu;
  // Like a tune request: configs that crashed or hung in earlier jobs are not run again.
  auto dropped = drop_quarantined(m_ctx.store, spec.name, target->kernel.source_hash,
                                  device.fingerprint, *configs);
  if (!dropped) return internal_error(dropped.error());
  if (configs->empty()) {
    return make_error(code::empty_space, "kernel " + spec.name + " admits no config at " + shape +
                                             " that has not crashed or hung before");
  }
  if (auto r = m_ctx.store.upsert_kernel(spec.name, target->kernel.source_hash,
                                         read_text(target->kernel.spec_path));
      !r) {
    return internal_error(r.error());
  }
  if (auto r = m_ctx.store.upsert_device(device); !r) return internal_error(r.error());
  JobRecord record;
  record.kernel = spec.name;
  record.source_hash = target->kernel.source_hash;
  record.shape = target->shape.to_string();
  record.dtype = target->dtype;
  record.device = device.name;
  record.fingerprint = device.fingerprint;
  record.strategy = "exhaustive";
  record.state = JobState::queued;
  record.total = static_cast<std::int64_t>(configs->size());
  auto id = m_ctx.store.create_job(record);
  if (!id) return internal_error(id.error());
  record.id = *id;
  m_quota.charge(client, *id);
  KTUNE_LOG(info) << "tune-on-miss: job " << *id << " for " << spec.name << " " << record.shape
                  << " " << dtype << " waits for an idle scheduler";
  m_pending_tunes[key] = *id;
  m_pending_jobs[*id] = key;
  JobPlan plan;
  plan.record = std::move(record);
  plan.kernel = std::move(target->kernel);
  plan.shape = std::move(target->shape);
  plan.configs = std::move(*configs);
  m_background.push_back(std::move(plan));
  if (m_ctx.scheduler.queued() == 0 && m_ctx.scheduler.running() == 0) start_background_tune();
  return *id;
}

void RequestHandler::start_background_tune() {
  if (m_background.empty() || m_stopping) return;
  JobPlan plan = std::move(m_background.front());
  m_background.pop_front();
  m_ctx.scheduler.enqueue(std::move(plan));
}

void RequestHandler::on_job_end(std::int64_t job_id, JobState state) {
  if (state == JobState::done) {
    auto job = m_ctx.store.get_job(job_id);
    if (job && job->has_value()) {
      const JobRecord& rec = **job;
      auto winner = m_ctx.store.find_winner(rec.kernel, rec.source_hash, rec.shape, rec.dtype,
                                            rec.fingerprint);
      if (winner && winner->has_value()) {
        m_index.put(**winner);
      } else if (!winner) {
        KTUNE_LOG(error) << "job " << job_id << ": cannot read its winner for the index: "
                         << winner.error().message;
      }
    } else if (!job) {
      KTUNE_LOG(error) << "job " << job_id << ": cannot read it for the winner index: "
                       << job.error().message;
    }
  }
  if (const auto it = m_pending_jobs.find(job_id); it != m_pending_jobs.end()) {
    m_pending_tunes.erase(it->second);
    m_pending_jobs.erase(it);
  }
  // The ending job is still the running one here: start a background tune when nothing else waits.
  if (state != JobState::interrupted && m_ctx.scheduler.queued() == 0) start_background_tune();
}

void RequestHandler::interrupt_background_tunes() {
  for (const auto& plan : m_background) {
    if (auto r = m_ctx.store.set_job_state(plan.record.id, JobState::interrupted,
                                           "ktuned stopped before the job started");
        !r) {
      KTUNE_LOG(warn) << "job " << plan.record.id << ": " << r.error().message;
    }
  }
  m_background.clear();
  m_pending_tunes.clear();
  m_pending_jobs.clear();
}

Result<nlohmann::json> RequestHandler::lookup(const protocol::Request& request, uid_t client) {
  auto req = protocol::LookupRequest::from_json(request.body);
  if (!req) return req.error();
  bool tune_on_miss = false;
  if (const auto it = request.body.find("tune_on_miss"); it != request.body.end()) {
    if (!it->is_boolean()) {
      return make_error(code::bad_request, "lookup: field 'tune_on_miss' must be true or false, "
                                           "found " + it->dump());
    }
    tune_on_miss = it->get<bool>();
  }
  auto text =
      lookup_result(req->kernel, req->shape, req->dtype, req->device, tune_on_miss, client);
  if (!text) return text.error();
  return nlohmann::json::parse(*text);
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
  for (const auto& [name, language] : m_registry.families()) {
    // find() re-reads the family and keeps the registry's broken list current.
    if (auto kernel = m_registry.find(name, language)) listed.push_back(kernel_to_json(*kernel));
  }
  nlohmann::json broken = nlohmann::json::array();
  for (const auto& b : m_registry.broken()) {
    broken.push_back({{"path", b.spec_path}, {"error", b.error.message}});
  }
#ifdef KTUNE_HAVE_CUDA
  constexpr bool cuda_backend = true;
#else
  constexpr bool cuda_backend = false;
#endif
  return nlohmann::json{{"kernels", std::move(listed)},
                        {"broken", std::move(broken)},
                        {"cuda_backend", cuda_backend}};
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
