#pragma once
// JobService: the jobs' side of the protocol (docs/protocol.md): `tune` (validation, kernel,
// shape, dtype and device resolution, one job per device with "all", joining an identical job,
// the per-uid quota), `compile_check` (planned as a job by the Planner), `cancel`, `job`, `jobs`,
// and watching jobs to their end ("wait": true). Jobs are planned by the Planner, stored through
// the store writer (Planner::commit) and run by the Scheduler; this class reads the store only for
// job summaries. A search space of more than k_inline_enumeration combinations is enumerated on
// the helper thread (enumerate()), for tune and tune-on-miss alike, so the loop never waits for
// one. Answers go to the client through Reply (daemon/reply.hpp). io thread only.
#include "core/protocol.hpp"
#include "daemon/client.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/job_quota.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/targets.hpp"
#include "db/store.hpp"
#include "jobs/kernel_registry.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <sys/types.h>

namespace ktune::daemon {

// What the job service needs of the daemon. References outlive the service.
struct JobContext {
  asio::io_context& io;
  asio::thread_pool& offload;     // enumerates big spaces; results come back on `io`
  const DaemonConfig& config;     // deadline limits, the quota, the compile cache
  const Store& store;             // job summaries
  const StoreWriter& writer;      // whether writes wait (a job's "stalled")
  Scheduler& scheduler;
  DeviceRegistry& devices;
  KernelRegistry& registry;
  TargetResolver& targets;
  const Planner& planner;
};

// The JobOptions of a tune request's body: "remeasure", "priority" (from `request`), and
// "retry_failed", "compile_timeout_s", "bench_timeout_s", each deadline within this ktuned's
// floor and limit ([limits] in ktuned.toml). Errors: bad_request naming the field and the bound.
[[nodiscard]] Result<JobOptions> tune_options(const protocol::TuneRequest& request,
                                              const nlohmann::json& body,
                                              const DaemonConfig& config);

class JobService {
public:
  explicit JobService(JobContext context);

  // The search spaces of the plans, then `then(plans, spaces)` on the io thread: at once when
  // every space is at most k_inline_enumeration combinations, else once the helper thread has
  // enumerated them (never once the service stops).
  using Enumerated = std::function<void(std::vector<PlanRequest>,
                                        std::vector<Result<std::vector<Config>>>)>;
  void enumerate(std::vector<PlanRequest> plans, Enumerated then);

  // Plans (over `configs`, the space as Planner::enumerate gives it), joins or creates and queues
  // one tune job; a job created is charged to `client`. The reply fields of `tune` for that job:
  // {"job","total","state","quarantined","device","prior"} and "joined": true when it joined.
  // Errors: the plan's, store_busy, internal.
  [[nodiscard]] Result<nlohmann::json> submit(PlanRequest request,
                                              Result<std::vector<Config>> configs, uid_t client);

  // `tune`: answers later when it waits; at the quota it is refused (too_many_jobs) before
  // anything else, joining an identical job included. Device "all": one job per local device
  // that has a family of the kernel, replied as {"jobs":[...]}.
  void tune(const std::shared_ptr<Client>& client, const protocol::Request& request);
  // `compile_check` (daemon/compile_check.hpp): its space enumerated like a tune's (enumerate()).
  void compile_check(const std::shared_ptr<Client>& client, const protocol::Request& request);
  // {"job": N}: cancels a queued or running job. Errors: unknown_job, bad_request (the job
  // ended), internal.
  [[nodiscard]] Result<nlohmann::json> cancel(const protocol::Request& request);
  // A job's summary with its results; "stalled" while the store's writes wait.
  [[nodiscard]] Result<nlohmann::json> job(const protocol::Request& request);
  // The newest jobs ("limit").
  [[nodiscard]] Result<nlohmann::json> jobs(const protocol::Request& request);

  // The per-uid cap on queued jobs, shared with tune-on-miss.
  [[nodiscard]] JobQuota& quota() { return m_quota; }
  // From now on nothing enumerated off the loop is submitted.
  void set_stopping() { m_stopping = true; }

private:
  // The devices a tune asks for: its device, or with "all" every local device with a family of
  // the kernel. Errors: no_device, unknown_kernel.
  [[nodiscard]] Result<std::vector<std::string>> tune_devices(const protocol::TuneRequest& request);
  // One resolved PlanRequest per device. Errors: the resolver's.
  [[nodiscard]] Result<std::vector<PlanRequest>> plan_requests(const protocol::TuneRequest& request,
                                                               const JobOptions& options);
  // The second half of `tune`: submits each plan over its space, then replies or watches.
  void submit_tunes(const std::shared_ptr<Client>& client, const protocol::Request& request,
                    bool wait, bool all, std::vector<PlanRequest> plans,
                    std::vector<Result<std::vector<Config>>> spaces);
  // Streams a queued or running job's progress to the client as events of `request`, then its
  // summary as the reply.
  void watch_job(const std::shared_ptr<Client>& client, const protocol::Request& request,
                 std::int64_t job_id);
  // The same for several jobs (tune --device all): one reply {"jobs":[...]} once all ended.
  void watch_jobs(const std::shared_ptr<Client>& client, const protocol::Request& request,
                  std::vector<std::int64_t> ids);
  // Adds "stalled" (why, for how long) to a queued or running job's JSON while writes wait.
  void mark_stalled(nlohmann::json& job) const;

  JobContext m_ctx;
  JobQuota m_quota;
  bool m_stopping = false;
};

} // namespace ktune::daemon
