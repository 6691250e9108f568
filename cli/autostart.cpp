#include "cli/autostart.hpp"

#include "core/paths.hpp"
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
  return make_error("io_error", what + ": " + std::strerror(err));
}

// Creates `dir` and its parents, 0700 for the ones created here.
bool make_private_dirs(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return true;
  const auto parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty() && parent != dir && !make_private_dirs(parent.string())) return false;
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

Result<std::string> daemon_executable() {
  std::string path;
  if (const char* env = std::getenv("KTUNE_DAEMON"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return make_error("io_error", "cannot locate the running executable: " + ec.message());
    path = (self.parent_path() / "ktuned").string();
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return make_error("not_found", "expected the ktuned executable at " + path + " (" +
                                       std::strerror(errno) + "); set KTUNE_DAEMON to its path");
  }
  return path;
}

// Takes an exclusive flock on `path`, waiting at most `timeout`.
Result<UniqueFd> lock_file(const std::string& path, milliseconds timeout) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return io_error("cannot open the start lock " + path, errno);
  const auto deadline = Clock::now() + timeout;
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return io_error("cannot lock " + path, errno);
    if (Clock::now() >= deadline) {
      return make_error("io_error", "another ktune has held the start lock " + path + " for " +
                                        std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(k_poll_step);
  }
  return fd;
}

// True when no process holds the instance lock, i.e. no ktuned runs for this instance.
bool instance_free(const std::string& instance_lock) {
  UniqueFd fd(::open(instance_lock.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return errno == ENOENT;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return false;
  ::flock(fd.get(), LOCK_UN);
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
                             const std::string& log_path, milliseconds ready_timeout) {
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log.valid()) return io_error("cannot open the log " + log_path, errno);
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
      return make_error("daemon_failed", "ktuned wrote '" + text.substr(0, newline) +
                                             "' on its ready fd, expected 'ready <pid>'");
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return make_error("daemon_failed", "ktuned (pid " + std::to_string(pid) +
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
    return make_error("daemon_failed", "ktuned " + describe_status(status) +
                                           " before it was ready; the end of " + log_path +
                                           ":\n" + tail);
  }
}

// Connects, retrying while a daemon that holds the instance lock is still starting.
Result<Connection> connect_within(const std::string& socket, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto conn = Connection::connect(socket, k_connect_timeout);
    if (conn || conn.error().code != "not_running" || Clock::now() >= deadline) return conn;
    std::this_thread::sleep_for(k_poll_step);
  }
}

} // namespace

Result<Connection> connect_or_start(const AutostartOptions& options) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string socket = options.socket.empty() ? paths.socket : options.socket;

  auto conn = Connection::connect(socket, k_connect_timeout);
  if (conn || conn.error().code != "not_running") return conn;
  if (const char* off = std::getenv("KTUNE_NO_AUTOSTART");
      off != nullptr && *off != '\0' && std::string(off) != "0") {
    return conn;
  }

  const std::string socket_dir = std::filesystem::path(socket).parent_path().string();
  if (!make_private_dirs(paths.runtime_dir) || !make_private_dirs(socket_dir)) {
    return io_error("cannot create the runtime directory " + socket_dir, errno);
  }
  auto start_lock = lock_file(socket + ".start.lock", options.lock_timeout);
  if (!start_lock) return start_lock.error();

  // The previous holder may have started it while we waited.
  conn = Connection::connect(socket, k_connect_timeout);
  if (conn || conn.error().code != "not_running") return conn;

  if (instance_free(paths.lock_file)) {
    // No ktuned holds the instance: whatever a killed one left behind is stale.
    struct stat st {};
    if (::lstat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(socket.c_str());
    ::unlink(paths.pid_file.c_str());
  } else {
    // A daemon holds the instance lock but does not answer yet: it is starting.
    return connect_within(socket, options.ready_timeout);
  }

  auto exe = daemon_executable();
  if (!exe) return exe.error();
  if (!make_private_dirs(paths.log_dir)) {
    return io_error("cannot create the log directory " + paths.log_dir, errno);
  }
  double idle_s = options.idle_s;
  if (const char* env = std::getenv("KTUNE_AUTOSTART_IDLE_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double value = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(value >= 0)) {
      return make_error("bad_request", std::string("KTUNE_AUTOSTART_IDLE_S must be a number of "
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
  const std::string log_path = paths.log_dir + "/ktuned.log";
  auto started = start_daemon(*exe, args, log_path, options.ready_timeout);
  if (!started) return started.error();
  if (!started->already_running && options.on_started) options.on_started(started->pid, log_path);
  return connect_within(socket, options.ready_timeout);
}

} // namespace ktune::cli
