#pragma once
// DeviceRegistry: the devices this ktuned tunes on and answers lookups for. The daemon never
// loads a device driver itself: a worker is asked ("devices" probe, WorkerPool::submit) at start
// and whenever a client lists the devices; each CUDA device found gets its own bench lane. The
// fingerprints of every device in the store (tuned here or imported from another machine's
// table) are known too, so a lookup may name a device by fingerprint. io thread only.
//
// A device is named "cpu", "cuda:N" ("cuda" = "cuda:0") or by its fingerprint (32 hex digits).
#include "jobs/bench_job.hpp"
#include "jobs/compile_job.hpp"
#include "core/device.hpp"
#include "core/kernel_spec.hpp"
#include "core/result.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ktune::daemon {

// "cuda" or "cuda:N".
[[nodiscard]] bool is_cuda_device(const std::string& device);

// What a worker's "devices" probe found: the CPU, and the CUDA devices or why there are none.
struct DeviceProbe {
  DeviceInfo cpu;
  bool cuda_backend = false;  // the workers are built with the CUDA backend
  Result<std::vector<DeviceInfo>> cuda{std::vector<DeviceInfo>{}};
};

// A worker's "devices" outcome {"cpu":{name,fingerprint,details},"devices":[...]} (or
// "cuda_error":{"code","message"} in place of "devices"). Errors: internal naming what is
// malformed.
[[nodiscard]] Result<DeviceProbe> probe_from_json(const nlohmann::json& outcome);

// A device as a lookup or tune names it, resolved.
// Views into the registry or into the name resolved: valid until the registry changes (a probe,
// remember()) or that name goes away -- a lookup's duration, with no copy on its path.
struct ResolvedDevice {
  std::string_view name;          // "cpu", "cuda:0", or the stored name of a fingerprint
  std::string_view fingerprint;
  Language language = Language::cpp; // which family of a kernel runs there
  bool local = false;             // a device of this machine (it has a lane)
};

class DeviceRegistry {
public:
  DeviceRegistry();

  // Asks a worker for the devices (highest priority on the compile pool): the CPU, and the CUDA
  // devices, adding a bench lane to `pool` for each one. ktuned never inspects a device in its
  // own process. `done` runs once, on the io thread, never inside this call. A probe that fails
  // (the worker cannot run) leaves the CPU unknown: lookups for cpu answer defaults and a tune
  // on cpu is a no_device error naming why.
  // A probe that fails after one succeeded keeps what that one found (a worker outage is no
  // news of the devices).
  void probe(WorkerPool& pool, std::function<void()> done = {});
  // While the CPU is unknown (the probes so far failed), asks a worker again, at most once per
  // k_reprobe_every (a tune on cpu calls it). True when a probe is on its way.
  static constexpr auto k_reprobe_every = std::chrono::seconds(2);
  bool probe_again_if_unknown(WorkerPool& pool);

  // Remembers a device's kind by fingerprint (the store's devices, imported ones).
  void remember(const DeviceInfo& device);

  [[nodiscard]] const DeviceInfo& cpu() const { return m_cpu; }
  [[nodiscard]] bool probed() const { return m_probed; }
  // Whether the workers are built with the CUDA backend (false until probed).
  [[nodiscard]] bool cuda_backend() const { return m_cuda_backend; }
  // The CUDA devices of the last probe, or why there are none.
  [[nodiscard]] const Result<std::vector<DeviceInfo>>& cuda() const { return m_cuda; }

  // Resolves a device name for a lookup (a fingerprint of a device this ktuned has never seen
  // is accepted: `prefer` says which family to answer with). Errors: no_device (cuda:N here
  // without such a GPU, saying why), unknown_device (a name that is neither).
  [[nodiscard]] Result<ResolvedDevice> resolve(const std::string& device,
                                               Language prefer = Language::cpp) const;
  // A local device to tune on: cpu or cuda:N. Errors as resolve(), unknown_device for a
  // fingerprint that is no device of this machine.
  [[nodiscard]] Result<DeviceInfo> local(const std::string& device) const;
  // Every local device: cpu first, then the CUDA devices.
  [[nodiscard]] std::vector<DeviceInfo> all_local() const;

  // Reply of the daemon op "devices": {"devices":[{"name":"cpu",..},{"name":"cuda:0",..}],
  // "cuda":{"available":true}} or "cuda":{"available":false,"code":..,"reason":..}.
  [[nodiscard]] nlohmann::json to_json() const;

private:
  [[nodiscard]] Error no_cuda(const std::string& device) const;
  // The probed CUDA device named "cuda:N" ("cuda" = "cuda:0"); nullptr when there is none.
  [[nodiscard]] const DeviceInfo* find_cuda(const std::string& device) const;

  DeviceInfo m_cpu;
  std::string m_cpu_unknown = "not probed yet"; // why the CPU is not known; "" once it is
  bool m_probed = false;
  bool m_probing = false;
  std::optional<std::chrono::steady_clock::time_point> m_last_retry;
  bool m_cuda_backend = false;
  Result<std::vector<DeviceInfo>> m_cuda{make_error(ErrorCode::no_device, "not probed yet")};
  std::unordered_map<std::string, std::pair<std::string, Language>> m_known; // fp -> name, kind
};

// Points a CUDA job's compile job at its device: arch = the "arch" of the device stored under the
// job's fingerprint (stored before the job is queued). A CPU job is left as it is.
// Errors: internal when the device or its arch is not in the store.
[[nodiscard]] Result<void> target_cuda_device(const Store& store, const JobRecord& record,
                                              CompileJob& job);
// The bench job's device ordinal for a CUDA job: 0, since its lane's worker sees only its GPU
// (CUDA_VISIBLE_DEVICES set by WorkerPool). A CPU job is left as it is.
void target_cuda_device(const JobRecord& record, BenchJob& job);

} // namespace ktune::daemon
