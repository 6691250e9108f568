#include "cli/autostart.hpp"

#include "core/paths.hpp"
#include "core/safe_fs.hpp"
#include "core/unique_fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace ktune::cli {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds k_connect_timeout{2000};
constexpr milliseconds k_poll_step{20};
constexpr int k_ready_fd = 3;
constexpr std::size_t k_log_tail_lines = 20;

Error io_error(const std::string& what, int err) {
  return make_error(ErrorCode::io_error, what + ": " + std::strerror(err));
}

// The socket's directory: the runtime directory itself, one made here (0700), or one that
// exists and may be shared as ktuned accepts it (owned by us or root; sticky when others write).
Result<SafeDir> open_socket_dir(const SafeDir& runtime, const std::string& dir) {
  if (dir == runtime.path()) return runtime.duplicate();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return SafeDir::open(dir, DirCreate::yes);
  return SafeDir::open_shared(dir);
}

Result<std::string> daemon_executable() {
  std::string path;
  if (const char* env = std::getenv("KTUNE_DAEMON"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return make_error(ErrorCode::io_error, "cannot locate the running executable: " + ec.message());
    path = (self.parent_path() / "ktuned").string();
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return make_error(ErrorCode::not_found, "expected the ktuned executable at " + path + " (" +
                                       std::strerror(errno) + "); set KTUNE_DAEMON to its path");
  }
  return path;
}

// Takes an exclusive flock on `name` in `dir`, waiting at most `timeout`.
Result<UniqueFd> lock_file(const SafeDir& dir, const std::string& name, milliseconds timeout) {
  const std::string path = dir.file_path(name);
  auto opened = dir.open_file(name, O_RDWR, FileCreate::either);
  if (!opened) return opened.error();
  UniqueFd fd = std::move(*opened);
  const auto deadline = Clock::now() + timeout;
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return io_error("cannot lock " + path, errno);
    if (Clock::now() >= deadline) {
      return make_error(ErrorCode::io_error, "another ktune has held the start lock " + path + " for " +
                                        std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(k_poll_step);
  }
  return fd;
}

// True when no process holds the instance lock `name` in `dir`, i.e. no ktuned runs for this
// instance.
bool instance_free(const SafeDir& dir, const std::string& name) {
  if (!dir.contains(name)) return true;
  auto fd = dir.open_file(name, O_RDWR, FileCreate::existing);
  if (!fd) return false;
  if (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) return false;
  ::flock(fd->get(), LOCK_UN);
  return true;
}

// The last lines of `path` from byte `offset`.
std::string log_tail(const std::string& path, std::streamoff offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(offset);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > k_log_tail_lines) lines.erase(lines.begin());
  }
  std::string text;
  for (const auto& l : lines) text += "  " + l + '\n';
  return text;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped";
}

struct Started {
  bool already_running = false;   // ours lost the race to a daemon started elsewhere
  std::int64_t pid = 0;           // the pid ktuned reported ready with
};

// Spawns ktuned detached and waits for its ready line.
Result<Started> start_daemon(const std::string& exe, const std::vector<std::string>& args,
                             UniqueFd log, const std::string& log_path, milliseconds ready_timeout) {
  struct stat st {};
  const std::streamoff offset = ::fstat(log.get(), &st) == 0 ? st.st_size : 0;

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return io_error("cannot create the ready pipe", errno);
  UniqueFd ready(fds[0]);
  UniqueFd write_end(fds[1]);
  // dup2 onto 0..3 below must not clobber the descriptors it reads from.
  UniqueFd raised_write(::fcntl(write_end.get(), F_DUPFD_CLOEXEC, 10));
  UniqueFd raised_log(::fcntl(log.get(), F_DUPFD_CLOEXEC, 10));
  if (!raised_write.valid() || !raised_log.valid()) return io_error("fcntl", errno);
  write_end.reset();
  log.reset();

  std::vector<std::string> argv_text = {exe};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, raised_write.get(), k_ready_fd);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, raised_log.get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, raised_log.get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, k_ready_fd + 1);
  sigset_t empty;
  sigset_t defaults;
  sigemptyset(&empty);
  sigfillset(&defaults);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setsigmask(&attr, &empty);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  raised_write.reset();
  raised_log.reset();
  if (rc != 0) return io_error("cannot start " + exe, rc);

  std::string text;
  const auto deadline = Clock::now() + ready_timeout;
  for (;;) {
    if (const auto newline = text.find('\n'); newline != std::string::npos) {
      std::int64_t ready_pid = 0;
      if (std::sscanf(text.c_str(), "ready %" SCNd64, &ready_pid) == 1 && ready_pid > 0) {
        return Started{false, ready_pid};
      }
      return make_error(ErrorCode::daemon_failed, "ktuned wrote '" + text.substr(0, newline) +
                                             "' on its ready fd, expected 'ready <pid>'");
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return make_error(ErrorCode::daemon_failed, "ktuned (pid " + std::to_string(pid) +
                                             ") did not report ready within " +
                                             std::to_string(ready_timeout.count()) +
                                             " ms; the end of " + log_path + ":\n" +
                                             log_tail(log_path, offset));
    }
    pollfd p{ready.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("poll on the ready pipe", errno);
    if (n == 0) continue;
    char buf[64];
    const ssize_t got = ::read(ready.get(), buf, sizeof buf);
    if (got > 0) {
      text.append(buf, static_cast<std::size_t>(got));
      continue;
    }
    // The pipe closed without a ready line: the daemon exited. Collect it (it is our child).
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string tail = log_tail(log_path, offset);
    if (tail.find("already running") != std::string::npos) return Started{true};
    return make_error(ErrorCode::daemon_failed, "ktuned " + describe_status(status) +
                                           " before it was ready; the end of " + log_path +
                                           ":\n" + tail);
  }
}

// Connects, retrying while a daemon that holds the instance lock is still starting.
Result<Connection> connect_within(const std::string& socket, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto conn = Connection::connect(socket, k_connect_timeout);
    if (conn || conn.error().code != ErrorCode::not_running || Clock::now() >= deadline) return conn;
    std::this_thread::sleep_for(k_poll_step);
  }
}

} // namespace

Result<UniqueFd> open_daemon_log(const InstancePaths& paths, std::string& path) {
  auto dir = SafeDir::open(paths.log_dir, DirCreate::yes);
  if (!dir) return dir.error();
  path = dir->file_path("ktuned.log");
  return dir->open_file("ktuned.log", O_WRONLY | O_APPEND, FileCreate::either);
}

Result<Connection> connect_or_start(const AutostartOptions& options) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string socket = options.socket.empty() ? paths.socket : options.socket;

  auto conn = Connection::connect(socket, k_connect_timeout);
  if (conn || conn.error().code != ErrorCode::not_running) return conn;
  if (const char* off = std::getenv("KTUNE_NO_AUTOSTART");
      off != nullptr && *off != '\0' && std::string(off) != "0") {
    return conn;
  }

  std::string socket_dir = std::filesystem::path(socket).parent_path().string();
  if (socket_dir.empty()) socket_dir = ".";
  // Checked before anything in them is opened: another user's /tmp/ktune-<uid> stops us here.
  auto runtime = SafeDir::open(paths.runtime_dir, DirCreate::yes);
  if (!runtime) return runtime.error();
  auto sockets = open_socket_dir(*runtime, socket_dir);
  if (!sockets) return sockets.error();
  const std::string socket_name = std::filesystem::path(socket).filename().string();
  auto start_lock = lock_file(*sockets, socket_name + ".start.lock", options.lock_timeout);
  if (!start_lock) return start_lock.error();

  // The previous holder may have started it while we waited.
  conn = Connection::connect(socket, k_connect_timeout);
  if (conn || conn.error().code != ErrorCode::not_running) return conn;

  const auto in_runtime = [](const std::string& path) {
    return std::filesystem::path(path).filename().string();
  };
  if (instance_free(*runtime, in_runtime(paths.lock_file))) {
    // No ktuned holds the instance: whatever a killed one left behind is stale (ours only).
    struct stat st {};
    if (::fstatat(sockets->fd(), socket_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISSOCK(st.st_mode) && st.st_uid == ::geteuid()) {
      ::unlinkat(sockets->fd(), socket_name.c_str(), 0);
    }
    ::unlinkat(runtime->fd(), in_runtime(paths.pid_file).c_str(), 0);
  } else {
    // A daemon holds the instance lock but does not answer yet: it is starting.
    return connect_within(socket, options.ready_timeout);
  }

  auto exe = daemon_executable();
  if (!exe) return exe.error();
  std::string log_path;
  auto log = open_daemon_log(paths, log_path);
  if (!log) return log.error();
  double idle_s = options.idle_s;
  if (const char* env = std::getenv("KTUNE_AUTOSTART_IDLE_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double value = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(value >= 0)) {
      return make_error(ErrorCode::bad_request, std::string("KTUNE_AUTOSTART_IDLE_S must be a number of "
                                                   "seconds >= 0, found '") + env + "'");
    }
    idle_s = value;
  }
  std::ostringstream idle;
  idle << idle_s;
  std::vector<std::string> args = {"--ready-fd", std::to_string(k_ready_fd), "--idle-s",
                                   idle.str()};
  if (!options.socket.empty()) {
    args.push_back("--socket");
    args.push_back(socket);
  }
  auto started = start_daemon(*exe, args, std::move(*log), log_path, options.ready_timeout);
  if (!started) return started.error();
  if (!started->already_running && options.on_started) options.on_started(started->pid, log_path);
  return connect_within(socket, options.ready_timeout);
}

} // namespace ktune::cli
