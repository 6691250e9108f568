#pragma once
// Canary: the speed canary. Two small reference kernels shipped with ktune -- compute-bound and
// memory-bound (kernels_src/canary/canary_{compute,memory}; on a GPU kernels_src/cuda/...) --
// measured on a device, their [default] configs at fixed shapes and with fixed measurement
// settings, so that readings taken months apart compare. A reading is stored (Store::
// insert_canary_reading) with why it was taken; a comparison against history divides by it
// and says when the machine itself moved (tableio/canary.hpp).
//
//   {"op":"canary","device":"cpu","context":"sweep start"}
//   -> {"id","device","fingerprint","taken_at_ms","compute_ms","memory_ms","context"}
//
// Readings are taken when a client asks (`ktune sweep` at its start and end) and every
// `canary_interval_s` on each device whose lane has work (a long job: its measurements and the
// readings alternate on the lane, which runs one at a time). The kernels are compiled through
// the compile pool (cached after the first time) and measured through the device's lane like any
// candidate. Errors: bad_request, unknown_device, no_device, spec_error (the shipped canary
// cannot be loaded), and a measurement that failed (its status as the code). io thread only.
#include "core/protocol.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/client.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"

#include <functional>
#include <memory>
#include <string>

namespace ktune::daemon {

// The fixed shapes the canaries run at, per language.
struct CanaryShapes {
  std::string compute, memory;
};
[[nodiscard]] CanaryShapes canary_shapes(Language language);

class Canary {
public:
  // `kernels_dir`: the shipped kernel families (shipped_kernels_dir), which hold the canaries.
  // A reading is stored through `writer` (the Server's one StoreWriter).
  Canary(asio::io_context& io, WorkerPool& pool, StoreWriter& writer, DeviceRegistry& devices,
         const DaemonConfig& config, std::string kernels_dir);

  // The op: one reading on the device asked for, stored, as the reply.
  void request(const std::shared_ptr<Client>& session, const protocol::Request& request);

  // Takes one reading on `device` and stores it; `done` runs once, on the io thread.
  void measure(const DeviceInfo& device, std::string context,
               std::function<void(Result<CanaryReading>)> done);

  // Starts the periodic readings (nothing when canary_interval_s is 0); stop() ends them.
  void start();
  void stop();

private:
  void tick();
  // Builds and measures the canary kernel of `spec_path` (its default config) at `shape_text`
  // on `device`; `done` gets its median in ms, on the io thread.
  void measure_kernel(const DeviceInfo& device, const std::string& spec_path,
                      const std::string& shape_text, std::function<void(Result<double>)> done);

  asio::io_context& m_io;
  WorkerPool& m_pool;
  StoreWriter& m_writer;
  DeviceRegistry& m_devices;
  const DaemonConfig& m_config;
  std::string m_kernels_dir;
  std::unique_ptr<asio::steady_timer> m_timer;
  std::set<std::string> m_reading;   // devices with a periodic reading in flight
};

} // namespace ktune::daemon
