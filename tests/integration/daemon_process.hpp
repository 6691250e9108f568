#pragma once
// DaemonProcess: a real ktuned started for one test, with KTUNE_HOME pointing at the test's
// temporary directory and a readiness pipe (--ready-fd). The destructor stops a daemon still
// running (SIGTERM, then SIGKILL) so that a failing test never leaves one behind.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace ktune::test {

class DaemonProcess {
public:
  // Starts bin_dir()/ktuned (tests/support/paths.hpp) with `args` plus --ready-fd, KTUNE_HOME=`home`; its stderr goes
  // to `stderr_path` when given (else the test's), its stdout to /dev/null.
  // `wrapper`, when given, runs ktuned (e.g. {"/usr/bin/prlimit", "--nofile=64:64", "--"}).
  DaemonProcess(const std::string& home, std::vector<std::string> args,
                const std::string& stderr_path = "", std::vector<std::string> wrapper = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Waits for "ready <pid>". False when the daemon exited first or the time ran out.
  [[nodiscard]] bool wait_ready(std::chrono::milliseconds timeout);
  // The exit code (128 + signal for a signal); nullopt when still running after `timeout`.
  [[nodiscard]] std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  void signal(int sig) const;

  [[nodiscard]] pid_t pid() const { return m_pid; }
  [[nodiscard]] int ready_pid() const { return m_ready_pid; }
  [[nodiscard]] std::string socket() const { return m_home + "/ktuned.sock"; }

private:
  std::string m_home;
  pid_t m_pid = -1;
  int m_ready_fd = -1;
  int m_ready_pid = 0;
  std::optional<int> m_exit_code;
};

} // namespace ktune::test
