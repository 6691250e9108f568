#pragma once
// Which result of a job is its winner: the one rule the daemon (at a job's end) and the readers of
// a key's history (tableio/history) apply to a job's results.
#include "db/store.hpp"

#include <string>
#include <vector>

namespace ktune {

// Whether `candidate` beats `best`: lower median, ties to the lower config index.
[[nodiscard]] bool better_result(const ResultRecord& candidate, const ResultRecord& best);
// The `ok` result with the lowest median (ties: lower config index), pruned ones only when every
// ok result was pruned; nullptr when there is none.
[[nodiscard]] const ResultRecord* fastest_result(const std::vector<ResultRecord>& results);
// A job's winner. With declared ties (results.tied): the incumbent -- the tied row whose config
// text is `incumbent_config`, the key's winner before this job -- when it is in the group, else
// the tie with the lowest median (then the lower config index). Without ties: the best `ok`
// result. nullptr when there is none. Keeping the incumbent makes a re-run that learns nothing
// new (its ties reused, or a group that still holds the old winner) name the same config.
[[nodiscard]] const ResultRecord* pick_winner(const std::vector<ResultRecord>& results,
                                              const std::string& incumbent_config = {});

} // namespace ktune
