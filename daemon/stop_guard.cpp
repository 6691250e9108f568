#include "daemon/stop_guard.hpp"

#include "daemon/log.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace ktune::daemon {

namespace {

Error guard_error(const std::string& path, const std::string& what, int err) {
  return make_error(k_spawn_error, "cannot start the stop guard " + path + " --stop-guard: " +
                                       what + ": " + std::strerror(err));
}

} // namespace

Result<std::shared_ptr<StopGuard>> StopGuard::start(const std::string& worker_path,
                                                    ChildWatch& children) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return guard_error(worker_path, "pipe", errno);
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  if (read_end.get() == 3) {  // dup2(3, 3) would keep FD_CLOEXEC set
    read_end = UniqueFd(::fcntl(read_end.get(), F_DUPFD_CLOEXEC, 10));
    if (!read_end.valid()) return guard_error(worker_path, "fcntl", errno);
  }
  const int flags = ::fcntl(write_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(write_end.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return guard_error(worker_path, "fcntl", errno);
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  sigset_t all_signals;
  sigset_t no_signals;
  sigfillset(&all_signals);
  sigemptyset(&no_signals);
  int rc = posix_spawn_file_actions_adddup2(&actions, read_end.get(), 3);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  // Its own group: neither a terminal's signals to ktuned's group nor a stop reach it.
  if (rc == 0) {
    rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                             POSIX_SPAWN_SETSIGMASK);
  }
  if (rc == 0) rc = posix_spawnattr_setpgroup(&attr, 0);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &all_signals);
  if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &no_signals);
  pid_t pid = -1;
  if (rc == 0) {
    std::vector<std::string> args = {worker_path, "--stop-guard", "--fd", "3"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    rc = ::posix_spawn(&pid, worker_path.c_str(), &actions, &attr, argv.data(), environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return guard_error(worker_path, "posix_spawn", rc);

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
