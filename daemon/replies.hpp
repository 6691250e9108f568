#pragma once
// JSON forms of jobs, results and configs shared by the request handlers and the scheduler
// (docs/protocol.md describes every field).
#include "core/param_space.hpp"
#include "core/result.hpp"
#include "daemon/planner.hpp"
#include "db/job_winner.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ktune::daemon {

// {"BM":64,"BN":32}. nlohmann::json objects sort their keys; the stored text keeps params order.
[[nodiscard]] nlohmann::json config_to_json(const Config& config);
// The canonical text stored in the results and winners tables: params order, no spaces.
[[nodiscard]] std::string config_json_text(const Config& config);
// Parses stored config text back into an object (the text itself if it is not JSON).
[[nodiscard]] nlohmann::json stored_config_to_json(const std::string& text);
// The parameter names of a stored config's text, in the order written (the kernel spec's): the
// "params" of replies that carry configs, since a JSON object's members may be read sorted.
[[nodiscard]] nlohmann::json param_order(const std::string& config_text);

[[nodiscard]] nlohmann::json job_to_json(const JobRecord& job);
// The `tune` reply's "prior": null, or {"sources":[{shape,dtype,fingerprint,device,results}],
// "results"}.
[[nodiscard]] nlohmann::json prior_summary(const std::vector<PriorSourceInfo>& sources);
[[nodiscard]] nlohmann::json result_to_json(const ResultRecord& result);

// {"config","config_index","median_ms","gflops","tie_group"} or null; tie_group lists the
// config_index of every declared tie in `results` (the winner included; empty without ties).
[[nodiscard]] nlohmann::json winner_to_json(const ResultRecord* winner,
                                            const std::vector<ResultRecord>& results);

// {"job":{...},"winner":{...}|null} plus "results":[...] when `with_results`.
// The winner of a job still running is the best result so far.
// Errors: unknown_job; db_error from the store.
enum class WithResults { no, yes };
[[nodiscard]] Result<nlohmann::json> job_summary(const Store& store, std::int64_t job_id,
                                                 WithResults with_results);

// A store failure as a client sees it: the daemon's problem, not the request's ("internal",
// naming the store's code and message).
[[nodiscard]] Error internal_error(const Error& error);

// The first line of a compiler log that mentions an error (else its first non-empty line),
// cut to 300 characters: the one-line reason of a compile_error result.
[[nodiscard]] std::string first_error_line(const std::string& log);

} // namespace ktune::daemon
