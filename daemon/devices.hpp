#pragma once
// CUDA devices as ktuned learns them: the daemon never loads libcuda itself; it asks a worker
// (worker op "devices", worker/worker.hpp), which loads the driver in its own process. io thread
// only.
#include "core/device.hpp"
#include "bench/runner.hpp"
#include "compiler/compiler.hpp"
#include "core/result.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ktune::daemon {

using CudaDevicesHandler = std::function<void(Result<std::vector<DeviceInfo>> devices)>;

// Asks an idle worker (the bench worker, else a compile worker) for the CUDA devices it sees and
// calls `done` once, on the io thread, never inside this call unless no worker can take the
// request. Errors: no_device with the worker's cause (no libcuda.so.1, a stub driver, no device,
// or a ktune built without the CUDA backend); no_device naming the busy workers when every
// worker is busy; internal naming the failure (spawn_error, crash, worker_lost, timeout) when no
// worker could answer. Every code is one of docs/protocol.md § Error codes.
void query_cuda_devices(WorkerPool& workers, CudaDevicesHandler done);

// The DeviceInfo list of a worker's "devices" outcome {"devices":[{name,fingerprint,details}]}.
// Errors: internal naming what is malformed.
[[nodiscard]] Result<std::vector<DeviceInfo>> devices_from_json(const nlohmann::json& outcome);

// The DeviceInfo named `device` ("cuda:N") in `devices`. Errors: unknown_device naming the
// devices there are.
[[nodiscard]] Result<DeviceInfo> find_cuda_device(const std::vector<DeviceInfo>& devices,
                                                  const std::string& device);

// Reply of the daemon op "devices": {"devices":[{"name":"cpu",..},{"name":"cuda:0",..}],
// "cuda":{"available":true}} or, when no CUDA device can be used,
// "cuda":{"available":false,"code":..,"reason":..}.
[[nodiscard]] nlohmann::json devices_reply(const DeviceInfo& cpu,
                                           const Result<std::vector<DeviceInfo>>& cuda);

// Points a CUDA job's compile job at its device: arch = the "arch" of the device stored under the
// job's fingerprint (tune stores it before the job is queued). A CPU job is left as it is.
// Errors: internal when the device or its arch is not in the store.
[[nodiscard]] Result<void> target_cuda_device(const Store& store, const JobRecord& record,
                                              CompileJob& job);
// The bench job's device ordinal: N of the job's device "cuda:N". A CPU job is left as it is.
void target_cuda_device(const JobRecord& record, BenchJob& job);

} // namespace ktune::daemon
