#pragma once
// What ktuned shows of itself while it runs: the /metrics text (Prometheus exposition format,
// docs/operations.md), the `top` and `stats` ops' replies (docs/protocol.md), all read from the counters
// the scheduler, the worker pool, the store writer and the lookup path keep in memory. Nothing
// here reads the database, so a scrape never waits on SQLite. io thread only.
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/metrics.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/winner_index.hpp"
#include "daemon/worker_pool.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ktune::daemon {

// Lookups answered since ktuned started, by rung, and how long each took from its decoded
// fields to its reply text. `miss`: the lookup was answered with an error (unknown kernel,
// shape, dtype or device).
struct LookupCounters {
  std::uint64_t exact = 0, stale = 0, nearest = 0, fallback_default = 0, miss = 0;
  Histogram seconds = lookup_latency_histogram();
  void add(std::optional<Rung> rung, double seconds_taken);
};

// Everything the two views read.
struct DaemonView {
  const Scheduler& scheduler;
  const WorkerPool& workers;
  const StoreWriter& writer;
  const LookupCounters& lookups;
  double uptime_s = 0;
  std::size_t connections = 0;
};

// The exposition text of GET /metrics (version 0.0.4).
[[nodiscard]] std::string render_metrics(const DaemonView& view);

// The `top` op's result: jobs, lanes, workers, throughput, counters and the latest failures.
[[nodiscard]] nlohmann::json top_view(const DaemonView& view);

// What `stats` reads besides a DaemonView.
struct StatsSources {
  const DaemonConfig& config;
  const DeviceRegistry& devices;
  std::vector<std::string> kernel_dirs;  // configured, then added
  nlohmann::json table;                  // the winner table's state (table_status_json)
  std::string metrics_address;           // where /metrics is served, "" when off
};

// The `stats` op's result (docs/protocol.md § stats): the process, its queue, workers and
// lanes (with their measurement locks), the store writer's stall, the device, the limits.
[[nodiscard]] nlohmann::json stats_view(const DaemonView& view, const StatsSources& sources);

} // namespace ktune::daemon
