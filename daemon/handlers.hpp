#pragma once
// RequestHandler: decodes one request line and answers it (docs/protocol.md). Every request
// gets exactly one reply carrying its id, ok or error; `tune` with "wait": true sends progress
// events first and replies when the job ends. A malformed line gets an error reply and the
// connection keeps being served. The op a request names (daemon/ops.hpp) picks the one route
// that answers it (dispatch()); answers go to the connection through the Client interface
// (daemon/client.hpp), never through the Session class. io thread only.
#include "jobs/kernel_registry.hpp"
#include "core/device.hpp"
#include "core/protocol.hpp"
#include "daemon/ab_service.hpp"
#include "daemon/canary.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/job_quota.hpp"
#include "daemon/kernel_dirs.hpp"
#include "daemon/observe.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/table_import.hpp"
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
    m_lookup.set_stopping();
    m_canary.stop();
  }

  // The reply of an import or its error; called on the io thread.
  using ImportDone = std::function<void(Result<nlohmann::json>)>;
  // Imports the text of a table file (json or T4 written by ktune; `where` names it in errors)
  // the way the `import` op does: decoded on the helper thread, written in steps with the loop
  // free between them. `done` is not called when the daemon stops first. (daemon/table_watch)
  void import_text(std::string text, std::string where, tableio::Policy policy, ImportDone done);

private:
  // Plans (over `configs`, PlanRequest's space as Planner::enumerate gives it), joins or creates
  // and queues one tune job; the reply fields of that job.
  [[nodiscard]] Result<nlohmann::json> submit_tune(PlanRequest request,
                                                   Result<std::vector<Config>> configs,
                                                   uid_t client);
  // The second half of `tune`: submits each plan over its space, then replies or watches.
  void submit_tunes(const std::shared_ptr<Client>& session, const protocol::Request& request,
                    bool wait, bool all, std::vector<PlanRequest> plans,
                    std::vector<Result<std::vector<Config>>> spaces);

  // The route of each op: answers `request` of `client`, whose uid is charged for the jobs the
  // request creates (tune, tune-on-miss). Every Op has exactly one case.
  void dispatch(Op op, protocol::Request request, const std::shared_ptr<Client>& client);
  // Ops answered at once. `client`: the uid of the requesting connection.
  [[nodiscard]] Result<nlohmann::json> job(const protocol::Request& request);
  [[nodiscard]] Result<nlohmann::json> jobs(const protocol::Request& request);
  [[nodiscard]] Result<nlohmann::json> kernels();
  [[nodiscard]] Result<nlohmann::json> stats() const;
  // `top`: the live view of jobs, lanes, workers, throughput and recent failures (observe.hpp).
  [[nodiscard]] Result<nlohmann::json> top() const;
  // {"stalled": false} or the store writer's stall: reason, writes waiting, whether rows spill.
  [[nodiscard]] nlohmann::json store_state() const;
  // Adds "stalled" (why, for how long) to a queued or running job's JSON while writes wait.
  void mark_stalled(nlohmann::json& job) const;
  // `tune` answers later when it waits; the reply (or error) is sent by tune itself. At the quota
  // (JobQuota) it is refused before anything else, joining an identical job included. Device
  // "all": one job per local device that has a family of the kernel.
  void tune(const std::shared_ptr<Client>& session, const protocol::Request& request);
  // {"job": N}: cancels a queued or running job (Scheduler::cancel).
  [[nodiscard]] Result<nlohmann::json> cancel(const protocol::Request& request);
  // `import`: the table is written in steps of k_import_step_rows rows, each one transaction,
  // with the loop free between steps; the reply comes after the last one. A step the database
  // does not take for now is tried again (for up to a minute).
  void start_import(const std::shared_ptr<Client>& session, protocol::Request request);
  void import_run(Result<ImportRun> run, ImportDone done);
  void import_step(std::shared_ptr<ImportRun> run, ImportDone done);
  // Streams a queued or running job's progress to the session as events of `request`, then its
  // summary as the reply.
  void watch_job(const std::shared_ptr<Client>& session, const protocol::Request& request,
                 std::int64_t job_id);
  // The same for several jobs (tune --device all): one reply {"jobs":[...]} once all ended.
  void watch_jobs(const std::shared_ptr<Client>& session, const protocol::Request& request,
                  std::vector<std::int64_t> ids);

  HandlerContext m_ctx;
  JobQuota m_quota;
  KernelDirs m_kernel_dirs{m_ctx.config.kernel_dirs, added_kernel_dirs_file(m_ctx.config.db)};
  KernelRegistry m_registry;
  bool m_stopping = false;
  TargetResolver m_targets{m_registry, m_ctx.devices, m_ctx.workers};
  Planner m_planner{m_ctx.store, m_ctx.writer, source_archive_dir(m_ctx.config.cache_dir)};
  // The ops confirm (an A/B of two builds) and canary (the speed canary's reading).
  AbService m_ab{m_ctx.io, m_ctx.workers, m_ctx.store, m_ctx.devices, m_registry, m_ctx.config};
  Canary m_canary{m_ctx.io, m_ctx.workers, m_ctx.writer, m_ctx.devices, m_ctx.config,
                  shipped_kernels_dir(executable_dir())};
  // The lookup path: the winner index, the ladder, tune-on-miss (lookup_service.hpp).
  LookupService m_lookup{LookupContext{
      m_ctx.io, m_offload, m_ctx.store, m_registry, m_ctx.devices, m_targets, m_quota,
      [this](PlanRequest request, Result<std::vector<Config>> configs, uid_t client) {
        return submit_tune(std::move(request), std::move(configs), client);
      }}};
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
