#pragma once
// WorkerPool: ktuned's worker processes, started lazily and kept: up to `compile_workers`
// compile workers and one CPU bench worker. A worker that exits (crashed, killed at a deadline,
// or idle for `worker_idle`) is dropped; the next request for its role starts a replacement.
// Workers get `--memory-mb N` (RLIMIT_AS) when `memory_mb` > 0. Single-threaded (the io thread).
//
// CPU placement: when the daemon may run on two or more CPUs, the bench worker is pinned to the
// last of them (ktune-worker --cpu) and compile workers, with the compilers they start, are kept
// off it (sched_setaffinity), so compiles never disturb a measurement.
#include "core/result.hpp"
#include "daemon/worker_process.hpp"

#include <sched.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ktune::daemon {

class WorkerPool {
public:
  WorkerPool(asio::io_context& io, ChildWatch& children, std::string worker_path,
             std::size_t compile_workers,
             std::chrono::milliseconds worker_idle = std::chrono::milliseconds(0),
             std::int64_t memory_mb = 0);

  // An idle worker of `role`, starting one when fewer than the role's limit are alive.
  // A null pointer when every worker of the role is busy. Errors: spawn_error.
  [[nodiscard]] Result<std::shared_ptr<WorkerProcess>> idle_worker(WorkerRole role);

  [[nodiscard]] std::size_t alive(WorkerRole role) const;
  [[nodiscard]] std::size_t limit(WorkerRole role) const;
  [[nodiscard]] const std::string& worker_path() const { return m_worker_path; }

  // Terminates every worker (socket closed, SIGTERM to its group), sends SIGKILL to the groups
  // of those still alive after 1 s, and calls `on_done` once all have exited, or 1 s after the
  // SIGKILL at the latest. No worker is started afterwards.
  void shutdown(std::function<void()> on_done);

private:
  void on_worker_exit(WorkerProcess& worker);
  void finish_shutdown();

  [[nodiscard]] Result<std::shared_ptr<WorkerProcess>> start(WorkerRole role);

  asio::io_context& m_io;
  ChildWatch& m_children;
  std::string m_worker_path;
  std::size_t m_compile_limit;
  std::chrono::milliseconds m_worker_idle;
  std::int64_t m_memory_mb;
  std::optional<int> m_bench_cpu;          // the bench worker's CPU, when pinned
  std::optional<cpu_set_t> m_compile_cpus; // every allowed CPU but the bench worker's
  std::vector<std::shared_ptr<WorkerProcess>> m_workers;
  bool m_shutting_down = false;
  std::function<void()> m_on_shutdown;
  std::unique_ptr<asio::steady_timer> m_shutdown_timer;
};

} // namespace ktune::daemon
