#pragma once
// Child processes without a shell: posix_spawnp with an explicit argv, output captured through a
// pipe. Used for the host compiler and its version query.
#include "core/result.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace ktune {

// Move-only owner of a file descriptor; closes it on destruction. -1 means empty.
class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : m_fd(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : m_fd(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const { return m_fd; }
  [[nodiscard]] bool valid() const { return m_fd >= 0; }
  [[nodiscard]] int release() {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }
  void reset(int fd = -1);

private:
  int m_fd = -1;
};

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
