#pragma once
// LookupService: answers `lookup` (docs/protocol.md § lookup) from memory. It owns the winner
// index (every stored winner) and the kernel cache (what a lookup needs of each family), walks
// the ladder (exact, stale, nearest shape, the kernel's default; winner_index.hpp), counts
// lookups by rung and latency (/metrics), and keeps the tune-on-miss registry (one job per missed
// key) and the revalidations of stale keys.
//
// Two ways in: answer_line() reads a lookup line of the plain shape without a JSON tree
// (lookup_line.hpp), the path runtimes take; lookup() answers a decoded request. Both share the
// ladder, so they answer alike.
//
// Winners come in through learn() (an import) and job_ended() (a done tune job's winner, read
// from the store). The one "winner changed" hook is the index's observer: winners().set_observer
// (TablePublisher takes it) hears of every winner learnt (every put(), resume included).
// io thread only.
#include "core/protocol.hpp"
#include "daemon/client.hpp"
#include "daemon/job_service.hpp"
#include "daemon/observe.hpp"
#include "daemon/planner.hpp"
#include "daemon/targets.hpp"
#include "daemon/winner_index.hpp"
#include "db/store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace ktune::daemon {

class DeviceRegistry;
struct ResolvedDevice;

// What the lookup service needs of the daemon. References outlive the service.
struct LookupContext {
  asio::io_context& io;
  asio::thread_pool& offload;   // pure work too slow for the io thread (a family read again,
                                // a big space enumerated); its results come back on `io`
  const Store& store;           // the winners at start, a done job's winner
  KernelRegistry& registry;
  DeviceRegistry& devices;
  TargetResolver& targets;
  // Plans and queues or joins tune-on-miss jobs (enumerate() then submit()); its quota refuses
  // them with too_many_jobs.
  JobService& jobs;
};

class LookupService {
public:
  // Loads every winner of the store into the index (an error is logged: lookups start empty).
  // KTUNE_TUNE_ON_MISS=1 in the environment makes every non-exact lookup tune on miss.
  explicit LookupService(LookupContext context);

  // Answers `line` when it is a lookup line of the plain shape (true: the reply was sent to
  // `client`); false: not that shape, nothing sent, the caller decodes it the general way.
  [[nodiscard]] bool answer_line(Client& client, std::string_view line);
  // `lookup` decoded: {"kernel","shape","dtype","device","tune_on_miss"}. `client`: the uid a
  // tune-on-miss job is charged to.
  [[nodiscard]] Result<nlohmann::json> lookup(const protocol::Request& request, uid_t client);

  // `revalidate` (docs/protocol.md): queues the revalidation of every stale key -- a winner on
  // a local device's hardware under another environment whose key has no winner under this one
  // -- of `kernel` (every kernel when absent) on `device` (every local device when absent).
  // Reply {"revalidations":[{"kernel","shape","dtype","device","change","job"}...]}; job null
  // while a big space is planned. Errors: bad_request (a field of the wrong type),
  // unknown_device / no_device (not a device of this machine), shutting_down.
  [[nodiscard]] Result<nlohmann::json> revalidate_all(const protocol::Request& request, uid_t client);

  // A winner just stored (an import): the index holds it from now on.
  void learn(const WinnerRecord& winner) {
    learn_identity(winner.fingerprint);
    m_index.put(winner);
  }
  // A job ended: a done tune job's winner is read from the store and learnt; the tune-on-miss
  // keys it served are forgotten (a later miss queues again).
  void job_ended(std::int64_t job_id, JobState state);

  // The index; its observer (set_observer) is the "winner changed" hook.
  [[nodiscard]] WinnerIndex& winners() { return m_index; }
  [[nodiscard]] KernelCache& kernel_cache() { return m_kernel_cache; }
  // Whether KTUNE_TUNE_ON_MISS=1 (the reference stays valid as long as the service).
  [[nodiscard]] const bool& tune_on_miss_everywhere() const { return m_tune_on_miss_policy; }
  [[nodiscard]] const LookupCounters& counters() const { return m_lookups; }
  // Tune-on-miss keys with a queued, running or being-planned job.
  [[nodiscard]] std::size_t pending_tunes() const { return m_pending_tunes.size(); }
  // Revalidations queued or running (stale keys being measured again).
  [[nodiscard]] std::size_t pending_revalidations() const { return m_revalidations.size(); }
  // From now on no tune-on-miss job is queued.
  void set_stopping() { m_stopping = true; }

  // Revalidation (docs/protocol.md § lookup, `stale`): the configs measured again under the new
  // environment are the stale winner's, the old key's results within k_revalidate_within of its
  // time (the tie group and runners-up, fastest first) and the kernel's [default], at most
  // k_revalidate_configs in all, those the kernel admits at the shape. Every one of them is a
  // near tie, so all go to the finals: a revalidation's cost is mostly its finals. When that job is done and the
  // old winner, measured again, failed or is more than k_revalidate_moved slower than the new
  // best (the ranking moved: the old top is no longer a safe sample), the key's full search is
  // queued too (a tune-on-miss of the whole space).
  static constexpr double k_revalidate_within = 1.05;
  static constexpr std::size_t k_revalidate_configs = 5;
  static constexpr double k_revalidate_moved = 1.05;

private:
  // The ladder's answer as the reply's result text; counts the lookup and its time.
  [[nodiscard]] Result<std::string> result_text(const std::string& kernel, const std::string& shape,
                                                const std::string& dtype, const std::string& device,
                                                bool tune_on_miss, uid_t client);
  [[nodiscard]] Result<std::string> climb(const std::string& kernel, const std::string& shape,
                                          const std::string& dtype, const std::string& device,
                                          bool tune_on_miss, uid_t client,
                                          std::optional<Rung>& rung);
  // Tune-on-miss: a job of the lowest priority for the exact key on a local device, joined like
  // any identical request. Returns the job id; a new job is charged to `client`, and refused
  // with too_many_jobs at its quota. A space over k_inline_enumeration combinations is planned
  // off the loop: nullopt until then (the misses answered meanwhile carry no tune_job).
  [[nodiscard]] Result<std::optional<std::int64_t>> tune_on_miss(const CachedKernel& kernel,
                                                                 const std::string& shape,
                                                                 const std::string& dtype,
                                                                 const ResolvedDevice& device,
                                                                 uid_t client);
  // The job of `key` (a tune-on-miss, a revalidation: `kind`, a static string for the log)
  // submitted over its space; on failure the key is forgotten.
  [[nodiscard]] Result<std::int64_t> submit_tune_on_miss(const std::string& key,
                                                         PlanRequest request,
                                                         Result<std::vector<Config>> configs,
                                                         uid_t client, std::string_view kind);

  // A stale answer on a local device: queues the key's revalidation once (nothing when a tune
  // or revalidation of the key is pending); errors are logged, the answer stands.
  // Returns the job id (nullopt while it is planned off the loop, or when none was queued).
  std::optional<std::int64_t> revalidate(const CachedKernel& kernel, const std::string& shape,
                                         const std::string& dtype, const ResolvedDevice& device,
                                         const WinnerIndex::Stale& stale, uid_t client);
  // The configs a revalidation measures at the resolved `target` (see k_revalidate_within);
  // errors: the space's, the store's, not_found when the kernel admits none of them there.
  [[nodiscard]] Result<std::vector<nlohmann::json>> revalidation_configs(
      const CachedKernel& kernel, const std::string& shape, const std::string& dtype,
      const Target& target, const WinnerIndex::Stale& stale);
  // Plans `request` (its space enumerated inline, or off the loop when it is big: nullopt until
  // then) and submits it as the job of `key`, charged to `client`.
  [[nodiscard]] Result<std::optional<std::int64_t>> plan_and_submit(const std::string& key,
                                                                    PlanRequest request,
                                                                    uid_t client,
                                                                    std::string_view kind);
  struct Revalidation {
    std::string kernel, shape, dtype, device, old_config;
    uid_t client = 0;
  };
  // A revalidation job ended done with `winner` stored: the full search when the ranking moved
  // (see above).
  void revalidation_ended(std::int64_t job_id, const WinnerRecord& winner, const Revalidation& r);
  // The identity of a fingerprint the index does not know yet: a local device's from the
  // registry, any other from the store (one read per fingerprint).
  void learn_identity(std::string_view fingerprint);

  LookupContext m_ctx;
  WinnerIndex m_index;
  KernelCache m_kernel_cache{m_ctx.registry};
  LookupCounters m_lookups;
  bool m_tune_on_miss_policy = false;  // KTUNE_TUNE_ON_MISS=1 in ktuned's environment
  bool m_stopping = false;
  // Tune-on-miss keys with a queued or running job, so that a repeated miss skips planning.
  std::map<std::string, std::int64_t> m_pending_tunes;     // key -> job id (0: being planned)
  std::multimap<std::int64_t, std::string> m_pending_jobs;  // job id -> keys
  std::map<std::string, Revalidation> m_revalidations;      // key -> what it revalidates
};

} // namespace ktune::daemon
