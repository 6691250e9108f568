#pragma once
// Planner: the one place a tune job's plan is built, for every way a job comes to be -- a client's
// tune request (one per device with --device all), a tune-on-miss lookup, and a job resumed after
// a restart. The search space, the quarantine, the budget, the rows a job reuses instead of
// measuring and the request's options are decided here once. io thread only (it reads the store).
//
//   plan()    request -> JobPlan whose record is not stored yet (id 0): what an identical queued
//             or running job is compared with before anything is written
//   commit()  stores the kernel (and keeps a copy of its sources: jobs/source_archive.hpp), the
//             device and the job through the store writer; fills record.id and the reusable rows
//   create()  stores a job that is not a tune (a compile check) through the store writer
//   resume()  a stored job -> JobPlan with the rows it already has
//
// The prior: a job whose strategy learns from earlier results (search::uses_prior) is given the
// store's results of the same kernel source at other shapes, dtypes and devices (imported tables
// included), newest first, at most k_prior_rows of them, unless the request asks for a cold
// search. A resumed job is given the store's prior as it is then.
#include "daemon/store_writer.hpp"
#include "daemon/targets.hpp"
#include "jobs/kernel_registry.hpp"
#include "core/device.hpp"
#include "core/param_space.hpp"
#include "core/shape.hpp"
#include "db/store.hpp"
#include "search/prior.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ktune::daemon {

// Spaces of up to this many combinations are enumerated on the io thread (a few ms at most);
// bigger ones on a helper thread (RequestHandler, LookupService), so that lookups never wait for them.
inline constexpr std::uint64_t k_inline_enumeration = 10'000;
// The combinations of the spec's params (saturating): what enumeration walks at any shape.
[[nodiscard]] std::uint64_t cartesian_size(const KernelSpec& spec);

// The priority of tune-on-miss jobs: below any a client may ask for (-100..100).
inline constexpr int k_background_priority = -1000;

// The most results of earlier jobs a job's prior is built from (the newest).
inline constexpr std::int64_t k_prior_rows = 20'000;

// One earlier tune of the kernel that a job's prior holds: a (shape, dtype, device) key.
struct PriorSourceInfo {
  std::string shape, dtype, fingerprint;
  std::string device;             // the job's device name when it is the same fingerprint, else ""
  std::size_t results = 0;        // results of configs in the job's space
};
// A validated tune, ready to run.
struct JobPlan {
  JobRecord record;               // strategy, budget (evaluations) and seed drive the search;
                                  // options: priority and per-job deadlines
  LoadedKernel kernel;
  DeviceInfo device;              // the device the job runs on (plan(); resume() leaves it empty)
  Shape shape;                    // conformed to the kernel's dims
  std::vector<Config> configs;    // the search space; a candidate's config_index is its position
  std::size_t quarantined = 0;    // configs left out because they crashed or hung before
  std::vector<ResultRecord> existing; // rows the job already has (resume): not run again
  std::vector<ResultRecord> reusable; // rows of other jobs for the same key: copied, not run
  bool cold = false;                  // the request asked for no prior
  search::Prior prior;                // earlier results the strategy starts from (ids: configs)
  std::vector<PriorSourceInfo> prior_sources; // one per source of `prior`, in the same order

  // Whether an identical queued or running job may take this request instead (Scheduler::
  // find_same): not when it asks to remeasure, for a cold search or for given configs.
  [[nodiscard]] bool joinable() const {
    return !record.options.remeasure && !cold && record.configs.empty();
  }
};

// What a tune asks for, checked against its kernel (RequestHandler resolves it).
struct PlanRequest {
  LoadedKernel kernel;
  Shape shape;                    // conformed
  std::string dtype;
  DeviceInfo device;
  std::string strategy = "exhaustive";
  std::optional<std::int64_t> budget;      // evaluations
  std::optional<double> budget_fraction;   // or a share of the admitted configs
  std::optional<double> budget_s;          // and/or seconds of the job's run time
  std::int64_t seed = 0;
  bool cold = false;              // search without the store's earlier results
  JobOptions options;
  // The tune's `configs`: the job's candidates are exactly these, in this order (strategy
  // exhaustive only), plus the key's winner when it has one and it is not among them (its row
  // is reused, so that the job's end weighs the key's winner too: given configs replace it only
  // by measuring faster). Empty: the whole space.
  std::vector<nlohmann::json> given;

  // The request for a resolved target (kernel, shape, dtype, device), every other field its
  // default.
  [[nodiscard]] static PlanRequest of(Target target) {
    PlanRequest request;
    request.kernel = std::move(target.kernel);
    request.shape = std::move(target.shape);
    request.dtype = std::move(target.dtype);
    request.device = std::move(target.device);
    return request;
  }
};

// Statuses that quarantine a config: it crashed, hung or lost its worker.
[[nodiscard]] bool quarantines(CandidateStatus status);

// Removes from `configs` those that quarantine (see quarantines()) in an earlier job of the same
// kernel, source hash and device fingerprint, other than job `except_job`. Returns how many were
// removed. Errors: db_error.
[[nodiscard]] Result<std::size_t> drop_quarantined(const Store& store, const std::string& kernel,
                                                   const std::string& source_hash,
                                                   const std::string& fingerprint,
                                                   std::vector<Config>& configs,
                                                   std::int64_t except_job = 0);

class Planner {
public:
  // `store` is read; `writer` writes (the Server's one StoreWriter). `source_archive`: where
  // commit() keeps each tuned kernel source (jobs/source_archive.hpp); "" = nowhere.
  Planner(const Store& store, StoreWriter& writer, std::string source_archive = {})
      : m_store(store), m_writer(writer), m_source_archive(std::move(source_archive)) {}

  // The configs `spec` admits at `shape`. Touches no store: safe on any thread, which is where
  // a big space is enumerated (RequestHandler, k_inline_enumeration). Errors: the spec's
  // (bad_shape, space_too_large, ...), empty_space saying why.
  [[nodiscard]] static Result<std::vector<Config>> enumerate(const KernelSpec& spec,
                                                             const Shape& shape);

  // The search space at the shape (enumerated here, or given by enumerate()), minus quarantined
  // configs (unless retry_failed), and the record of the job. Errors: enumerate()'s, internal
  // when the store cannot be read.
  [[nodiscard]] Result<JobPlan> plan(PlanRequest request) const;
  [[nodiscard]] Result<JobPlan> plan(PlanRequest request,
                                     Result<std::vector<Config>> configs) const;

  // Stores the kernel, the device and the job (state queued); sets plan.record.id and the rows
  // the job reuses. A copy of the kernel's sources that cannot be kept is logged, never an error
  // (the job runs; an A/B against it later may have to say its old build is gone). Written now
  // (StoreWriter::write_now). Errors: store_busy (the database takes no writes now, or writes
  // wait), internal.
  [[nodiscard]] Result<void> commit(JobPlan& plan) const;
  // Stores `record` as a new job (state queued) and sets record.id: a job that is not a tune
  // (a compile check). Errors: as commit().
  [[nodiscard]] Result<void> create(JobRecord& record) const;

  // The plan of a stored job that did not finish, with the rows it has. Errors: source_changed
  // when the kernel changed since, the spec's errors, internal.
  [[nodiscard]] Result<JobPlan> resume(KernelRegistry& registry, const JobRecord& job) const;

private:
  // Writes `before` (when given) and `record` as a new job in one transaction, now
  // (StoreWriter::write_now); sets record.id (0 on an error). Errors: store_busy, internal.
  [[nodiscard]] Result<void> write_job(JobRecord& record, const StoreWriter::Write& before) const;
  // The rows measured for the record's winner key by other jobs, newest per config (none when
  // the job remeasures; quarantining statuses excluded).
  [[nodiscard]] Result<std::vector<ResultRecord>> reusable_results(const JobRecord& record) const;
  // Fills plan.prior and plan.prior_sources from the store (nothing when the plan is cold or
  // its strategy uses no prior). Errors: db_error.
  [[nodiscard]] Result<void> attach_prior(JobPlan& plan) const;
  // Restricts `configs` (the space at the record's shape) to the given configs and the key's
  // winner, and records them as record.configs. Errors: bad_request naming a config that is
  // not an admitted config of the kernel at the shape; internal.
  [[nodiscard]] Result<void> restrict_to_given(const KernelSpec& spec, JobRecord& record,
                                               std::vector<Config>& configs,
                                               const std::vector<nlohmann::json>& given) const;

  const Store& m_store;
  StoreWriter& m_writer;
  std::string m_source_archive;
};

} // namespace ktune::daemon
