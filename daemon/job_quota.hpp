#pragma once
// JobQuota: the per-uid cap on tune jobs queued or running ([limits].max_queued_jobs_per_client,
// docs/protocol.md § Limits). A job is charged to the uid whose request created it: a `tune`
// (a CUDA tune's job too, created once a worker answered the device query) or a lookup's
// tune-on-miss job. A charged job counts until the store shows it in any other state than queued
// or running; one whose state cannot be read stays counted until it can. io thread only.
#include "core/result.hpp"
#include "db/store.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include <sys/types.h>

namespace ktune::daemon {

class JobQuota {
public:
  // `store` outlives the quota; `limit` >= 1.
  JobQuota(const Store& store, std::int64_t limit) : m_store(store), m_limit(limit) {}

  // nullopt when `uid` may create one more job; else too_many_jobs, the message naming the uid,
  // its job count and the limit.
  [[nodiscard]] std::optional<Error> refusal(uid_t uid);
  // Counts `job_id` (just created by a request of `uid`) against `uid`.
  void charge(uid_t uid, std::int64_t job_id);

private:
  // Jobs charged to `uid` still queued or running; forgets those that ended.
  [[nodiscard]] std::size_t active(uid_t uid);

  const Store& m_store;
  std::int64_t m_limit;
  std::map<uid_t, std::set<std::int64_t>> m_jobs;
};

} // namespace ktune::daemon
