#pragma once
// A key's history in the store: its finished runs (jobs that ended done), oldest first, each as
// its winner's measurement. What `ktune history` lists and what `--baseline last-good` takes its
// baseline from (tableio/compare.hpp: compare_with_history, last_good_runs).
//
// A key here is (kernel, shape, dtype, device fingerprint) over every source hash: a changed
// kernel source is the change a nightly sweep exists to judge. Reads only; a read-only store is
// enough.
#include "core/result.hpp"
#include "db/store.hpp"
#include "tableio/compare.hpp"

#include <string>
#include <vector>

namespace ktune::tableio {

struct HistoryKey {
  std::string kernel, shape, dtype, fingerprint;
};

// The point of one job (its results): the winner the job named (db/job_winner.hpp's
// job_winner); nullopt when the job has no ok result.
[[nodiscard]] std::optional<RunPoint> run_point(const JobRecord& job,
                                                const std::vector<ResultRecord>& results);

// Every done job of `key`, oldest first (finished_at, then id), that has an ok result.
// Errors are the store's ("db_error").
[[nodiscard]] Result<std::vector<RunPoint>> load_history(const Store& store, const HistoryKey& key);

} // namespace ktune::tableio
