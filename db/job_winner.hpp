#pragma once
// Which result of a job is its winner: the one rule the daemon applies at a job's end
// (pick_winner, with the incumbent), and the one answer every reader gives afterwards
// (job_winner: the result the job named, stored with it) -- `job`, `history`, sweeps, `report`;
// `query` and `export` read the key's winner, which the same end stored.
#include "db/store.hpp"

#include <string>
#include <vector>

namespace ktune {

// Whether `candidate` beats `best`: lower median, ties to the lower config index.
[[nodiscard]] bool better_result(const ResultRecord& candidate, const ResultRecord& best);
// The `ok` result with the lowest median (ties: lower config index), pruned ones only when every
// ok result was pruned; nullptr when there is none.
[[nodiscard]] const ResultRecord* fastest_result(const std::vector<ResultRecord>& results);
// Medians within this fraction of each other are the same time to pick_winner: the precision
// the finals measure to (target_error's default, 1%).
inline constexpr double k_same_median = 0.01;
// A job's winner. With declared ties (results.tied): the incumbent -- the tied row whose config
// text is `incumbent_config`, the key's winner before this job -- when it is in the group, else
// the tie with the lowest median, the lowest config index among ties within k_same_median of
// it. Without ties: the best `ok` result. nullptr when there is none. Keeping the incumbent
// makes a re-run that learns nothing new (its ties reused, or a group that still holds the old
// winner) name the same config; the index among equal medians makes two fresh runs name the
// same one (two SGEMM configs measured 6.973 and 6.983 ms: whichever came first won). A tie
// measured oversubscribed (more threads than the lane's CPUs: conditions.oversubscribed) wins
// only when every tie is: at equal speed the config that fits the machine is the one to deploy.
// Whether `r` ran more threads than it had CPUs (its conditions say "oversubscribed").
[[nodiscard]] bool oversubscribed(const ResultRecord& r);
[[nodiscard]] const ResultRecord* pick_winner(const std::vector<ResultRecord>& results,
                                              const std::string& incumbent_config = {});

// The winner `job` named: its stored choice (JobRecord::winner_result) when it has one; else,
// for a job of a store older than schema v10, the key's stored winner when it is one of the
// job's rows (`key_winner`, the winners table's row of its key, when the caller has it); else,
// for a running job or an older one, pick_winner without an incumbent. nullptr when the job has
// no ok result.
[[nodiscard]] const ResultRecord* job_winner(const JobRecord& job,
                                             const std::vector<ResultRecord>& results,
                                             const WinnerRecord* key_winner = nullptr);

} // namespace ktune
