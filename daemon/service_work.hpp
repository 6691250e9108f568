#pragma once
// Compiles and measures that belong to no tune job -- the speed canary (daemon/canary.hpp) and
// A/B confirmations (daemon/ab_service.hpp) -- sent through WorkerPool::submit like any work, so
// that they wait their turn on a device lane and never overlap a measurement. io thread only.
#include "core/device.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"
#include "daemon/worker_pool.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/kernel_registry.hpp"

#include <chrono>
#include <functional>
#include <string>

namespace ktune::daemon {

// Work::owner of service work (never a job id, so a job's cancel never withdraws it).
inline constexpr std::int64_t k_service_owner = -1;
// Service work goes before any job's (clients may ask for priorities -100..100).
inline constexpr int k_service_priority = 1000;

// A config compiled for a device.
struct BuiltConfig {
  std::string artifact_path;
  std::string entry_symbol;   // what the bench job calls ("" = the entry's own name)
  bool cached = false;        // found in the compile cache, not compiled now
};

// Compiles `config` of `kernel` for `device` (a CUDA device: for the arch in its details) on the
// compile pool; `done` runs once, on the io thread, never inside this call. Errors: compile_error
// with the compiler's first lines, the worker's errors, bad_dtype.
void build_config(asio::io_context& io, WorkerPool& pool, const LoadedKernel& kernel, const Config& config,
                  const std::string& dtype, const DeviceInfo& device, const std::string& cache_dir,
                  std::function<void(Result<BuiltConfig>)> done);

// The bench job of a built config on `device`, without an output check (what is measured was
// checked when it was tuned). Errors: make_bench_job's.
[[nodiscard]] Result<BenchJob> service_bench_job(const LoadedKernel& kernel, const Shape& shape,
                                                 const Config& config, const std::string& dtype,
                                                 const DeviceInfo& device, const BuiltConfig& built,
                                                 const MeasureSettings& settings);

// Submits a measurement (`work.device` names its lane) like WorkerPool::submit, except that
// device_busy (another ktuned holds the device's machine-wide measurement lock) is not an answer:
// the work is submitted again every 200 ms, up to 10 minutes, before its on_reply hears it.
void submit_measurement(asio::io_context& io, WorkerPool& pool, Work work);

// How long a worker may take for `measurements` measurements under `settings` before it is killed.
[[nodiscard]] std::chrono::milliseconds measure_deadline(const MeasureSettings& settings,
                                                        int measurements);

} // namespace ktune::daemon
