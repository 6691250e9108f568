#include "tests/support/paths.hpp"
#include "tests/integration/daemon_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace ktune::test {

DaemonProcess::DaemonProcess(const std::string& home, std::vector<std::string> args,
                             const std::string& stderr_path, std::vector<std::string> wrapper)
    : m_home(home) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  m_ready_fd = pipe_fds[0];

  std::vector<std::string> argv_text = std::move(wrapper);
  argv_text.push_back(ktune::test::bin_path("/ktuned"));
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  argv_text.push_back("--ready-fd");
  argv_text.push_back("3");
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KTUNE_HOME=", 11) != 0) env_text.emplace_back(*e);
  }
  env_text.push_back("KTUNE_HOME=" + home);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 3);
  // ktuned writes nothing to stdout; what it starts inherits it. Were one of those to outlive
  // ktuned, it must not hold this test's stdout, which ctest reads to its end.
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  const int rc = ::posix_spawn(&m_pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(m_ready_fd);
    throw std::runtime_error(std::string("cannot start ktuned: ") + std::strerror(rc));
  }
}

DaemonProcess::~DaemonProcess() {
  if (m_ready_fd >= 0) ::close(m_ready_fd);
  if (m_exit_code || m_pid <= 0) return;
  ::kill(m_pid, SIGTERM);
  if (!wait_exit(std::chrono::seconds(10))) {
    ::kill(m_pid, SIGKILL);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
  }
}

bool DaemonProcess::wait_ready(std::chrono::milliseconds timeout) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (text.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{m_ready_fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    char buf[64];
    const ssize_t got = ::read(m_ready_fd, buf, sizeof buf);
    if (got <= 0) return false; // closed without the line: the daemon exited
    text.append(buf, static_cast<std::size_t>(got));
  }
  if (text.rfind("ready ", 0) != 0) return false;
  m_ready_pid = std::stoi(text.substr(6));
  return true;
}

std::optional<int> DaemonProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (m_exit_code) return m_exit_code;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(m_pid, &status, WNOHANG);
    if (r == m_pid) {
      m_exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return m_exit_code;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void DaemonProcess::signal(int sig) const {
  if (!m_exit_code) ::kill(m_pid, sig);
}

} // namespace ktune::test
