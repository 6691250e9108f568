#pragma once
// StopGuard: ktuned's side of ktune-worker --stop-guard (worker/stop_guard.hpp), the process that
// kills the worker groups ktuned may stop (the borrowed compile, daemon/worker_pool.hpp) once
// ktuned has exited, however it exited. Without it a compile stopped when ktuned is killed stays
// stopped for good under a reaper in ktuned's session. The pool starts one guard when it first
// lends the bench CPU, holds each borrowed worker's group before it may stop it and releases the
// group when the worker exits. A group the guard does not hold is never stopped.
// Single-threaded (the io thread).
#include "core/result.hpp"
#include "core/unique_fd.hpp"
#include "daemon/worker_process.hpp"

#include <memory>
#include <string>
#include <sys/types.h>

namespace ktune::daemon {

class StopGuard {
public:
  // Starts the guard from `worker_path` (ktune-worker) in its own process group; its exit is
  // learnt through `children`.
  static Result<std::shared_ptr<StopGuard>> start(const std::string& worker_path,
                                                  ChildWatch& children);
  // Closes the guard's pipe: it kills what it still holds and exits.
  ~StopGuard() = default;
  StopGuard(const StopGuard&) = delete;
  StopGuard& operator=(const StopGuard&) = delete;

  // Whether the guard has taken `pgid`: false when the guard is gone or cannot be told (then the
  // group must not be stopped).
  [[nodiscard]] bool hold(pid_t pgid);
  void release(pid_t pgid);
  [[nodiscard]] bool alive() const { return *m_alive; }

private:
  StopGuard(UniqueFd fd, pid_t pid, std::shared_ptr<bool> alive)
      : m_fd(std::move(fd)), m_pid(pid), m_alive(std::move(alive)) {}
  bool tell(char sign, pid_t pgid);

  UniqueFd m_fd;                  // the pipe's write end, non-blocking
  pid_t m_pid = -1;
  std::shared_ptr<bool> m_alive;  // false once the guard exited or its pipe broke
};

} // namespace ktune::daemon
