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
#include <ctime>
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
constexpr int k_ready_fd = 3;  // the fd ktuned sees as --ready-fd
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

// No ktuned holds the instance: whatever a killed one left behind (its socket, if ours, and its
// pid file) is stale and removed.
void remove_stale_files(const SafeDir& runtime, const SafeDir& sockets,
                        const std::string& socket_name, const std::string& pid_file) {
  struct stat st {};
  if (::fstatat(sockets.fd(), socket_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISSOCK(st.st_mode) && st.st_uid == ::geteuid()) {
    ::unlinkat(sockets.fd(), socket_name.c_str(), 0);
  }
  ::unlinkat(runtime.fd(), std::filesystem::path(pid_file).filename().c_str(), 0);
}

// The last lines of `path` from byte `offset`.
std::string log_tail(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > k_log_tail_lines) lines.erase(lines.begin());
  }
  std::string text;
  for (const auto& l : lines) text += "  " + l + '\n';
  return text;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// "10 s", or "1500 ms" where it is not whole seconds.
std::string describe_timeout(milliseconds timeout) {
  if (timeout.count() % 1000 == 0) return std::to_string(timeout.count() / 1000) + " s";
  return std::to_string(timeout.count()) + " ms";
}

std::string now_text() {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

// Moves `fd` to a number >= 10 (close-on-exec), so the spawn's dup2 onto 0-3 cannot clobber it.
Result<UniqueFd> raise_fd(const UniqueFd& fd, const char* what) {
  const int raised = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 10);
  if (raised < 0) return io_error(std::string("cannot duplicate the ") + what, errno);
  return UniqueFd(raised);
}

// Writes "--- <time> <banner>: <argv>" to the log; the log's size after it (where the
// daemon's own lines start).
std::uintmax_t write_banner(const UniqueFd& log, const std::string& banner,
                            const std::vector<std::string>& argv) {
  struct stat st {};
  std::uintmax_t offset = ::fstat(log.get(), &st) == 0 ? static_cast<std::uintmax_t>(st.st_size) : 0;
  std::string line = "--- " + now_text() + " " + banner + ":";
  for (const auto& a : argv) line += " " + a;
  line += '\n';
  if (::write(log.get(), line.data(), line.size()) > 0) offset += line.size();
  return offset;
}

struct Spawned {
  pid_t pid = -1;
  UniqueFd ready;  // read end of the readiness pipe
};

// Starts `argv[0]` detached (own session, default signal dispositions, empty mask), stdin
// /dev/null, stdout+stderr onto `log`, the write end of a fresh pipe as fd 3, every other
// descriptor closed.
Result<Spawned> spawn_detached(const std::vector<std::string>& args, const UniqueFd& log) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return io_error("cannot create the ready pipe", errno);
  UniqueFd read_end(fds[0]);
  UniqueFd pipe_write(fds[1]);
  // Only the read end is non-blocking: draining it after the child exited must not hang on a
  // descendant that still holds the write end.
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  auto write_end = raise_fd(pipe_write, "ready pipe");
  if (!write_end) return write_end.error();
  auto log_fd = raise_fd(log, "log file descriptor");
  if (!log_fd) return log_fd.error();

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, write_end->get(), k_ready_fd);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, log_fd->get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, log_fd->get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, k_ready_fd + 1);
  sigset_t empty;
  sigset_t defaults;
  sigemptyset(&empty);
  sigfillset(&defaults);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setsigmask(&attr, &empty);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);

  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, &attr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) return io_error("cannot start " + args[0], rc);
  return Spawned{pid, std::move(read_end)};
}

// The readiness wait's view of the log: where the daemon's lines start.
struct LogView {
  std::string path;
  std::uintmax_t offset = 0;
  [[nodiscard]] std::string tail() const { return log_tail(path, offset); }
};

// The child exited before a ready line: already_running when it lost the instance lock to
// another start (its log says so), else daemon_failed with the end of its log.
Error exited_early(int status, const LogView& log) {
  const std::string tail = log.tail();
  if (tail.find("ktuned already running") != std::string::npos) {
    return make_error(ErrorCode::already_running, tail);
  }
  return make_error(ErrorCode::daemon_failed, "ktuned " + describe_wait_status(status) +
                                                 " before it was ready; the end of " + log.path +
                                                 ":\n" + tail);
}

// Reads what is in the ready pipe into `received`; false at its end (every writer closed).
Result<bool> drain(const UniqueFd& ready, std::string& received) {
  char buf[256];
  for (;;) {
    const ssize_t got = ::read(ready.get(), buf, sizeof(buf));
    if (got > 0) {
      received.append(buf, static_cast<std::size_t>(got));
      continue;
    }
    if (got == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return true;
    return io_error("read from the ready pipe failed", errno);
  }
}

// Reads "ready <pid>\n" from the child's pipe. Errors name what happened to the child instead
// (exited_early; a timeout sends it SIGTERM). The pipe is drained before the child's exit status
// is looked at, so a daemon that reported ready and exited at once still counts as ready.
Result<std::int64_t> wait_ready(const Spawned& child, const LogView& log, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string received;
  bool open = true;
  for (;;) {
    if (auto nl = received.find('\n'); nl != std::string::npos) {
      const std::string line = received.substr(0, nl);
      std::int64_t pid = 0;
      if (std::sscanf(line.c_str(), "ready %" SCNd64, &pid) == 1 && pid > 0) return pid;
      return make_error(ErrorCode::bad_reply, "ktuned wrote '" + line +
                                                 "' on its ready fd, expected 'ready <pid>'; the end of " +
                                                 log.path + ":\n" + log.tail());
    }
    if (Clock::now() >= deadline) {
      ::kill(child.pid, SIGTERM);
      return make_error(ErrorCode::daemon_failed,
                        "ktuned (pid " + std::to_string(child.pid) + ") did not report ready within " +
                            describe_timeout(timeout) + " and was sent SIGTERM; the end of " +
                            log.path + ":\n" + log.tail());
    }
    if (open) {
      pollfd p{child.ready.get(), POLLIN, 0};
      const int n = ::poll(&p, 1, 100);
      if (n < 0 && errno != EINTR) return io_error("poll on the ready pipe failed", errno);
      if (n > 0) {
        auto still_open = drain(child.ready, received);
        if (!still_open) return still_open.error();
        open = *still_open;
        if (received.find('\n') != std::string::npos) continue;
      }
    } else {
      // The pipe closed without a line; a descendant may still hold it, so watch the child.
      std::this_thread::sleep_for(k_poll_step);
    }
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      // Whatever the child wrote before exiting is already in the pipe: read it first.
      if (open) (void)drain(child.ready, received);
      if (received.find('\n') != std::string::npos) continue;
      return exited_early(status, log);
    }
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

// Spawns ktuned with `options.args` onto its log and waits for its ready line.
Result<DaemonStarted> spawn_and_wait(const InstancePaths& paths, const StartOptions& options) {
  auto exe = daemon_executable();
  if (!exe) return exe.error();
  DaemonStarted started;
  auto log = open_daemon_log(paths, started.log_path);
  if (!log) return log.error();
  std::vector<std::string> argv{*exe, "--ready-fd", std::to_string(k_ready_fd)};
  argv.insert(argv.end(), options.args.begin(), options.args.end());
  const LogView view{started.log_path, write_banner(*log, options.banner, argv)};
  auto child = spawn_detached(argv, *log);
  if (!child) return child.error();
  auto pid = wait_ready(*child, view, options.ready_timeout);
  if (!pid && pid.error().code == ErrorCode::already_running) return DaemonStarted{};
  if (!pid) return pid.error();
  started.started = true;
  started.pid = *pid;
  return started;
}

// KTUNE_AUTOSTART_IDLE_S, else `fallback`.
Result<double> autostart_idle_s(double fallback) {
  const char* env = std::getenv("KTUNE_AUTOSTART_IDLE_S");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const double value = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(value >= 0)) {
    return make_error(ErrorCode::bad_request, std::string("KTUNE_AUTOSTART_IDLE_S must be a number of "
                                                          "seconds >= 0, found '") + env + "'");
  }
  return value;
}

} // namespace

Result<UniqueFd> open_daemon_log(const InstancePaths& paths, std::string& path) {
  auto dir = SafeDir::open(paths.log_dir, DirCreate::yes);
  if (!dir) return dir.error();
  path = dir->file_path("ktuned.log");
  return dir->open_file("ktuned.log", O_WRONLY | O_APPEND, FileCreate::either);
}

Result<DaemonStarted> start_daemon(const StartOptions& options) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string socket = options.socket.empty() ? paths.socket : options.socket;
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
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (conn) return DaemonStarted{};
  if (conn.error().code != ErrorCode::not_running) return conn.error();
  // A daemon that holds the instance lock but does not answer yet is starting.
  if (!instance_free(*runtime, std::filesystem::path(paths.lock_file).filename().string())) {
    return DaemonStarted{};
  }
  remove_stale_files(*runtime, *sockets, socket_name, paths.pid_file);
  return spawn_and_wait(paths, options);
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
  auto idle_s = autostart_idle_s(options.idle_s);
  if (!idle_s) return idle_s.error();
  std::ostringstream idle;
  idle << *idle_s;
  StartOptions start{options.socket, {"--idle-s", idle.str()}, "ktune autostart",
                     options.ready_timeout, options.lock_timeout};
  if (!options.socket.empty()) {
    start.args.push_back("--socket");
    start.args.push_back(socket);
  }
  auto started = start_daemon(start);
  if (!started) return started.error();
  if (started->started && options.on_started) options.on_started(started->pid, started->log_path);
  return connect_within(socket, options.ready_timeout);
}

} // namespace ktune::cli
