#pragma once
// Candidate statuses: every candidate ends with exactly one; a failed candidate is data.
#include <optional>
#include <string_view>

namespace ktune {

enum class CandidateStatus {
  ok,
  invalid_config,   // rejected by the spec's constraints or launch limits
  compile_error,
  compile_timeout,
  launch_error,     // out of resources (CUDA 701) or a bad launch geometry
  runtime_error,    // the run failed without killing the worker (allocation, exit code)
  mismatch,         // output differs from the reference, or wrote past a buffer's end
  crash,            // the worker died on a signal or a sticky CUDA error
  timeout,          // killed after its bench deadline
  worker_lost,      // the worker vanished without a signal (exit in the middle of a run)
};

[[nodiscard]] std::string_view to_string(CandidateStatus status);
[[nodiscard]] std::optional<CandidateStatus> parse_candidate_status(std::string_view text);

} // namespace ktune
