#pragma once
// One ktuned per instance (KTUNE_HOME or the per-user runtime directory): an exclusive flock on
// the instance's lock file, held for the daemon's lifetime, plus a pid file for people and
// scripts. The kernel drops the lock when the process dies, so a crashed daemon never leaves a
// lock behind; the lock file itself is kept (removing it would race with a starting daemon).
#include "core/result.hpp"
#include "core/unique_fd.hpp"

#include <string>
#include <string_view>

namespace ktune::daemon {

inline constexpr const char* k_already_running = "already_running";
inline constexpr const char* k_database_in_use = "database_in_use";

class InstanceLock {
public:
  // Takes the lock without waiting and writes this process's pid into the lock file and the
  // pid file. Errors: already_running ("ktuned already running (pid N)", the pid read from the
  // lock file), io_error naming the file.
  [[nodiscard]] static Result<InstanceLock> acquire(const std::string& lock_file,
                                                    const std::string& pid_file);

  // One daemon per database, whatever its instance: the same lock on `<db_path>.lock` (no pid
  // file). Errors: database_in_use naming the database and the holder's pid, io_error.
  [[nodiscard]] static Result<InstanceLock> acquire_database(const std::string& db_path);

  InstanceLock(InstanceLock&&) noexcept = default;
  InstanceLock& operator=(InstanceLock&&) noexcept = default;
  // Removes the pid file, then releases the lock.
  ~InstanceLock();

private:
  InstanceLock(UniqueFd fd, std::string pid_file) : m_fd(std::move(fd)), m_pid_file(std::move(pid_file)) {}
  UniqueFd m_fd;
  std::string m_pid_file;
};

// Writes all of `text` to `fd`, retrying short writes and EINTR. False on an error (errno set).
[[nodiscard]] bool write_all(int fd, std::string_view text);

// Creates `dir` and missing parents; directories it creates get mode 0700, existing ones are
// left as they are. Errors: io_error naming the directory.
[[nodiscard]] Result<void> ensure_private_dir(const std::string& dir);

} // namespace ktune::daemon
