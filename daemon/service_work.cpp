#include "daemon/service_work.hpp"

#include "core/protocol.hpp"
#include "jobs/compile_job.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <sstream>

namespace ktune::daemon {

namespace {

// The first lines of a compiler log, for a one-line reason.
std::string log_head(const std::string& log) {
  std::istringstream lines(log);
  std::string line, out;
  int kept = 0;
  while (kept < 3 && std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out += (out.empty() ? "" : " | ") + line;
    ++kept;
  }
  return out;
}

constexpr std::chrono::milliseconds k_compile_deadline{300'000};

using ReplyHandler = std::function<void(Result<nlohmann::json>, const Delivery&)>;

// One try of submit_measurement's `work` (on_reply empty), answering `done`.
void submit_try(asio::io_context& io, WorkerPool& pool, const std::string& lane, Work work,
                std::shared_ptr<ReplyHandler> done, std::chrono::steady_clock::time_point first) {
  Work again = work;
  work.on_reply = [&io, &pool, lane, again = std::move(again), done,
                   first](Result<nlohmann::json> reply, const Delivery& delivery) mutable {
    if (!reply && reply.error().code == ErrorCode::device_busy &&
        std::chrono::steady_clock::now() - first < k_service_busy_patience) {
      auto timer = std::make_shared<asio::steady_timer>(io, k_service_busy_retry);
      timer->async_wait([&io, &pool, lane, again = std::move(again), done, first,
                         timer](const boost::system::error_code& ec) mutable {
        if (ec) return;
        submit_try(io, pool, lane, std::move(again), std::move(done), first);
      });
      return;
    }
    (*done)(std::move(reply), delivery);
  };
  pool.submit(lane, std::move(work));
}

} // namespace

void build_config(asio::io_context& io, WorkerPool& pool, const LoadedKernel& kernel, const Config& config,
                  const std::string& dtype, const DeviceInfo& device, const std::string& cache_dir,
                  std::function<void(Result<BuiltConfig>)> done) {
  auto job = make_compile_job(kernel, config, dtype, cache_dir);
  if (job && job->language == "cuda") {
    const auto arch = device.details.find("arch");
    if (arch == device.details.end() || !arch->is_string()) {
      job = make_error(ErrorCode::no_device,
                       "device " + device.name + " reports no architecture to compile for");
    } else {
      job->arch = arch->get<std::string>();
    }
  }
  if (!job) {
    asio::post(io, [done, error = job.error()] { done(error); });
    return;
  }
  Work work;
  work.op = "compile";
  work.job = job->to_json();
  work.deadline = k_compile_deadline;
  work.priority = k_service_priority;
  work.owner = k_service_owner;
  work.device = device.name;
  const std::string name = kernel.spec.name;
  work.on_reply = [done, name](Result<nlohmann::json> reply, const Delivery&) {
    if (!reply) return done(reply.error());
    auto outcome = CompileOutcome::from_json(*reply);
    if (!outcome) return done(outcome.error());
    if (outcome->status != CandidateStatus::ok) {
      const std::string status(to_string(outcome->status));
      return done(make_error(ErrorCode::compile_error,
                             name + " " + status + ": " +
                                 (outcome->infra.empty() ? log_head(outcome->log) : outcome->infra)));
    }
    done(BuiltConfig{outcome->artifact_path, outcome->entry_symbol, outcome->cached});
  };
  pool.submit("", std::move(work));
}

Result<BenchJob> service_bench_job(const LoadedKernel& kernel, const Shape& shape,
                                   const Config& config, const std::string& dtype,
                                   const DeviceInfo& device, const BuiltConfig& built,
                                   const MeasureSettings& settings) {
  auto job = make_bench_job(kernel.spec, shape, config, dtype, built.artifact_path, "", settings);
  if (!job) return job.error();
  use_compiled_entries(*job, built.entry_symbol, "");
  // A CUDA lane's worker sees only its GPU, as its device 0 (WorkerPool).
  if (job->launch && device.name.rfind("cuda", 0) == 0) job->cuda_device = 0;
  return job;
}

void submit_measurement(asio::io_context& io, WorkerPool& pool, const std::string& lane, Work work) {
  auto done = std::make_shared<ReplyHandler>(std::move(work.on_reply));
  work.on_reply = nullptr;
  submit_try(io, pool, lane, std::move(work), std::move(done), std::chrono::steady_clock::now());
}

std::chrono::milliseconds measure_deadline(const MeasureSettings& settings, int measurements) {
  const double one_s = 2.0 * (settings.warmup_ms / 1000.0 + settings.max_time_s) + 2.0;
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(1000.0 * one_s * std::max(1, measurements)));
}

} // namespace ktune::daemon
