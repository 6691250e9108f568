#include "daemon/canary.hpp"

#include "core/shape.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/reply.hpp"
#include "daemon/service_work.hpp"
#include "jobs/kernel_registry.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <filesystem>

namespace ktune::daemon {


namespace {

using nlohmann::json;

// Fixed, so that readings taken months apart compare: about 0.1-0.5 s per kernel.
MeasureSettings canary_settings() {
  MeasureSettings s;
  s.min_samples = 5;
  s.max_samples = 500;
  s.target_rsd = 0.01;
  s.target_error = 0.005;
  s.min_time_s = 0.1;
  s.max_time_s = 0.5;
  s.warmup_ms = 10;
  s.flush_cache = false;  // the memory canary's buffer is larger than the caches already
  s.seed = 42;
  return s;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json reading_json(const CanaryReading& r) {
  return {{"id", r.id},
          {"device", r.device},
          {"fingerprint", r.fingerprint},
          {"taken_at_ms", r.taken_at},
          {"compute_ms", r.compute_ms},
          {"memory_ms", r.memory_ms},
          {"context", r.context}};
}

// One reading in progress: both kernels' medians.
struct Reading {
  CanaryReading row;
  std::function<void(Result<CanaryReading>)> done;
  int left = 2;
  std::optional<Error> error;
};

} // namespace

CanaryShapes canary_shapes(Language language) {
  if (language == Language::cuda) return {"N=65536", "N=33554432"};
  return {"N=1048576", "N=16777216"};
}

Canary::Canary(asio::io_context& io, WorkerPool& pool, StoreWriter& writer, DeviceRegistry& devices,
               const DaemonConfig& config, std::string kernels_dir)
    : m_io(io), m_pool(pool), m_writer(writer), m_devices(devices), m_config(config),
      m_kernels_dir(std::move(kernels_dir)) {}

void Canary::request(const std::shared_ptr<Client>& session, const protocol::Request& request) {
  const Reply reply(session, request.id);
  const auto fail = [&reply](const Error& error) { reply.error(error); };
  std::string device = "cpu", context;
  for (auto [key, field] : {std::pair{"device", &device}, std::pair{"context", &context}}) {
    const auto it = request.body.find(key);
    if (it == request.body.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return fail(make_error(ErrorCode::bad_request,
                             std::string("canary: field '") + key + "' must be a string"));
    }
    *field = it->get<std::string>();
  }
  auto local = m_devices.local(device);
  if (!local) return fail(local.error());
  measure(*local, context.empty() ? "asked" : context, [reply](Result<CanaryReading> reading) {
    if (!reading) return reply.error(reading.error());
    reply.ok(reading_json(*reading));
  });
}

namespace {

// One of the reading's two medians arrived (or failed); the last one stores the reading through
// `writer` and reports it.
void part_measured(StoreWriter& writer, const std::shared_ptr<Reading>& reading, int which,
                   Result<double> median) {
  if (!median && !reading->error) {
    // Every code a client sees is the protocol's: a canary that fails is ktuned's own fault.
    const Error& e = median.error();
    reading->error = e.code == ErrorCode::spec_error || e.code == ErrorCode::no_device || e.code == ErrorCode::internal
                         ? e
                         : make_error(ErrorCode::internal, "the speed canary on " + reading->row.device +
                                                          ": " + describe(e));
  }
  if (median) (which == 0 ? reading->row.compute_ms : reading->row.memory_ms) = *median;
  if (--reading->left > 0) return;
  if (reading->error) return reading->done(*reading->error);
  reading->row.taken_at = now_ms();
  // A reading is worth having even when the database takes nothing now: it is reported at once,
  // and stored once the database takes writes again.
  writer.submit(
      "the canary reading on " + reading->row.device,
      [reading](Store& store) -> Result<void> {
        auto id = store.insert_canary_reading(reading->row);
        if (!id) return id.error();
        reading->row.id = *id;
        return {};
      },
      [device = reading->row.device](const Result<void>& stored) {
        if (!stored) {
          KTUNE_LOG(warn) << "canary reading on " << device << " not stored: "
                          << stored.error().message;
        }
      });
  KTUNE_LOG(info) << "canary on " << reading->row.device << " (" << reading->row.context
                  << "): compute " << reading->row.compute_ms << " ms, memory "
                  << reading->row.memory_ms << " ms";
  reading->done(reading->row);
}

} // namespace

void Canary::measure(const DeviceInfo& device, std::string context,
                     std::function<void(Result<CanaryReading>)> done) {
  const Language language = is_cuda_device(device.name) ? Language::cuda : Language::cpp;
  const std::string group = language == Language::cuda ? "cuda" : "canary";
  const CanaryShapes shapes = canary_shapes(language);
  auto reading = std::make_shared<Reading>();
  reading->row.fingerprint = device.fingerprint;
  reading->row.device = device.name;
  reading->row.context = std::move(context);
  reading->done = std::move(done);
  const char* names[2] = {"canary_compute", "canary_memory"};
  const std::string shape_text[2] = {shapes.compute, shapes.memory};
  for (int i = 0; i < 2; ++i) {
    const std::string spec = (std::filesystem::path(m_kernels_dir) / group / names[i] /
                              "kernel.toml").string();
    measure_kernel(device, spec, shape_text[i], [this, reading, i](Result<double> median) {
      part_measured(m_writer, reading, i, std::move(median));
    });
  }
}

void Canary::measure_kernel(const DeviceInfo& device, const std::string& spec_path,
                            const std::string& shape_text,
                            std::function<void(Result<double>)> done) {
  auto kernel = load_kernel(spec_path);
  if (!kernel) {
    asio::post(m_io, [done, error = kernel.error()] {
      done(make_error(error.code, "the speed canary cannot be loaded: " + error.message));
    });
    return;
  }
  auto shape = Shape::parse(shape_text);
  if (!shape) {
    asio::post(m_io, [done, error = shape.error()] { done(error); });
    return;
  }
  auto loaded = std::make_shared<LoadedKernel>(std::move(*kernel));
  const std::string dtype = loaded->spec.dtypes.empty() ? "f32" : loaded->spec.dtypes.front();
  build_config(m_io, m_pool, *loaded, loaded->spec.default_config, dtype, device,
               m_config.cache_dir,
               [this, done, loaded, dtype, device, shape = *shape](Result<BuiltConfig> built) {
                 if (!built) return done(built.error());
                 const MeasureSettings settings = canary_settings();
                 auto job = service_bench_job(*loaded, shape, loaded->spec.default_config, dtype,
                                              device, *built, settings);
                 if (!job) return done(job.error());
                 Work work;
                 work.op = "bench";
                 work.job = job->to_json();
                 work.deadline = measure_deadline(settings, 1);
                 work.priority = k_service_priority;
                 work.owner = k_service_owner;
                 work.device = device.name;
                 work.on_reply = [done, name = loaded->spec.name](Result<json> reply,
                                                                 const Delivery&) {
                   if (!reply) return done(reply.error());
                   auto outcome = BenchOutcome::from_json(*reply);
                   if (!outcome) return done(outcome.error());
                   if (outcome->status != CandidateStatus::ok || outcome->stats.median_ms <= 0) {
                     return done(make_error(ErrorCode::bench_failed,
                                            name + " measured " +
                                                std::string(to_string(outcome->status)) + ": " +
                                                outcome->reason));
                   }
                   done(outcome->stats.median_ms);
                 };
                 submit_measurement(m_io, m_pool, device.name, std::move(work));
               });
}

void Canary::start() {
  if (m_config.canary_interval_s <= 0) return;
  m_timer = std::make_unique<asio::steady_timer>(m_io);
  m_timer->expires_after(std::chrono::milliseconds(
      static_cast<std::int64_t>(m_config.canary_interval_s * 1000.0)));
  m_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    tick();
    start();
  });
}

void Canary::stop() {
  if (m_timer) m_timer->cancel();
}

void Canary::tick() {
  for (const DeviceInfo& device : m_devices.all_local()) {
    if (!m_pool.has_lane(device.name)) continue;
    if (m_pool.busy(device.name) == 0 && m_pool.waiting(device.name) == 0) continue;
    if (!m_reading.insert(device.name).second) continue;
    measure(device, "periodic", [this, name = device.name](Result<CanaryReading> reading) {
      m_reading.erase(name);
      if (!reading) {
        KTUNE_LOG(warn) << "periodic canary on " << name << " failed: " << reading.error().message;
      }
    });
  }
}

} // namespace ktune::daemon
