#include "compiler/subprocess.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ktune {

namespace {

// posix_spawn_file_actions_t with a destructor.
class SpawnActions {
public:
  SpawnActions() { m_ok = ::posix_spawn_file_actions_init(&m_actions) == 0; }
  ~SpawnActions() {
    if (m_ok) ::posix_spawn_file_actions_destroy(&m_actions);
  }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  [[nodiscard]] bool ok() const { return m_ok; }
  posix_spawn_file_actions_t* get() { return &m_actions; }

private:
  posix_spawn_file_actions_t m_actions{};
  bool m_ok = false;
};

Error spawn_error(const std::string& program, const std::string& what, int err) {
  return make_error(ErrorCode::spawn_failed,
                    "cannot run '" + program + "': " + what + ": " + std::strerror(err));
}

} // namespace

Result<ProcessResult> run_captured(const std::vector<std::string>& argv,
                                   std::size_t max_output_bytes) {
  if (argv.empty() || argv.front().empty()) {
    return make_error(ErrorCode::spawn_failed, "cannot run a process: the command line is empty");
  }
  const std::string& program = argv.front();

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return spawn_error(program, "pipe2", errno);
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);

  SpawnActions actions;
  if (!actions.ok()) return spawn_error(program, "posix_spawn_file_actions_init", ENOMEM);
  int rc = ::posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null",
                                              O_RDONLY, 0);
  for (const int target : {STDOUT_FILENO, STDERR_FILENO}) {
    if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), target);
  }
  if (rc != 0) return spawn_error(program, "posix_spawn_file_actions", rc);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = -1;
  rc = ::posix_spawnp(&pid, program.c_str(), actions.get(), nullptr, args.data(), environ);
  if (rc != 0) return spawn_error(program, "posix_spawnp", rc);
  write_end.reset();

  ProcessResult result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;
    const std::size_t room = max_output_bytes - result.output.size();
    const auto got = static_cast<std::size_t>(n);
    if (got > room) result.truncated = true;
    result.output.append(buffer, got < room ? got : room);
  }
  read_end.reset();

  int status = 0;
  for (;;) {
    const pid_t waited = ::waitpid(pid, &status, 0);
    if (waited == pid) break;
    if (waited < 0 && errno == EINTR) continue;
    result.end = ProcessEnd::unknown; // ECHILD: reaped by someone else
    return result;
  }
  if (WIFEXITED(status)) {
    result.end = ProcessEnd::exited;
    result.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.end = ProcessEnd::signaled;
    result.code = WTERMSIG(status);
  }
  return result;
}

} // namespace ktune
