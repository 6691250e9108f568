#pragma once
// ErrorCode: the one list of error codes. Code inside ktune compares and passes these values;
// the protocol strings (docs/protocol.md § Error codes, the worker protocol, the CLI's --json
// errors) are made only where a message is encoded or decoded (to_string, error_code_from_wire).
// Candidate statuses (core/status.hpp CandidateStatus) are a separate enum: a worker's failure
// becomes a status only where the scheduler records a result.
#include <optional>
#include <ostream>
#include <string_view>

namespace ktune {

// X(name): the enumerator and its wire string are the same word.
#define KTUNE_ERROR_CODES(X)                                                                      \
  /* the client protocol (docs/protocol.md § Error codes) */                                     \
  X(bad_json) X(bad_request) X(unsupported_version) X(unknown_op) X(unknown_kernel)              \
  X(spec_error) X(spec_too_large) X(bad_shape) X(bad_dtype) X(unknown_device) X(no_device)       \
  X(unknown_job) X(empty_space) X(space_too_large) X(too_many_jobs) X(cancelled)                 \
  X(message_too_large) X(timeout) X(idle_timeout) X(too_many_connections) X(permission_denied)  \
  X(shutting_down) X(store_busy) X(out_of_resources) X(internal)                                 \
  /* files, processes and the instance */                                                         \
  X(io_error) X(unsafe_path) X(lock_unavailable) X(not_found) X(spawn_failed) X(parent_gone)     \
  X(already_running) X(not_running) X(daemon_failed) X(stop_timeout) X(config_error)             \
  X(database_in_use) X(database_missing)                                                          \
  /* the store (db/) */                                                                           \
  X(db_error) X(db_busy) X(db_full) X(db_io) X(db_gone) X(db_corrupt) X(duplicate_result)        \
  X(unknown_result) X(source_changed)                                                             \
  /* workers and their requests (daemon <-> ktune-worker) */                                      \
  X(worker_crashed) X(worker_gone) X(worker_timeout) X(worker_killed) X(worker_error) X(withdrawn) \
  X(device_busy) X(bad_reply) X(bad_batch) X(compile_error) X(bench_failed) X(bad_launch)       \
  X(bad_expression)                                                                               \
  /* tables, sweeps, fleets, searches and the CLI */                                              \
  X(invalid_table) X(bad_job_list) X(bad_budget) X(sweep_error) X(bad_shard) X(bad_fleet)        \
  X(slurm_error) X(bad_space) X(bad_observation) X(unknown_strategy) X(bad_prior) X(bad_record)  \
  X(bad_repeats) X(unsupported_objective) X(no_cost) X(usage) X(ambiguous) X(unsupported)  \
  X(bad_result)                                                                    \
  X(job_failed) X(invalid_rule) X(bad_table) X(unknown_layout)

enum class ErrorCode {
#define KTUNE_ERROR_CODE_ENUM(name) name,
  KTUNE_ERROR_CODES(KTUNE_ERROR_CODE_ENUM)
#undef KTUNE_ERROR_CODE_ENUM
};

// The code's wire string ("bad_request").
[[nodiscard]] std::string_view to_string(ErrorCode code);
// The code a wire string names; nullopt for a word this build does not know.
[[nodiscard]] std::optional<ErrorCode> parse_error_code(std::string_view text);

inline std::ostream& operator<<(std::ostream& out, ErrorCode code) { return out << to_string(code); }

// JSON never carries an ErrorCode implicitly (nlohmann would write its number): encoders call
// to_string. Declared so that an implicit conversion fails to compile.
template <class BasicJson>
void to_json(BasicJson&, ErrorCode) = delete;

} // namespace ktune
