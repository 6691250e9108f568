#pragma once
// Child processes without a shell: posix_spawnp with an explicit argv, output captured through a
// pipe. Used for the host compiler and its version query.
#include "core/result.hpp"
#include "core/unique_fd.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace ktune {

enum class ProcessEnd {
  exited,     // `code` is the exit status
  signaled,   // `code` is the signal number
  unknown,    // the status was reaped elsewhere (a process-wide SIGCHLD handler): ECHILD
};

struct ProcessResult {
  ProcessEnd end = ProcessEnd::unknown;
  int code = 0;
  std::string output;       // stdout and stderr interleaved, at most the requested bytes
  bool truncated = false;   // more output was produced (and drained) than was kept

  [[nodiscard]] bool succeeded() const { return end == ProcessEnd::exited && code == 0; }
};

// Runs argv[0] (searched in PATH) with `argv`, stdin from /dev/null, stdout and stderr into one
// pipe of which the first `max_output_bytes` are kept; blocks until the child exits. The pipe is
// close-on-exec in this process, so children spawned concurrently by other threads do not hold
// it open. Errors: "spawn_failed" naming the program and errno's text when it cannot be started.
// Thread-safe.
[[nodiscard]] Result<ProcessResult> run_captured(const std::vector<std::string>& argv,
                                                 std::size_t max_output_bytes);

} // namespace ktune
