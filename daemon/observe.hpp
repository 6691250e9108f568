#pragma once
// What ktuned shows of itself while it runs: the /metrics text (Prometheus exposition format,
// docs/operations.md) and the `top` op's reply (docs/protocol.md), both read from the counters
// the scheduler, the worker pool, the store writer and the lookup path keep in memory. Nothing
// here reads the database, so a scrape never waits on SQLite. io thread only.
#include "daemon/metrics.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/winner_index.hpp"
#include "daemon/worker_pool.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

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
  const LookupCounters& lookups;
  double uptime_s = 0;
  std::size_t connections = 0;
};

// The exposition text of GET /metrics (version 0.0.4).
[[nodiscard]] std::string render_metrics(const DaemonView& view);

// The `top` op's result: jobs, lanes, workers, throughput, counters and the latest failures.
[[nodiscard]] nlohmann::json top_view(const DaemonView& view);

} // namespace ktune::daemon
