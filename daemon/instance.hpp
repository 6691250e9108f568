#pragma once
// One ktuned per instance (KTUNE_HOME or the per-user runtime directory): an exclusive flock on
// the instance's lock file, held for the daemon's lifetime, plus a pid file for people and
// scripts. The kernel drops the lock when the process dies, so a crashed daemon never leaves a
// lock behind; the lock file itself is kept (removing it would race with a starting daemon).
// Both files are opened relative to the checked runtime directory (core/safe_fs.hpp), never
// through a link.
#include "core/result.hpp"
#include "core/safe_fs.hpp"
#include "core/unique_fd.hpp"

#include <string>
#include <string_view>

namespace ktune::daemon {


class InstanceLock {
public:
  // Takes the lock on `dir`/`lock_name` without waiting and writes this process's pid into it
  // and (atomically) into `dir`/`pid_name`. Errors: already_running ("ktuned already running
  // (pid N)", the pid read from the lock file), unsafe_path (a link planted there), io_error.
  [[nodiscard]] static Result<InstanceLock> acquire(const SafeDir& dir, const std::string& lock_name,
                                                    const std::string& pid_name);

  InstanceLock(InstanceLock&&) noexcept = default;
  InstanceLock& operator=(InstanceLock&&) noexcept = default;
  // Removes the pid file, then releases the lock.
  ~InstanceLock();

private:
  InstanceLock(UniqueFd fd, std::string pid_file) : m_fd(std::move(fd)), m_pid_file(std::move(pid_file)) {}
  UniqueFd m_fd;
  std::string m_pid_file;
};

// Takes an exclusive flock on `fd` without waiting; on EWOULDBLOCK the pid written in the file
// (or "unknown") goes into `holder`. Errors: already_running, io_error naming `path`.
[[nodiscard]] Result<void> lock_now(int fd, const std::string& path, std::string& holder);

// Writes all of `text` to `fd`, retrying short writes and EINTR. False on an error (errno set).
[[nodiscard]] bool write_all(int fd, std::string_view text);

} // namespace ktune::daemon
