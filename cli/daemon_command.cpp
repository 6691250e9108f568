#include "cli/daemon_command.hpp"

#include "cli/autostart.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "client/client.hpp"
#include "core/paths.hpp"
#include "core/unique_fd.hpp"

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds k_probe_timeout{5000};       // stats while starting or stopping
constexpr std::chrono::seconds k_ready_timeout{10};
constexpr std::chrono::seconds k_stop_timeout{10};
constexpr int k_ready_fd = 3;                       // the fd ktuned sees as --ready-fd
constexpr std::size_t k_log_tail_lines = 20;

json op(const char* name) { return json{{"op", name}}; }

// ---- processes and files -----------------------------------------------------------------------

// Moves `fd` to a number >= 10 (close-on-exec), so the spawn's dup2 onto 0-3 cannot clobber it.
Result<UniqueFd> raise_fd(UniqueFd fd, const char* what) {
  int raised = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 10);
  if (raised < 0)
    return make_error(ErrorCode::io_error, std::string("cannot duplicate the ") + what + ": " +
                                      std::strerror(errno));
  return UniqueFd(raised);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// The last lines of `path` written after byte `offset`.
std::string log_tail(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
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

Result<std::string> daemon_executable() {
  std::string path;
  if (const char* env = std::getenv("KTUNE_DAEMON"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec)
      return make_error(ErrorCode::io_error, "cannot locate the ktune executable (/proc/self/exe): " +
                                        ec.message());
    path = (self.parent_path() / "ktuned").string();
  }
  if (::access(path.c_str(), X_OK) != 0)
    return make_error(ErrorCode::not_found, "expected the ktuned executable at " + path + " (" +
                                       std::strerror(errno) +
                                       "); set KTUNE_DAEMON to its path");
  return path;
}

// True once `pid` no longer exists (or is a zombie nobody reaped yet).
bool process_gone(std::int64_t pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

struct Spawned {
  pid_t pid = -1;
  UniqueFd ready;  // read end of the readiness pipe
};

// Starts `argv[0]` detached (own session), stdin /dev/null, stdout+stderr onto `log`, the write
// end of a fresh pipe as fd 3, every other descriptor closed.
Result<Spawned> spawn_detached(const std::vector<std::string>& args, const UniqueFd& log) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return make_error(ErrorCode::io_error, std::string("cannot create the ready pipe: ") +
                                      std::strerror(errno));
  UniqueFd read_end(fds[0]);
  // Only the read end is non-blocking: draining it after the child exited must not hang on a
  // descendant that still holds the write end.
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  auto write_end = raise_fd(UniqueFd(fds[1]), "ready pipe");
  if (!write_end) return write_end.error();

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, write_end->get(), k_ready_fd);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, log.get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, log.get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, k_ready_fd + 1);

  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&defaults, sig);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setsigmask(&attr, &empty);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);

  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, &attr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return make_error(ErrorCode::io_error, "cannot start " + args[0] + ": " + std::strerror(rc));
  return Spawned{pid, std::move(read_end)};
}

// Reads "ready <pid>\n" from `ready`. Errors name what happened to the child instead. The pipe
// is drained before the child's exit status is looked at, so a daemon that reported ready and
// exited at once still counts as ready.
Result<std::int64_t> wait_ready(const Spawned& child, const std::string& log,
                                std::uintmax_t log_offset) {
  const auto deadline = Clock::now() + k_ready_timeout;
  std::string received;
  bool eof = false;
  for (;;) {
    if (auto nl = received.find('\n'); nl != std::string::npos) {
      std::string line = received.substr(0, nl);
      std::int64_t pid = 0;
      if (std::sscanf(line.c_str(), "ready %" SCNd64, &pid) == 1 && pid > 0) return pid;
      return make_error(ErrorCode::bad_reply, "ktuned wrote '" + line +
                                         "' on its ready fd, expected 'ready <pid>'; the end of " +
                                         log + ":\n" + log_tail(log, log_offset));
    }
    if (Clock::now() >= deadline) {
      ::kill(child.pid, SIGTERM);
      return make_error(ErrorCode::daemon_failed,
                        "ktuned (pid " + std::to_string(child.pid) + ") did not report ready within " +
                            std::to_string(k_ready_timeout.count()) +
                            " s and was sent SIGTERM; the end of " + log + ":\n" +
                            log_tail(log, log_offset));
    }
    if (!eof) {
      pollfd p{child.ready.get(), POLLIN, 0};
      int n = ::poll(&p, 1, 100);
      if (n < 0 && errno != EINTR)
        return make_error(ErrorCode::io_error, std::string("poll on the ready pipe failed: ") +
                                          std::strerror(errno));
      if (n > 0) {
        char buf[256];
        ssize_t got = ::read(child.ready.get(), buf, sizeof(buf));
        if (got > 0) {
          received.append(buf, static_cast<std::size_t>(got));
          continue;
        }
        if (got == 0) eof = true;
        else if (errno != EINTR && errno != EAGAIN)
          return make_error(ErrorCode::io_error, std::string("read from the ready pipe failed: ") +
                                            std::strerror(errno));
      }
    } else {
      // The pipe closed without a line; a descendant may still hold it, so watch the child.
      std::this_thread::sleep_for(milliseconds(20));
    }
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      // Whatever the child wrote before exiting is already in the pipe: read it first.
      char buf[256];
      ssize_t got = 0;
      while (!eof && (got = ::read(child.ready.get(), buf, sizeof(buf))) > 0)
        received.append(buf, static_cast<std::size_t>(got));
      if (received.find('\n') != std::string::npos) continue;
      const std::string tail = log_tail(log, log_offset);
      // Another start won the instance lock: ours lost the race, the daemon runs.
      if (tail.find("ktuned already running") != std::string::npos) {
        return make_error(ErrorCode::already_running, tail);
      }
      return make_error(ErrorCode::daemon_failed, "ktuned " + describe_wait_status(status) +
                                             " before it was ready; the end of " + log + ":\n" +
                                             tail);
    }
  }
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

std::string now_text() {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}
} // namespace

int daemon_start(const GlobalOptions& global, const DaemonStartOptions& options, Output& io) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string socket = global.socket.empty() ? paths.socket : global.socket;

  auto running = call(socket, op("stats"), k_probe_timeout);
  if (running) {
    if (global.json) print_json(io, *running);
    else io.out << "ktuned already running (pid " << as_text(field(*running, "pid")) << ")\n";
    return k_exit_ok;
  }
  if (running.error().code != ErrorCode::not_running) return report(io, running.error(), socket);

  auto exe = daemon_executable();
  if (!exe) return report(io, exe.error(), socket);

  // The state and log directories 0700 whatever the umask, the log never through a link.
  std::string log_path;
  auto opened = open_daemon_log(paths, log_path);
  if (!opened) return report(io, opened.error(), socket);
  auto log = raise_fd(std::move(*opened), "log file descriptor");
  if (!log) return report(io, log.error(), socket);

  std::vector<std::string> args{*exe, "--ready-fd", std::to_string(k_ready_fd)};
  if (!global.socket.empty()) {
    args.push_back("--socket");
    args.push_back(absolute(global.socket));
  }
  if (!options.config.empty()) {
    args.push_back("--config");
    args.push_back(absolute(options.config));
  }
  for (const auto& dir : options.only_kernel_dirs) {
    args.push_back("--only-kernel-dir");
    args.push_back(absolute(dir));
  }
  for (const auto& dir : options.kernel_dirs) {
    args.push_back("--kernel-dir");
    args.push_back(absolute(dir));
  }

  struct stat st{};
  std::uintmax_t log_offset = ::fstat(log->get(), &st) == 0 ? static_cast<std::uintmax_t>(st.st_size)
                                                            : 0;
  std::string banner = "--- " + now_text() + " ktune daemon start:";
  for (const auto& a : args) banner += " " + a;
  banner += '\n';
  if (::write(log->get(), banner.data(), banner.size()) > 0) log_offset += banner.size();

  auto child = spawn_detached(args, *log);
  if (!child) return report(io, child.error(), socket);
  auto pid = wait_ready(*child, log_path, log_offset);
  if (!pid && pid.error().code == ErrorCode::already_running) {
    // Started at the same time as another start, which won: report that daemon once it answers,
    // as a start finding it running would.
    const auto deadline = Clock::now() + k_ready_timeout;
    for (;;) {
      auto answered = call(socket, op("stats"), k_probe_timeout);
      if (answered) {
        if (global.json) print_json(io, *answered);
        else io.out << "ktuned already running (pid " << as_text(field(*answered, "pid")) << ")\n";
        return k_exit_ok;
      }
      if (Clock::now() >= deadline) return report(io, answered.error(), socket);
      std::this_thread::sleep_for(milliseconds(50));
    }
  }
  if (!pid) {
    io.err << "ktune: " << pid.error().message;
    if (pid.error().message.empty() || pid.error().message.back() != '\n') io.err << '\n';
    return k_exit_error;
  }

  if (global.json) {
    auto stats = call(socket, op("stats"), k_probe_timeout);
    if (!stats) return report(io, stats.error(), socket);
    print_json(io, *stats);
  } else {
    io.out << "ktuned started (pid " << *pid << ", socket " << socket << ", log " << log_path
           << ")\n";
  }
  return k_exit_ok;
}

int daemon_stop(const GlobalOptions& global, Output& io) {
  const std::string socket = socket_path(global);
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (!conn) {
    if (conn.error().code != ErrorCode::not_running) return report(io, conn.error(), socket);
    if (global.json) print_json(io, json{{"running", false}});
    else io.out << "ktuned is not running (socket " << socket << ")\n";
    return k_exit_ok;
  }

  std::int64_t pid = 0;
  if (auto stats = call(*conn, op("stats"), k_probe_timeout); stats)
    pid = as_int(field(*stats, "pid"));
  auto reply = call(*conn, op("shutdown"), k_probe_timeout);
  // A daemon that exits before its reply is flushed closes the connection: that is a stop too.
  if (!reply && reply.error().code != ErrorCode::io_error) return report(io, reply.error(), socket);

  const auto deadline = Clock::now() + k_stop_timeout;
  bool socket_down = false;
  while (Clock::now() < deadline) {
    if (!socket_down) {
      auto probe = Connection::connect(socket, milliseconds(200));
      socket_down = !probe && probe.error().code == ErrorCode::not_running;
    }
    if (socket_down && process_gone(pid)) {
      if (global.json) print_json(io, reply ? *reply : json::object());
      else if (pid > 0) io.out << "ktuned stopped (pid " << pid << ")\n";
      else io.out << "ktuned stopped\n";
      return k_exit_ok;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return report(io, make_error(ErrorCode::stop_timeout, "ktuned" + (pid > 0 ? " (pid " + std::to_string(pid) + ")"
                                                               : std::string()) +
                                              " still answers at " + socket + " " +
                                              std::to_string(k_stop_timeout.count()) +
                                              " s after shutdown"),
                socket);
}

int daemon_status(const GlobalOptions& global, Output& io) {
  const std::string socket = socket_path(global);
  auto stats = call(socket, op("stats"), k_probe_timeout);
  if (!stats) {
    if (stats.error().code != ErrorCode::not_running) return report(io, stats.error(), socket);
    io.err << "ktuned is not running (socket " << socket << ")\n";
    return k_exit_error;
  }
  if (global.json) {
    print_json(io, *stats);
    return k_exit_ok;
  }
  const json& s = *stats;
  io.out << "ktuned is running (pid " << as_text(field(s, "pid")) << ", version "
         << as_text(field(s, "version")) << ")\n";
  io.out << "  uptime       " << format_duration(as_double(field(s, "uptime_s"))) << '\n';
  io.out << "  socket       " << as_text(field(s, "socket")) << '\n';
  io.out << "  database     " << as_text(field(s, "db")) << '\n';
  io.out << "  connections  " << as_text(field(s, "connections")) << '\n';
  io.out << "  jobs         " << as_int(field(s, "jobs_queued")) << " queued, "
         << as_int(field(s, "jobs_running")) << " running\n";
  const json& workers = field(s, "workers");
  io.out << "  workers      "
         << (workers.is_object() ? format_config(workers, ", ") : as_text(workers)) << '\n';
  if (const json& metrics = field(s, "metrics"); metrics.is_string()) {
    const std::string& at = metrics.get<std::string>();
    io.out << "  metrics      "
           << (at.front() == '/' ? "GET /metrics on socket " + at : "http://" + at + "/metrics")
           << '\n';
  }
  // Machine-wide locks that could not serve (docs/operations.md § Locks shared by every user).
  if (const json& lanes = field(s, "lanes"); lanes.is_array()) {
    for (const auto& lane : lanes) {
      const std::string device = as_text(field(lane, "device"));
      if (const json& problem = field(lane, "bench_cpu_claim_problem"); problem.is_string()) {
        io.out << "  locks        " << device << ": no CPU claimed: " << problem.get<std::string>() << '\n';
      }
      const json& lock = field(lane, "measure_lock");
      if (const json& why = field(lock, "unlocked"); why.is_string()) {
        io.out << "  locks        " << device << ": " << as_int(field(lock, "unlocked_measurements"))
               << " measurement(s) without the device lock: " << why.get<std::string>() << '\n';
      }
    }
  }
  return k_exit_ok;
}

int daemon_log(const GlobalOptions& global, std::int64_t lines, bool follow, Output& io) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string log_path = paths.log_dir + "/ktuned.log";
  std::ifstream in(log_path, std::ios::binary);
  if (!in) {
    return report_error(io, ErrorCode::not_found,
                        "no daemon log at " + log_path +
                            " (ktuned writes it when `ktune` starts it; a service logs to its "
                            "journal: journalctl --user -u ktuned)");
  }
  std::vector<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (lines > 0 && tail.size() > static_cast<std::size_t>(lines)) tail.erase(tail.begin());
  }
  if (global.json && !follow) {
    print_json(io, json{{"path", log_path}, {"lines", tail}});
    return k_exit_ok;
  }
  for (const auto& l : tail) io.out << l << '\n';
  io.out << std::flush;
  if (!follow) return k_exit_ok;
  in.clear();
  for (;;) {  // until Ctrl-C
    if (std::getline(in, line)) {
      if (in.eof()) {  // a partial last line: wait for the rest
        in.clear();
        in.seekg(-static_cast<std::streamoff>(line.size()), std::ios::cur);
      } else {
        io.out << line << '\n' << std::flush;
        continue;
      }
    }
    in.clear();
    std::this_thread::sleep_for(milliseconds(200));
  }
}

void add_daemon_commands(CLI::App& app, DaemonCommands& commands) {
  auto* daemon = app.add_subcommand("daemon", "Start, stop or inspect the ktuned daemon");
  daemon->require_subcommand(1);
  daemon->footer("Examples:\n  ktune daemon start --kernel-dir ~/my-kernels\n  ktune daemon status\n"
                 "  ktune daemon stop" + k_exit_codes_help);

  commands.start = daemon->add_subcommand("start", "Start ktuned in the background and wait until it is ready");
  commands.start->add_option("--config", commands.start_options.config, "ktuned configuration file (TOML)")
      ->check(CLI::ExistingFile);
  commands.start->add_option("--kernel-dir", commands.start_options.kernel_dirs,
                    "a directory of kernel families (<name>/kernel.toml) added to the shipped "
                    "ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  commands.start->add_option("--only-kernel-dir", commands.start_options.only_kernel_dirs,
                    "a directory of kernel families used instead of the shipped ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  commands.start->footer(
      "ktuned runs in its own session with stdin from /dev/null and its output appended to\n"
      "ktuned.log in the instance's log directory ($KTUNE_HOME/log, else\n"
      "$XDG_STATE_HOME/ktune/log). ktune waits up to 10 s for it to accept connections and\n"
      "prints the end of the log when it fails. Nothing happens when a daemon already answers.\n"
      "The daemon binary is $KTUNE_DAEMON, else ktuned next to ktune.\n\n"
      "Example:\n  ktune daemon start --config configs/ktuned.toml --kernel-dir kernels_src" +
      k_exit_codes_help);

  commands.stop = daemon->add_subcommand("stop", "Shut ktuned down and wait until it has exited");
  commands.stop->footer("Sends shutdown and waits up to 10 s until the socket stops answering. Succeeds\n"
               "when nothing is running.\n\nExample:\n  ktune daemon stop" + k_exit_codes_help);

  commands.status = daemon->add_subcommand("status", "Show the running daemon (exit 1 when none)");
  commands.status->footer("Prints pid, version, uptime, socket, database, connections, jobs and workers.\n\n"
                 "Examples:\n  ktune daemon status\n  ktune --json daemon status" + k_exit_codes_help);

  commands.log = daemon->add_subcommand("log", "Print the end of the daemon's log");
  commands.log->add_option("-n,--lines", commands.log_lines, "this many last lines (0 = all)")
      ->check(CLI::NonNegativeNumber);
  commands.log->add_flag("-f,--follow", commands.log_follow, "keep printing what ktuned appends (Ctrl-C ends)");
  commands.log->footer("The log of a ktuned that ktune started: ktuned.log in the instance's log\n"
                  "directory ($KTUNE_HOME/log, else $XDG_STATE_HOME/ktune/log). A ktuned run by\n"
                  "systemd logs to its journal (journalctl --user -u ktuned).\n\n"
                  "Examples:\n  ktune daemon log\n  ktune daemon log -f" + k_exit_codes_help);
}

std::optional<int> run_daemon_commands(const DaemonCommands& commands, const GlobalOptions& global,
                                       Output& io) {
  if (commands.start->parsed()) return daemon_start(global, commands.start_options, io);
  if (commands.stop->parsed()) return daemon_stop(global, io);
  if (commands.status->parsed()) return daemon_status(global, io);
  if (commands.log->parsed()) return daemon_log(global, commands.log_lines, commands.log_follow, io);
  return std::nullopt;
}

} // namespace ktune::cli
