#include "daemon/job_quota.hpp"

#include "core/protocol.hpp"

#include <string>

namespace ktune::daemon {

std::optional<Error> JobQuota::refusal(uid_t uid) {
  const std::size_t n = active(uid);
  if (n < static_cast<std::size_t>(m_limit)) return std::nullopt;
  return make_error(ErrorCode::too_many_jobs,
                    "uid " + std::to_string(uid) + " has " + std::to_string(n) +
                        " tune jobs queued or running, the limit "
                        "([limits].max_queued_jobs_per_client = " +
                        std::to_string(m_limit) + "); wait for one to end or cancel one");
}

void JobQuota::charge(uid_t uid, std::int64_t job_id) { m_jobs[uid].insert(job_id); }

std::size_t JobQuota::active(uid_t uid) {
  const auto it = m_jobs.find(uid);
  if (it == m_jobs.end()) return 0;
  auto& jobs = it->second;
  for (auto job = jobs.begin(); job != jobs.end();) {
    auto record = m_store.get_job(*job);
    const bool active = record && record->has_value() &&
                        ((*record)->state == JobState::queued || (*record)->state == JobState::running);
    if (!record || active) ++job;
    else job = jobs.erase(job);
  }
  const std::size_t n = jobs.size();
  if (n == 0) m_jobs.erase(it);
  return n;
}

} // namespace ktune::daemon
