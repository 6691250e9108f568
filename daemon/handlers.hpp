#pragma once
// RequestHandler: the dispatch. It decodes one request line and hands it to the service that
// answers it (docs/protocol.md): lookups to the LookupService, jobs to the JobService, imports to
// the ImportService, confirm and canary to their services, stats and top to observe.hpp; it owns
// those services and the kernel registry they share. Every request gets exactly one reply
// carrying its id, ok or error; a malformed line gets an error reply and the connection keeps
// being served. The op a request names (daemon/ops.hpp) picks the one route that answers it
// (dispatch()); answers go to the connection through the Client interface (daemon/client.hpp),
// never through the Session class. io thread only.
#include "jobs/kernel_registry.hpp"
#include "core/device.hpp"
#include "core/protocol.hpp"
#include "daemon/ab_service.hpp"
#include "daemon/canary.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/import_service.hpp"
#include "daemon/job_service.hpp"
#include "daemon/kernel_dirs.hpp"
#include "daemon/observe.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/client.hpp"
#include "daemon/ops.hpp"
#include "daemon/table_publisher.hpp"
#include "daemon/lookup_service.hpp"
#include "daemon/targets.hpp"
#include "db/store.hpp"
#include "jobs/source_archive.hpp"

#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <functional>
#include <memory>
#include <string_view>

namespace ktune::daemon {

// What the handlers need from the server. References outlive the handler.
struct HandlerContext {
  asio::io_context& io;
  const DaemonConfig& config;
  const Store& store;                          // reads
  StoreWriter& writer;                         // the one store writer (daemon/store_writer.hpp)
  Scheduler& scheduler;
  WorkerPool& workers;
  DeviceRegistry& devices;                     // cpu and the CUDA devices the workers see
  std::function<std::size_t()> connections;    // open client connections
  std::function<void()> request_stop;          // graceful stop, from the io loop
  std::chrono::steady_clock::time_point started;
  std::function<std::string()> metrics_address; // where /metrics is served, "" when off
};

class RequestHandler {
public:
  explicit RequestHandler(HandlerContext context);

  // (Re)scans the kernel directories; returns the families that failed to load.
  const std::vector<BrokenKernel>& load_kernels();
  // The kernel directories families are loaded from: configured, then added (kernel_dirs.hpp).
  [[nodiscard]] std::vector<std::string> kernel_dirs() const { return m_kernel_dirs.all(); }
  // Kernel directories of the last load_kernels() that do not exist.
  [[nodiscard]] const std::vector<std::string>& missing_kernel_dirs() const {
    return m_registry.missing_dirs();
  }
  // Why kernel directories of the last load_kernels() gave no family (missing, not a
  // directory, a family given as a kernel directory), one line each.
  [[nodiscard]] const std::vector<std::string>& kernel_dir_problems() const {
    return m_registry.dir_problems();
  }

  void handle(const std::shared_ptr<Client>& client, std::string_view line);

  // Lookups answered so far, by rung, and their latency (/metrics).
  [[nodiscard]] const LookupCounters& lookup_counters() const { return m_lookup.counters(); }

  // From now on every request is answered with shutting_down.
  void set_stopping() {
    m_stopping = true;
    m_jobs.set_stopping();
    m_imports.set_stopping();
    m_lookup.set_stopping();
    m_canary.stop();
  }

  // The import service (the `import` op; daemon/table_watch imports through it too).
  [[nodiscard]] ImportService& imports() { return m_imports; }

private:
  // The route of each op: answers `request` of `client`, whose uid is charged for the jobs the
  // request creates (tune, tune-on-miss). Every Op has exactly one case.
  void dispatch(Op op, protocol::Request request, const std::shared_ptr<Client>& client);
  // The kernels op: every family of the kernel directories, read again, and those that failed.
  [[nodiscard]] Result<nlohmann::json> kernels();
  // The views of stats and top (observe.hpp).
  [[nodiscard]] DaemonView view() const;

  HandlerContext m_ctx;
  KernelDirs m_kernel_dirs{m_ctx.config.kernel_dirs, added_kernel_dirs_file(m_ctx.config.db)};
  KernelRegistry m_registry;
  bool m_stopping = false;
  TargetResolver m_targets{m_registry, m_ctx.devices, m_ctx.workers};
  Planner m_planner{m_ctx.store, m_ctx.writer, source_archive_dir(m_ctx.config.cache_dir)};
  // tune, compile_check, cancel, job, jobs and the quota (job_service.hpp).
  JobService m_jobs{JobContext{m_ctx.io, m_offload, m_ctx.config, m_ctx.store, m_ctx.writer,
                               m_ctx.scheduler, m_ctx.devices, m_registry, m_targets, m_planner}};
  // The ops confirm (an A/B of two builds) and canary (the speed canary's reading).
  AbService m_ab{m_ctx.io, m_ctx.workers, m_ctx.store, m_ctx.devices, m_registry, m_ctx.config};
  Canary m_canary{m_ctx.io, m_ctx.workers, m_ctx.writer, m_ctx.devices, m_ctx.config,
                  shipped_kernels_dir(executable_dir())};
  // The lookup path: the winner index, the ladder, tune-on-miss (lookup_service.hpp).
  LookupService m_lookup{LookupContext{m_ctx.io, m_offload, m_ctx.store, m_registry,
                                       m_ctx.devices, m_targets, m_jobs}};
  // The import op and watched table directories (import_service.hpp).
  ImportService m_imports{ImportContext{m_ctx.io, m_offload, m_ctx.writer, m_ctx.store,
                                        m_ctx.devices,
                                        [this](const WinnerRecord& w) { m_lookup.learn(w); }}};
  // The winner table runtimes map (table_publisher.hpp): follows the lookup service's index.
  TablePublisher m_publisher{m_ctx.io, table_file_for(m_ctx.config),
                             TableSources{m_registry, m_lookup.kernel_cache(), m_ctx.devices,
                                          m_lookup.tune_on_miss_everywhere()},
                             m_lookup.winners()};
  // One thread for pure work too slow for the io thread (decoding an imported table,
  // enumerating a search space of more than k_inline_enumeration combinations). Declared
  // last, so it is joined before anything its tasks use is destroyed.
  asio::thread_pool m_offload{1};
};

} // namespace ktune::daemon
