#include "daemon/stop_guard.hpp"

#include "daemon/log.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

extern char** environ;

namespace ktune::daemon {

Result<std::shared_ptr<StopGuard>> StopGuard::start(const std::string& worker_path,
                                                    ChildWatch& children) {
  const std::string name = "the stop guard " + worker_path + " --stop-guard";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return make_error(ErrorCode::spawn_failed, "cannot start " + name + ": pipe: " + std::strerror(errno));
  }
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  const int flags = ::fcntl(write_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(write_end.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return make_error(ErrorCode::spawn_failed, "cannot start " + name + ": fcntl: " + std::strerror(errno));
  }
  // Its own group: neither a terminal's signals to ktuned's group nor a stop reach it.
  auto spawned = spawn_group_leader(name, {worker_path, "--stop-guard", "--fd", "3"}, environ,
                                    read_end.get());
  if (!spawned) return spawned.error();
  const pid_t pid = *spawned;

  auto alive = std::make_shared<bool>(true);
  children.watch(pid, [alive, pid](int wait_status) {
    *alive = false;
    KTUNE_LOG(warn) << "stop guard " << pid << " " << describe_wait_status(wait_status)
                    << "; the compile lent the bench CPU is no longer stopped while it measures";
  });
  KTUNE_LOG(debug) << "stop guard " << pid << " started";
  return std::shared_ptr<StopGuard>(new StopGuard(std::move(write_end), pid, std::move(alive)));
}

bool StopGuard::tell(char sign, pid_t pgid) {
  if (!*m_alive) return false;
  const std::string line = sign + std::to_string(pgid) + "\n";  // one write under PIPE_BUF: atomic
  const ssize_t wrote = ::write(m_fd.get(), line.data(), line.size());
  if (wrote == static_cast<ssize_t>(line.size())) return true;
  if (wrote < 0 && errno == EPIPE) {
    *m_alive = false;
    KTUNE_LOG(warn) << "stop guard " << m_pid << " is gone (its pipe broke); the compile lent "
                       "the bench CPU is no longer stopped while it measures";
  }
  return false;
}

bool StopGuard::hold(pid_t pgid) { return tell('+', pgid); }

void StopGuard::release(pid_t pgid) { (void)tell('-', pgid); }

} // namespace ktune::daemon
